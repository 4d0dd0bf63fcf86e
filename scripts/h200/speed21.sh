#!/usr/bin/env bash
# Issue 21, reference and adapter speed, on one H200 (run it ALONE on the GPU: it times; <= 200 s: timeouts 105 + 50 + 30 s, 5 s grace each).
#   bash scripts/h200/speed21.sh
# Writes under "$RESULTS/speed21/":
#   env.txt                 date, GPU, git HEAD
#   bench.txt, bench.json   scripts/peers_bench.py (n_q 1, 64, 1024, 4096; 16 heads, 2048 keys per
#                           row, 1M-record cache): oracle and emulated beside their limits, every
#                           adapter beside its bare kernel ("x bare"); bench.err its stderr
#   ops.txt, ops.json       scripts/speed21_ops.py (n_q 1, 64, 1024): aten ops (about one launch
#                           each) and host syncs per call of oracle, bound, emulated and the
#                           bf16-KV adapters, their median device ms, and the adapters beside
#                           their bare kernel on the inputs prepared from the kept bf16 cache
#                           (NAME:bare-kept; peers_bench's NAME:bare reads the per-slot copy)
#   same.txt                scripts/speed21_same.py: flashmla-prefill and torch-sdpa give the same
#                           bits through the kept bf16 cache as through the per-slot gather
#                           (n_q 1, 64, 1024); "same rc=1" if any differs
# Every step runs under `timeout`; a step that fails leaves its rc in the .txt and the next runs.
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/speed21"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"

# SPEED21_TINY=1: tiny sizes, to try the script's logic on a CPU
if [ -n "${SPEED21_TINY:-}" ]; then
  BENCH=(--n-q 1,4 --keys 256 --cache-rows 4096 --iters 2 --max-seconds 1)
  OPS=(--n-q 1,4 --keys 256 --cache-rows 4096 --iters 2)
  SAME=(--n-q 1,4 --keys 256 --cache-rows 4096)
else
  BENCH=(--n-q 1,64,1024,4096 --iters 10 --max-seconds 2)
  OPS=(--n-q 1,64,1024 --cache-rows 1048576 --iters 10)
  SAME=(--n-q 1,64,1024 --cache-rows 1048576)
fi

timeout -k 5 105 python3 scripts/peers_bench.py "${BENCH[@]}" --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
echo "bench rc=$?" >> "$R/bench.txt"

timeout -k 5 50 python3 scripts/speed21_ops.py "${OPS[@]}" --kernels oracle,bound,emulated,flashmla-prefill,torch-sdpa \
  --json "$R/ops.json" > "$R/ops.txt" 2>&1
echo "ops rc=$?" >> "$R/ops.txt"

timeout -k 5 30 python3 scripts/speed21_same.py "${SAME[@]}" > "$R/same.txt" 2>&1
echo "same rc=$?" >> "$R/same.txt"

cat "$R/bench.txt" "$R/ops.txt" "$R/same.txt"
tail -3 "$R/bench.err"
