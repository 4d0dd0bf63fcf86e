#!/usr/bin/env bash
# One batched session on a CUDA machine (the H200 of the device tool): what issues 3, 4 and 7
# ask to be shown on a GPU. Logs and JSON go to $OUT (or ./gpu-out). Optional wheels in .whl/
# (sgl-flash-mla for the flashmla backend) are installed into /tmp/site first.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi -L | tee "$OUT/gpus.txt"
step() { echo; echo "=== $1 ($(date +%T))"; }

step "device-independent recipes, emulated and oracle speed"
timeout 120 python3 -m pytest -q tests/test_recipes.py -k "cpu_and_gpu" 2>&1 | tail -3
timeout 120 python3 scripts/gpu_speed.py 2>&1 | tee "$OUT/speed.txt"

step "conformance suite, emulated on CUDA, ci profile, 4 workers on the GPU"
CI=1 timeout 330 python3 -m pytest conformance --kernel emulated -n auto --workers-per-gpu 4 -q -rfE -p no:cacheprovider \
  --junitxml="$OUT/emulated.xml" 2>&1 | tee "$OUT/emulated.log" | tail -15

if python3 -c "import flash_mla" 2>/dev/null; then
  step "conformance suite, flashmla, ci profile"
  CI=1 timeout 240 python3 -m pytest conformance --kernel flashmla -n auto --workers-per-gpu 4 -q -rfE -p no:cacheprovider \
    --junitxml="$OUT/flashmla.xml" 2>&1 | tee "$OUT/flashmla.log" | tail -15
  step "bench"
  timeout 100 python3 -m conformance bench --max-seconds 4 --iters 30 --json "$OUT/bench.json" 2>"$OUT/bench.err" | tee "$OUT/bench.txt"
fi
ls conformance/corpus/pending 2>/dev/null | head && tar czf "$OUT/pending.tgz" conformance/corpus/pending 2>/dev/null
find .conformance/runs -name report.md -newer "$OUT/gpus.txt" -exec cp {} "$OUT/" \; 2>/dev/null
true
