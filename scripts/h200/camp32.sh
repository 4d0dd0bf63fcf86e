#!/usr/bin/env bash
# Session 32's 10-minute nightly campaign on the H200, across two device calls
# (scripts/h200/detached_campaign.sh with CAMP=/tmp/camp32): `start WAIT` sets up vLLM's sources
# and starts it, `collect WAIT` (the next call) waits for it and copies it to "$RESULTS/camp32".
# Kernels: all seven GPU kernels; emulated in $PROCS_emulated processes (default 9), every other
# kernel in 1, plus the 120 s cProfile emulated campaign: 16 processes.
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
  CAMP="$C" PROCS=1 PROCS_emulated="${PROCS_emulated:-9}" bash scripts/h200/detached_campaign.sh start "${2:-570}"
  ;;
collect)
  CAMP="$C" bash scripts/h200/detached_campaign.sh collect "${2:-150}"
  ;;
*) echo "usage: camp32.sh start WAIT | collect WAIT" >&2; exit 2 ;;
esac
