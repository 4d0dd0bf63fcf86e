#!/usr/bin/env bash
# Session 35's H200 measurements for issue 21, across device calls (a command may run 600 s at most):
#   camp35.sh start WAIT      scripts/h200/final_throughput.sh campaign 600 for `emulated` alone in
#                             $PROCS processes (default 15) plus the 120 s stage-timer profile
#                             process (PROFILE=timers: CPU seconds and launched torch ops per stage),
#                             in its own process session (it outlives the call; results in
#                             /tmp/camp35), then waits up to WAIT s printing the processes' progress
#   camp35.sh collect WAIT    (the next call, same warm machine) waits up to WAIT s for it to end
#                             and copies /tmp/camp35 to "$RESULTS/camp35"
#   camp35.sh mixed SECONDS   emulated in $GPU_PROCS GPU processes (default 8: where session 29 saw
#                             the one GPU saturate) and $CPU_PROCS `--device cpu` processes (default
#                             7) at once for SECONDS, under "$RESULTS/mixed" (the whole machine's rate)
set -u
C=/tmp/camp35
case "${1:-}" in
start)
  rm -rf "$C"; mkdir -p "$C"
  RESULTS="$C" KERNELS=emulated PROCS="${PROCS:-15}" PROFILE=timers setsid nohup bash -c \
    'bash scripts/h200/final_throughput.sh campaign 600 > /tmp/camp35/campaign.log 2>&1; touch /tmp/camp35/DONE' \
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
  mkdir -p "${RESULTS:-results}/camp35"
  cp -r "$C"/* "${RESULTS:-results}/camp35/" 2> /dev/null
  tail -n 80 "$C/campaign.log"
  ;;
mixed)
  S="${2:-150}"
  RESULTS="${RESULTS:-results}/mixed" KERNELS=emulated PROCS="${GPU_PROCS:-8}" CPU_PROCS="${CPU_PROCS:-7}" PROFILE=0 \
    bash scripts/h200/final_throughput.sh campaign "$S"
  ;;
*) echo "usage: camp35.sh start WAIT | collect WAIT | mixed SECONDS" >&2; exit 2 ;;
esac
