#!/usr/bin/env bash
# Part B of the GPU session: the soundness campaign on the host's CPU cores in the background,
# the conformance suite against FlashMLA and the bench in the foreground.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
procs=${SOUNDNESS_PROCS:-22}; problems=${SOUNDNESS_PROBLEMS:-100000}
CUDA_VISIBLE_DEVICES= timeout 500 bash scripts/soundness_parallel.sh "$procs" "$problems" "$OUT/soundness" > "$OUT/soundness.log" 2>&1 &
sound=$!
echo "=== conformance suite, flashmla, ci profile ($(date +%T))"
CI=1 timeout 260 python3 -m pytest conformance --kernel flashmla -n auto --workers-per-gpu 2 -q -rfE -p no:cacheprovider \
  --junitxml="$OUT/flashmla.xml" > "$OUT/flashmla.log" 2>&1
echo "rc=$?"; grep -E "passed|failed|FAILED|error" "$OUT/flashmla.log" | tail -12
find .conformance/runs -name report.md -newer "$OUT/flashmla.xml" -o -name report.md -exec cp {} "$OUT/flashmla-report.md" \; 2>/dev/null
echo "=== bench ($(date +%T))"
timeout 90 python3 -m conformance bench --max-seconds 4 --iters 30 --json "$OUT/bench.json" 2>"$OUT/bench.err" | tee "$OUT/bench.txt"
echo "=== soundness ($(date +%T))"
wait $sound; echo "soundness rc=$?"; tail -3 "$OUT/soundness.log"
ls conformance/corpus/pending 2>/dev/null | head; tar czf "$OUT/pending.tgz" conformance/corpus/pending .conformance/runs/*/report.* 2>/dev/null
true
