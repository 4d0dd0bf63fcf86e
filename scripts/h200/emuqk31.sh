#!/usr/bin/env bash
# Issue 21, session 31: emulated's fused QK kernel (kernel/backends/emulated_qk.py) with the fused
# PV kernel, on one H200 (run ALONE: it times). <= 150 s of timeouts.
#   bash scripts/h200/emuqk31.sh
# Writes under "$RESULTS/emuqk31/": check.txt/.json (scripts/emu_qk_check.py: QK self-checks,
# median ms all-on / qk-only / pv-only / both-off at n_q 4096, 1024, 64 on the bench's inputs, bits
# of each against both-off, the snapshot problems on cuda), profile.txt (scripts/gpu_op_profile.py,
# emulated at n_q 4096: where the time goes now).
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/emuqk31"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"
timeout -k 5 200 python3 scripts/emu_qk_check.py --n-q 64,1024,4096 --snapshot-cases --iters 3 --json "$R/check.json" > "$R/check.txt" 2> "$R/check.err"
echo "check rc=$?" >> "$R/check.txt"
EMULATED_TRITON_QK=1 EMULATED_TRITON_PV=1 timeout -k 5 45 python3 scripts/gpu_op_profile.py --n-q 4096 --keys 2048 --cache-rows 1048576 \
  --kernels emulated --calls 3 --top 25 > "$R/profile.txt" 2> "$R/profile.err"
echo "profile rc=$?" >> "$R/profile.txt"
cat "$R/check.txt"; tail -3 "$R/check.err"; grep -A28 "^==" "$R/profile.txt" | head -30
