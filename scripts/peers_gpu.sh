#!/usr/bin/env bash
# The peers GPU session (issue 15), one call on one H200: bench side by side, the conformance suite
# against each peer kernel, then concurrent nightly-profile fuzz campaigns (one process per kernel
# on the one GPU), then a feature summary of every run folder. Runs from a snapshot folder (SNAP,
# default .) with the sgl-flash-mla wheel in .whl/. Writes under $OUT: session.log, bench.json,
# features.json, runs.tgz (run folders, pending corpus entries, per-step logs).
# Usage (device): bash scripts/peers_gpu.sh [FUZZ_SECONDS]
set -uo pipefail
export PYTHONUNBUFFERED=1
FUZZ_S=${1:-270}
OUT=${OUT:-peers-out}; mkdir -p "$OUT"
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
cd "${SNAP:-.}" || exit 3
export PYTHONPATH=/tmp/site:$PWD
LOGS=$PWD/peers-logs; mkdir -p "$LOGS"
{
nvidia-smi -L
echo "=== bench ($(date +%T))"
timeout 150 python3 scripts/peers_bench.py --json "$OUT/bench.json" 2> "$LOGS/bench.err"
echo "rc=$?"; tail -3 "$LOGS/bench.err"
for k in flashmla flashmla-prefill torch-sdpa; do
  echo "=== suite $k ($(date +%T))"
  before=$(ls .conformance/runs 2>/dev/null)
  CI=1 timeout 120 python3 -m pytest conformance --kernel "$k" -n 4 -q -rfE -p no:cacheprovider > "$LOGS/suite-$k.log" 2>&1
  echo "rc=$?"; grep -E "^(FAILED|ERROR)" "$LOGS/suite-$k.log" | head -20; tail -1 "$LOGS/suite-$k.log"
  for d in $(ls .conformance/runs 2>/dev/null); do echo "$before" | grep -qx "$d" || echo "suite $k run folder $d"; done
done
echo "=== fuzz x4 concurrent, ${FUZZ_S} s each, nightly profile ($(date +%T))"
for k in emulated flashmla flashmla-prefill torch-sdpa; do
  timeout $((FUZZ_S + 60)) python3 -m conformance fuzz --kernel "$k" --seconds "$FUZZ_S" --profile nightly --shrink-seconds 30 > "$LOGS/fuzz-$k.txt" 2> "$LOGS/fuzz-$k.err" &
done
wait
for k in emulated flashmla flashmla-prefill torch-sdpa; do echo "--- fuzz $k"; cat "$LOGS/fuzz-$k.txt"; tail -2 "$LOGS/fuzz-$k.err"; done
echo "=== features ($(date +%T))"
python3 scripts/peers_features.py .conformance/runs/* --json "$OUT/features.json"
} 2>&1 | tee "$OUT/session.log"
tar czf "$OUT/runs.tgz" .conformance/runs conformance/corpus/pending peers-logs 2>/dev/null
ls -la "$OUT"
