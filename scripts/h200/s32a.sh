#!/usr/bin/env bash
# Session 32, first H200 call (after drive.sh's bench, alone): the f64 tensor-core (DMMA) kernels
# on the device. oracle: oracle.dmma_products' self-check at 5 / 16 / 128 heads, every product
# of the bench problem against the bmm's in units of the reference's rounding bound, reference()
# ms bmm / DMMA at n_q 64, 1024, 4096, then the snapshot problems (scripts/h200/oracle31.py with
# ORACLE31_IMPL=dmma). emulated: scripts/emu_qk_check.py (every QK variant's bit probe; run_emulated
# with the default kernels against torch: bits and median ms at n_q 4096, 1024, 64; the snapshot
# problems), then scripts/emu_pv_cuda_check.py where it exists. <= 330 s.
# Writes under "$RESULTS/s32a/".
set -u
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/s32a"
mkdir -p "$R"
{ date -u; nvidia-smi -L; git log --oneline -1; which nvcc; nvcc --version | tail -1; } > "$R/env.txt" 2>&1
ORACLE31_IMPL=dmma timeout -k 5 80 python3 scripts/h200/oracle31.py --n-q 64,1024,4096 --iters 10 --sections selfcheck,products,bench > "$R/oracle.txt" 2>&1
echo "oracle rc=$?" >> "$R/oracle.txt"
ORACLE31_IMPL=dmma timeout -k 5 45 python3 scripts/h200/oracle31.py --sections snapshot > "$R/oracle-snapshot.txt" 2>&1
echo "oracle-snapshot rc=$?" >> "$R/oracle-snapshot.txt"
timeout -k 5 140 python3 scripts/emu_qk_check.py --n-q 4096,1024,64 --iters 3 --snapshot-cases --json "$R/emu.json" > "$R/emu.txt" 2>&1
echo "emu rc=$?" >> "$R/emu.txt"
if [ -f scripts/emu_pv_cuda_check.py ]; then
  timeout -k 5 100 python3 scripts/emu_pv_cuda_check.py > "$R/emupv.txt" 2>&1; echo "emupv rc=$?" >> "$R/emupv.txt"
fi
for f in oracle oracle-snapshot emu emupv; do
  [ -f "$R/$f.txt" ] && { echo "##### $f"; grep -v "Warning\|warn(" "$R/$f.txt" | cut -c1-240 | tail -n 30; }
done
