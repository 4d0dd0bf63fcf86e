#!/usr/bin/env bash
# Issue 21, session 31: emulated's fused PV kernel (kernel/backends/emulated_pv.py) on one H200,
# against the same tree with EMULATED_TRITON_PV=0 (group_pv_terms + emulated_state.advance).
# Run it ALONE on the GPU (it times). <= 120 s: timeouts 60 + 50 s, 5 s grace each.
#   bash scripts/h200/emupv31.sh        (EMUPV31_TINY=1: tiny sizes, to try the logic on a CPU)
# Writes under "$RESULTS/emupv31/":
#   env.txt               date, GPU, git HEAD
#   bench.txt/.json       scripts/emu_pv_check.py: the variant whose self-check passed on the GPU,
#                         then on the bench's inputs (16 heads, 2048 uniform keys per row,
#                         2^20-record pow2 cache) at n_q 4096, 1024, 64: same bits with / without
#                         the kernel, launches per call, median device ms of each
#   snapshot.txt/.json    scripts/emu_pv_check.py: both variants' self-checks one by one (and where
#                         one differs, if it does), every problem of the bit-exact snapshot on
#                         cuda with / without (only differing cases are listed), then --sweep:
#                         median ms at (BLOCK_D, num_warps) (32,4) (64,4) (128,4) (128,8), n_q 64, 4096
# Every step runs under `timeout`; a step that fails leaves its rc in its .txt and the next runs.
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/emupv31"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"

if [ -n "${EMUPV31_TINY:-}" ]; then
  SIZE=(--keys 256 --cache-rows 4096)
  NQ=(--n-q 2,5 --iters 1)
  SWEEP=(--sweep 2)
else
  SIZE=(--keys 2048 --cache-rows 1048576)
  NQ=(--n-q 4096,1024,64 --iters 5)
  SWEEP=(--sweep 64,4096)
fi

timeout -k 5 60 python3 scripts/emu_pv_check.py "${NQ[@]}" "${SIZE[@]}" --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
echo "bench rc=$?" >> "$R/bench.txt"

timeout -k 5 50 python3 scripts/emu_pv_check.py --n-q "" "${SIZE[@]}" --check-variants dot,sum --diagnose --snapshot-cases "${SWEEP[@]}" --json "$R/snapshot.json" > "$R/snapshot.txt" 2> "$R/snapshot.err"
echo "snapshot rc=$?" >> "$R/snapshot.txt"

cat "$R/bench.txt"; grep -v "^device\|^PV kernel available\|^keys\|^ *N_Q" "$R/snapshot.txt"
tail -3 "$R/bench.err" "$R/snapshot.err" 2>/dev/null | grep -v "^$" | head -12
