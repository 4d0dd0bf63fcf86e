#!/usr/bin/env bash
# Session 35's H200 measurements for issue 21, across device calls (a command may run 600 s at most):
#   camp35.sh start WAIT      scripts/h200/final_throughput.sh campaign 600 for `emulated` alone in
#                             $PROCS processes (default 15) plus the 120 s stage-timer profile
#                             process (PROFILE=timers: CPU seconds and launched torch ops per stage),
#                             detached (scripts/h200/detached_campaign.sh, CAMP=/tmp/camp35)
#   camp35.sh collect WAIT    (the next call) waits for it, copies it to "$RESULTS/camp35"
#   camp35.sh mixed SECONDS   emulated in $GPU_PROCS GPU processes (default 8: where session 29 saw
#                             the one GPU saturate) and $CPU_PROCS `--device cpu` processes (default
#                             7) at once for SECONDS, under "$RESULTS/mixed" (the whole machine's rate)
set -u
C=/tmp/camp35
case "${1:-}" in
start)
  rm -rf "$C"
  CAMP="$C" KERNELS=emulated PROCS="${PROCS:-15}" PROFILE=timers bash scripts/h200/detached_campaign.sh start "${2:-570}"
  ;;
collect)
  CAMP="$C" bash scripts/h200/detached_campaign.sh collect "${2:-150}"
  ;;
mixed)
  S="${2:-150}"
  RESULTS="${RESULTS:-results}/mixed" KERNELS=emulated PROCS="${GPU_PROCS:-8}" CPU_PROCS="${CPU_PROCS:-7}" PROFILE=0 \
    bash scripts/h200/final_throughput.sh campaign "$S"
  ;;
*) echo "usage: camp35.sh start WAIT | collect WAIT | mixed SECONDS" >&2; exit 2 ;;
esac
