#!/usr/bin/env bash
# Session 32's 10-minute nightly campaign on the H200, across two device calls (a command may run
# 600 s at most): `start WAIT` launches scripts/h200/final_throughput.sh campaign 600 in its own
# process session (it outlives the call; results in /tmp/camp32, "$RESULTS" being wiped by
# drive.sh) and then waits up to WAIT s, printing the processes' progress; `collect WAIT` (the
# next call, on the same warm machine) waits up to WAIT s for it to end and copies /tmp/camp32 to
# "$RESULTS/camp32". Kernels: all seven GPU kernels; emulated in $PROCS_emulated processes
# (default 9), every other kernel in 1, plus the 120 s cProfile emulated campaign: 16 processes.
set -u
C=/tmp/camp32
case "${1:-}" in
start)
  rm -rf "$C"; mkdir -p "$C"
  VLLM_DIR=/tmp/vllm_py
  if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
    mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR"
  fi
  export PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD"
  (python3 -c "import torch; torch.zeros(1, device='cuda')" && ls ~/.cache/mla-conformance/cubin) > "$C/warm.txt" 2>&1
  RESULTS="$C" PROCS=1 PROCS_emulated="${PROCS_emulated:-9}" setsid nohup bash -c \
    'bash scripts/h200/final_throughput.sh campaign 600 > /tmp/camp32/campaign.log 2>&1; touch /tmp/camp32/DONE' \
    > /dev/null 2>&1 < /dev/null &
  end=$(( $(date +%s) + ${2:-570} ))
  while [ "$(date +%s)" -lt "$end" ] && [ ! -f "$C/DONE" ]; do sleep 15; done
  echo "--- progress at $(date +%T)"
  for f in "$C"/throughput/fuzz-*.err; do echo "$(basename "$f"): $(tail -c 400 "$f" | tr '\r' '\n' | grep fuzz | tail -1)"; done
  ;;
collect)
  end=$(( $(date +%s) + ${2:-150} ))
  while [ "$(date +%s)" -lt "$end" ] && [ ! -f "$C/DONE" ]; do sleep 5; done
  [ -f "$C/DONE" ] && echo "campaign done" || echo "campaign NOT done after the wait"
  mkdir -p "${RESULTS:-results}/camp32"
  cp -r "$C"/* "${RESULTS:-results}/camp32/" 2> /dev/null
  find "${RESULTS:-results}/camp32" -name "*.pstats" -delete
  tail -n 60 "$C/campaign.log"
  ;;
*) echo "usage: camp32.sh start WAIT | collect WAIT" >&2; exit 2 ;;
esac
