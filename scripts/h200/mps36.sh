#!/usr/bin/env bash
# Session 36's H200 measurements for issue 21: the emulated-alone campaign with and without NVIDIA
# MPS (scripts/h200/mps.sh), then the 10-minute campaign, across two device calls:
#   mps36.sh first S BUDGET   (one call, BUDGET s in all) a 20-s warm-up; the same campaign
#       (final_throughput.sh campaign S, emulated alone, $PROCS processes, default 15, HYP=ci:
#       derandomized, so both runs judge the same examples) without MPS, then with MPS=1, under
#       "$RESULTS/mps36/{plain,mps}"; then the 10-minute nightly campaign with PROFILE=timers,
#       with MPS where the MPS run gave more examples/s, detached (CAMP=/tmp/camp36,
#       scripts/h200/detached_campaign.sh), waiting out the rest of BUDGET
#   mps36.sh start WAIT       the 10-minute campaign alone (MPS=1, PROFILE=timers, detached), then
#       waits up to WAIT s (for a call that has no time for the A/B)
#   mps36.sh collect WAIT     (the next call, on the same warm machine: call it within the
#       machine's idle release, 30 s) waits for it and copies it to "$RESULTS/camp36"
set -u
C=/tmp/camp36
rate() {  # the examples/s of the fuzz summaries under $1, merged as scripts/campaign_table.py merges them
  python3 - "$1" << 'PY'
import json, pathlib, sys
sys.path.insert(0, "scripts")
from campaign_table import merge
summaries = [json.loads(p.read_text()) for p in pathlib.Path(sys.argv[1]).glob("fuzz-emulated-*.json")]
print(round(merge(summaries)["examples_per_s"], 2) if summaries else 0.0)
PY
}
campaign() {  # the 10-minute campaign, detached: campaign MPS WAIT
  CAMP="$C" KERNELS=emulated PROCS="${PROCS:-15}" PROFILE=timers MPS="$1" bash scripts/h200/detached_campaign.sh start "$2"
}
case "${1:-}" in
first)
  S="${2:-120}"; BUDGET="${3:-540}"; t0=$(date +%s)
  R="${RESULTS:-results}/mps36"; mkdir -p "$R"
  git log --oneline -1 > "$R/tree.txt"
  timeout 90 python3 -m conformance fuzz --kernel emulated --seconds 20 --no-save > "$R/warmup.txt" 2>&1
  for mode in plain mps; do
    m=0; [ "$mode" = mps ] && m=1
    RESULTS="$R/$mode" KERNELS=emulated PROCS="${PROCS:-15}" PROFILE=0 MPS=$m FUZZ_ARGS="--hypothesis-profile ${HYP:-ci}" \
      bash scripts/h200/final_throughput.sh campaign "$S" > "$R/$mode.log" 2>&1
    echo "== $mode: $(grep -h '^MPS' "$R/$mode/throughput/campaign-env.txt") $(rate "$R/$mode/throughput") ex/s"; tail -4 "$R/$mode.log"
  done
  use=$(python3 -c "import sys; print(1 if float(sys.argv[2]) > float(sys.argv[1]) else 0)" "$(rate "$R/plain/throughput")" "$(rate "$R/mps/throughput")")
  grep -q '^MPS on' "$R/mps/throughput/campaign-env.txt" || use=0
  echo "10-minute campaign with MPS=$use" | tee "$R/choice.txt"
  left=$(( BUDGET - ($(date +%s) - t0) - 10 ))
  campaign "$use" "$(( left > 10 ? left : 10 ))"
  ;;
start)
  campaign 1 "${2:-570}"
  ;;
collect)
  CAMP="$C" bash scripts/h200/detached_campaign.sh collect "${2:-400}"
  ;;
*) echo "usage: mps36.sh first S BUDGET | start WAIT | collect WAIT" >&2; exit 2 ;;
esac
