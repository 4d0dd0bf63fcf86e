#!/usr/bin/env bash
# The lead's H200 driver: one device call runs every helper's script of one phase side by side.
#   bash scripts/h200/drive.sh explore     # scripts/h200/explore_*.sh, in parallel
#   bash scripts/h200/drive.sh final       # the bench alone first, then scripts/h200/final_*.sh in parallel
# Wheels in .whl/ are installed to /tmp/site; each script writes under $RESULTS/<name>/; everything
# comes back as $OUT/results.tgz plus $OUT/summary.txt (the tail of each script's log).
set -u
export PYTHONUNBUFFERED=1
PHASE=${1:?phase}
PAR_S=${2:-330}
OUT=${OUT:-/tmp/h200-out}; mkdir -p "$OUT"
export RESULTS=/tmp/results; rm -rf "$RESULTS"; mkdir -p "$RESULTS/logs"
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$RESULTS/logs/pip.log" 2>&1 || echo "pip install failed (see logs/pip.log)"
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L > "$RESULTS/logs/gpu.txt" 2>&1
if [ "$PHASE" = final ] && [ -f scripts/h200/final_throughput.sh ]; then
  echo "=== bench alone ($(date +%T))"
  timeout 170 bash scripts/h200/final_throughput.sh bench > "$RESULTS/logs/bench.log" 2>&1; echo "bench rc=$?"
fi
echo "=== $PHASE scripts in parallel, ${PAR_S} s each at most ($(date +%T))"
pids=()
for f in scripts/h200/${PHASE}_*.sh; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .sh)
  if [ "$PHASE" = final ] && [ "$name" = final_throughput ]; then args="campaign $((PAR_S - 60))"; else args=""; fi
  ( timeout --kill-after=10 "$PAR_S" bash "$f" $args > "$RESULTS/logs/$name.log" 2>&1; echo "$name rc=$?" >> "$RESULTS/logs/rc.txt" ) &
  pids+=($!)
done
wait "${pids[@]}"
echo "=== done after $(( $(date +%s) - start )) s ($(date +%T))"
cat "$RESULTS/logs/rc.txt"
{ for f in "$RESULTS"/logs/*.log; do echo "##### $f"; tail -25 "$f"; done; } > "$OUT/summary.txt" 2>&1
tar czf "$OUT/results.tgz" -C /tmp results
ls -la "$OUT"
