#!/usr/bin/env bash
# Part A of the GPU session: device-independent recipes, emulated/oracle speed, the conformance
# suite against `emulated` on the GPUs (two workers per GPU, each pinned to its own device).
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
echo "=== recipes: CPU and GPU build the same bits ($(date +%T))"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_recipes.py -k cpu_and_gpu 2>&1 | tail -2
echo "=== speed ($(date +%T))"
timeout 120 python3 scripts/gpu_speed.py 2>&1 | tee "$OUT/speed.txt"
echo "=== conformance suite, emulated, ci profile, -n auto --workers-per-gpu 2 ($(date +%T))"
CI=1 timeout 380 python3 -m pytest conformance --kernel emulated -n auto --workers-per-gpu 2 -q -rfE -rP -p no:cacheprovider \
  --junitxml="$OUT/emulated.xml" > "$OUT/emulated.log" 2>&1
echo "rc=$?"; grep -E "^worker gw|passed|failed|error" "$OUT/emulated.log" | tail -12
find .conformance/runs -name report.md -exec cp {} "$OUT/emulated-report.md" \; 2>/dev/null
true
