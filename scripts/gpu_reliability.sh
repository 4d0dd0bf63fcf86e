#!/usr/bin/env bash
# One H200 call: a kernel that trips a real device-side assert mid-run under `pytest -n 2` (the
# worker that faulted is replaced, later tests pass), then the whole suite against emulated and
# each CUDA peer on the current tree. Needs the sgl-flash-mla wheel in .whl/. Writes under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 CI=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
export CONFORMANCE_PENDING_DIR=$OUT/pending
{
nvidia-smi -L
echo "=== device-side assert under pytest -n 2 ($(date +%T))"
timeout 200 python3 -m pytest -n 2 -q -rfE -p no:cacheprovider conformance/suite/test_corpus.py \
  -k "long-row-2048 or single-key or sixteen or tile-129 or one-head" --kernel tests.misbehaving_kernels:device_assert_on_long_rows
echo "rc=$?"; grep -h '"caught"' "$OUT"/pending/*.json
for k in emulated flashmla flashmla-prefill torch-sdpa; do
  echo "=== suite $k ($(date +%T))"
  timeout 150 python3 -m pytest conformance --kernel "$k" -n 4 -q -rfE -p no:cacheprovider > "$OUT/suite-$k.log" 2>&1
  echo "rc=$?"; grep -E "^(FAILED|ERROR)|conformance report" "$OUT/suite-$k.log" | head -12; tail -1 "$OUT/suite-$k.log"
done
} 2>&1 | tee "$OUT/session.log"
