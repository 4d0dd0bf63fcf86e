#!/usr/bin/env bash
# Issue 21, the references' speed (oracle, bound, emulated) on one H200 after the batching of
# the bound and the emulator's cheaper passes. Run it ALONE on the GPU (it times); <= 200 s:
# timeouts 55 + 80 + 45 s, 5 s grace each.
#   bash scripts/h200/speed28.sh
# Writes under "$RESULTS/speed28/":
#   env.txt               date, GPU, git HEAD
#   bench.txt, bench.json scripts/peers_bench.py --kernels oracle,emulated (n_q 1, 64, 1024, 4096;
#                         16 heads, 2048 keys per row, 1M-record cache): median device ms beside
#                         the gather and fp64 limits (the table of speed21's bench.txt, these rows)
#   ops.txt, ops.json     scripts/speed21_ops.py (n_q 1, 64, 1024, 4096) for oracle, bound and
#                         emulated: aten ops and host syncs per call, median device ms, and the
#                         peak device memory of one call (PEAK GB: the memory limit at n_q 4096)
#   same.txt              scripts/h200/speed28_same.py: the device's default chunk sizes give the
#                         same bits as the CPU's (bench inputs n_q 64, 1024; the bit-exact
#                         snapshot's problems); "same rc=1" if any differs
# Every step runs under `timeout`; a step that fails leaves its rc in the .txt and the next runs.
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/speed28"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"

# SPEED28_TINY=1: tiny sizes, to try the script's logic on a CPU
if [ -n "${SPEED28_TINY:-}" ]; then
  BENCH=(--n-q 1,4 --keys 256 --cache-rows 4096 --iters 2 --max-seconds 1)
  OPS=(--n-q 1,4 --keys 256 --cache-rows 4096 --iters 2)
  SAME=(--n-q 4 --keys 256 --cache-rows 4096)
else
  BENCH=(--n-q 1,64,1024,4096 --iters 10 --max-seconds 2)
  OPS=(--n-q 1,64,1024,4096 --cache-rows 1048576 --iters 5)
  SAME=(--n-q 64,1024 --cache-rows 1048576 --snapshot-cases)
fi

timeout -k 5 55 python3 scripts/peers_bench.py "${BENCH[@]}" --kernels oracle,emulated --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
echo "bench rc=$?" >> "$R/bench.txt"

timeout -k 5 80 python3 scripts/speed21_ops.py "${OPS[@]}" --kernels oracle,bound,emulated --json "$R/ops.json" > "$R/ops.txt" 2>&1
echo "ops rc=$?" >> "$R/ops.txt"

timeout -k 5 45 python3 scripts/h200/speed28_same.py "${SAME[@]}" > "$R/same.txt" 2>&1
echo "same rc=$?" >> "$R/same.txt"

cat "$R/bench.txt" "$R/ops.txt" "$R/same.txt"
tail -3 "$R/bench.err"
