#!/usr/bin/env bash
# Issue 21, session 30's first call (run ALONE: it times). <= 420 s of timeouts, ~250 s in practice.
#   bash scripts/h200/s30a.sh
# Writes under "$RESULTS/s30a/":
#   emu29/                 EMU29_QUICK=1 scripts/h200/emu29.sh: the opt-in K/V decode kernels
#                          (EMULATED_TRITON_DECODE=1) against the default path and 36a56b6: ms, bits
#   profile-emulated.txt   scripts/gpu_op_profile.py, emulated with the decode kernels, n_q 4096
#   profile-oracle.txt     the same for the oracle (where its 36 ms go)
#   timers-preconditions/  scripts/campaign_profile.py --timers: 45 s of the preconditions property
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/s30a"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"
RESULTS="$R" EMU29_QUICK=1 timeout -k 5 200 bash scripts/h200/emu29.sh > "$R/emu29.log" 2>&1
echo "emu29 rc=$?" >> "$R/emu29.log"
EMULATED_TRITON_DECODE=1 timeout -k 5 60 python3 scripts/gpu_op_profile.py --n-q 4096 --keys 2048 --cache-rows 1048576 \
  --kernels emulated --calls 3 --top 30 > "$R/profile-emulated.txt" 2> "$R/profile-emulated.err"
echo "profile rc=$?" >> "$R/profile-emulated.txt"
timeout -k 5 60 python3 scripts/gpu_op_profile.py --n-q 4096 --keys 2048 --cache-rows 1048576 \
  --kernels oracle --calls 3 --top 30 > "$R/profile-oracle.txt" 2> "$R/profile-oracle.err"
echo "profile rc=$?" >> "$R/profile-oracle.txt"
CONFORMANCE_PENDING_DIR="$R/pending" timeout -s INT -k 15 70 python3 scripts/campaign_profile.py --timers --out "$R/timers-preconditions" -- \
  --kernel emulated --seconds 45 --hypothesis-profile nightly --property preconditions --shrink-seconds 10 --no-save > "$R/timers.txt" 2>&1
echo "timers rc=$?" >> "$R/timers.txt"
cat "$R/emu29.log" | tail -40; grep -A40 "^==" "$R/profile-emulated.txt" | head -45; grep -A25 "^==" "$R/profile-oracle.txt" | head -30; cat "$R/timers-preconditions/stages.txt" 2>/dev/null
