#!/usr/bin/env bash
# Issue 21, session 30: oracle.preconditions.check_call on one H200, old (b2057b2) vs this tree.
# <= 230 s of timeouts, ~120 s in practice.
#   bash scripts/h200/pc30.sh
# Writes under "$RESULTS/pc30/":
#   cost-cuda.txt / .json   scripts/preconditions_cost.py --device cuda: ops, host reads, ms per
#                           call (CUDA events) on 40 preconditions-property recipes + a valid call,
#                           and whether both implementations give identical findings
#   cost-cpu.txt / .json    the same on the host CPU (process time)
#   timers.txt, timers/     scripts/campaign_profile.py --timers: 40 s of the preconditions property
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/pc30"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"
timeout -k 5 80 python3 scripts/preconditions_cost.py --device cuda --old b2057b2 --examples 40 --iters 30 \
  --json "$R/cost-cuda.json" > "$R/cost-cuda.txt" 2>&1
echo "rc=$?" >> "$R/cost-cuda.txt"
timeout -k 5 60 python3 scripts/preconditions_cost.py --device cpu --old b2057b2 --examples 40 --iters 10 \
  --json "$R/cost-cpu.json" > "$R/cost-cpu.txt" 2>&1
echo "rc=$?" >> "$R/cost-cpu.txt"
CONFORMANCE_PENDING_DIR="$R/pending" timeout -s INT -k 15 70 python3 scripts/campaign_profile.py --timers --out "$R/timers" -- \
  --kernel emulated --seconds 40 --hypothesis-profile nightly --property preconditions --shrink-seconds 10 --no-save > "$R/timers.txt" 2>&1
echo "timers rc=$?" >> "$R/timers.txt"
cat "$R/env.txt" "$R/cost-cuda.txt" "$R/cost-cpu.txt"; cat "$R/timers/stages.txt" 2>/dev/null | head -30
