#!/usr/bin/env bash
# Issue 21, oracle29: the float64 oracle's new code (the fused key decode, oracle.key_decode)
# against the code before it on one H200: same bits (bench inputs, chunk sizes,
# the snapshot's problems on the device) and time per call, then the new oracle's op profile.
# Timing steps want an idle GPU; run alone if possible (shared is fine for the bits).
# <= 225 s: timeouts 165 + 55 s (the torch decode's profile: run 2, .h200/s29c).
#   bash scripts/h200/oracle29.sh            (ORACLE29_TINY=1: tiny sizes, for a CPU dry run)
# Writes under "$RESULTS/oracle29/":
#   oracle29.txt  scripts/h200/oracle29.py: selfcheck, keys, bench (old / new ms, bits),
#                 snapshot, same, parts (decode variants and launch shapes, bmm, softmax alone)
#   profile.txt   scripts/gpu_op_profile.py --kernels oracle at n_q 64, 4096 (the new code)
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/oracle29"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" 2>&1; } > "$R/env.txt"
if [ "${ORACLE29_TINY:-0}" = 1 ]; then
  SIZES=(--n-q 1,64 --keys 64 --heads 4 --cache-rows 4096 --iters 2); PSIZES=(--n-q 64 --keys 64 --heads 4 --cache-rows 4096 --calls 1)
else
  SIZES=(--n-q 1,64,1024,4096 --iters 10); PSIZES=(--n-q 64,4096 --calls 3)
fi
timeout -k 5 165 python3 scripts/h200/oracle29.py "${SIZES[@]}" > "$R/oracle29.txt" 2>&1
echo "oracle29 rc=$?" >> "$R/oracle29.txt"
timeout -k 5 55 python3 scripts/gpu_op_profile.py "${PSIZES[@]}" --kernels oracle --top 25 > "$R/profile.txt" 2>&1
echo "profile rc=$?" >> "$R/profile.txt"
cat "$R/oracle29.txt"; grep -A12 "^== oracle n_q 4096" "$R/profile.txt" | head -14
