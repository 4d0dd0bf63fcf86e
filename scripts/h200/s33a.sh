#!/usr/bin/env bash
# Session 33, first H200 call (after drive.sh's bench, alone): emulated with both CUDA DMMA kernels
# (QK and PV: scripts/emu_qk_check.py, every variant's bit probe, bits and median ms against the
# torch paths at n_q 4096 and 64, the snapshot problems), then where the adapters' time goes at
# small n_q and sdpa's at n_q 4096 (scripts/gpu_op_profile.py). Sequential, <= 300 s.
# Writes under "$RESULTS/s33a/".
set -u
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/s33a"
mkdir -p "$R"
{ date -u; nvidia-smi -L; git log --oneline -1; which nvcc; nvcc --version | tail -1; } > "$R/env.txt" 2>&1
timeout -k 5 130 python3 scripts/emu_qk_check.py --n-q 4096,64 --iters 3 --snapshot-cases --json "$R/emu.json" > "$R/emu.txt" 2>&1
echo "emu rc=$?" >> "$R/emu.txt"
timeout -k 5 70 python3 scripts/gpu_op_profile.py --n-q 1,64 --kernels flashmla,flashmla-prefill,torch-sdpa --calls 5 --top 18 > "$R/prof-small.txt" 2>&1
echo "prof-small rc=$?" >> "$R/prof-small.txt"
timeout -k 5 60 python3 scripts/gpu_op_profile.py --n-q 4096 --kernels torch-sdpa --calls 3 --top 18 > "$R/prof-sdpa4096.txt" 2>&1
echo "prof-sdpa4096 rc=$?" >> "$R/prof-sdpa4096.txt"
for f in emu prof-small prof-sdpa4096; do
  [ -f "$R/$f.txt" ] && { echo "##### $f"; grep -v "Warning\|warn(" "$R/$f.txt" | cut -c1-200 | tail -n 40; }
done
