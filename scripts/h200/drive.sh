#!/usr/bin/env bash
# The lead's H200 driver: one device call runs several steps side by side and returns one archive.
#   bash scripts/h200/drive.sh [--bench S] [--par S] "STEP [ARGS]" ["STEP [ARGS]" ...]
# --bench S: first `scripts/h200/final_throughput.sh bench` alone, at most S seconds (timings are
# taken on an otherwise idle machine). Then every STEP (a script path and its arguments) runs in
# parallel, each at most --par seconds (default 330). Wheels in .whl/ are installed to /tmp/site;
# steps write under $RESULTS/<name>/; everything comes back as $OUT/results.tgz plus
# $OUT/summary.txt (the tail of each step's log).
set -u
export PYTHONUNBUFFERED=1
BENCH_S=0; PAR_S=330
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) BENCH_S=$2; shift 2 ;;
    --par) PAR_S=$2; shift 2 ;;
    *) break ;;
  esac
done
OUT=${OUT:-/tmp/h200-out}; mkdir -p "$OUT"
export RESULTS=/tmp/results; rm -rf "$RESULTS"; mkdir -p "$RESULTS/logs"
start=$(date +%s)
# a warm machine keeps /tmp/site: reinstalling under processes still running from it (a detached
# campaign of an earlier call) would swap their files, so the same wheels are installed once
stamp="/tmp/site/.wheels-$(cat .whl/*.whl | md5sum | cut -c1-12)"
if [ -f "$stamp" ]; then
  echo "wheels already installed ($stamp)" > "$RESULTS/logs/pip.log"
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$RESULTS/logs/pip.log" 2>&1 \
    && touch "$stamp" || echo "pip install failed (see logs/pip.log)"
fi
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L > "$RESULTS/logs/gpu.txt" 2>&1
if [ "$BENCH_S" -gt 0 ]; then
  echo "=== bench alone ($(date +%T))"
  timeout --kill-after=10 "$BENCH_S" bash scripts/h200/final_throughput.sh bench > "$RESULTS/logs/bench.log" 2>&1; echo "bench rc=$?" | tee -a "$RESULTS/logs/rc.txt"
fi
echo "=== $# steps in parallel, ${PAR_S} s each at most ($(date +%T))"
pids=()
for step in "$@"; do
  read -r -a words <<< "$step"
  name=$(basename "${words[0]}" .sh)
  ( timeout --kill-after=10 "$PAR_S" bash "${words[@]}" > "$RESULTS/logs/$name.log" 2>&1; echo "$name rc=$?" >> "$RESULTS/logs/rc.txt" ) &
  pids+=($!)
done
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
echo "=== done after $(( $(date +%s) - start )) s ($(date +%T))"
cat "$RESULTS/logs/rc.txt"
{ for f in "$RESULTS"/logs/*.log; do echo "##### $f"; tail -25 "$f"; done; } > "$OUT/summary.txt" 2>&1
tar czf "$OUT/results.tgz" -C /tmp results
ls -la "$OUT"
