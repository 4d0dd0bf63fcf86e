#!/usr/bin/env bash
# A campaign longer than one device call (a command may run 600 s at most), across two calls:
#   CAMP=DIR detached_campaign.sh start WAIT     scripts/h200/final_throughput.sh campaign $CAMP_S
#       (default 600) in its own process session (it outlives the call), results under DIR
#       (RESULTS=DIR; "$RESULTS" of the call itself is wiped by drive.sh), DIR/DONE when it
#       ends; then waits up to WAIT s, printing the processes' progress
#   CAMP=DIR detached_campaign.sh collect WAIT   (the next call, on the same warm machine) waits
#       up to WAIT s for DONE and copies DIR to "$RESULTS/<DIR's name>" (no .pstats)
# Every other variable (KERNELS, PROCS, PROCS_<kernel>, PROFILE, CPU_PROCS, ...) goes through to
# final_throughput.sh.
set -u
C="${CAMP:?CAMP=DIR names the campaign folder}"
case "${1:-}" in
start)
  rm -rf "$C/throughput" "$C/campaign.log" "$C/DONE"; mkdir -p "$C"  # an earlier run's results, not what the caller put there
  RESULTS="$C" setsid nohup bash -c \
    'bash scripts/h200/final_throughput.sh campaign "${CAMP_S:-600}" > "$0/campaign.log" 2>&1; touch "$0/DONE"' "$C" \
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
  dest="${RESULTS:-results}/$(basename "$C")"
  mkdir -p "$dest"
  cp -r "$C"/* "$dest/" 2> /dev/null
  find "$dest" -name "*.pstats" -delete
  tail -n 80 "$C/campaign.log"
  ;;
*) echo "usage: CAMP=DIR detached_campaign.sh start WAIT | collect WAIT" >&2; exit 2 ;;
esac
