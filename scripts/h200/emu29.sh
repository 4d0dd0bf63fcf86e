#!/usr/bin/env bash
# Issue 21, the emulated kernel after session 29's changes against 36a56b6's (the old module read
# with git show): same bits and time per call on one H200. Run it ALONE on the GPU (it times);
# <= 690 s: timeouts 60 + 150 + 120 + 90 + 120 + 90 + 60 s, 5 s grace each.
#   bash scripts/h200/emu29.sh            (EMU29_TINY=1: tiny sizes, to try the logic on a CPU;
#                                          EMU29_QUICK=1: casts, old_new at n_q 64, 1024, 4096 and
#                                          snapshot_bits only, ~100 s)
# Writes under "$RESULTS/emu29/":
#   env.txt                date, GPU, git HEAD
#   casts.txt              scripts/emu_cast_check.py --exhaustive: the fast Q fp8 codes against
#                          kernel.fp8.encode_e4m3 on all 2^32 f32 patterns on cuda, NaN widening
#   old_new.txt/.json      scripts/emu_old_new.py on the bench's inputs (16 heads, 2048 uniform
#                          keys per row, 1M-record pow2 cache) at n_q 1, 64, 1024, 4096: old and
#                          new median device ms (calls alternating), ops/syncs per call, same bits
#   old_new_decode.txt    the same with EMULATED_TRITON_DECODE=0 (K and V decode by torch's casting
#                          copies instead of the Triton kernels of kernel/backends/emulated_decode.py)
#   old_new_torch.txt     the same at n_q 64, 4096 with EMULATED_TRITON_STATE=0 (the running state
#                          and the QK accumulation by torch operations instead of the Triton
#                          kernels of kernel/backends/emulated_state.py, emulated_scores.py,
#                          emulated_decode.py)
#   snapshot_bits.txt      scripts/emu_old_new.py --snapshot-cases: every problem of the bit-exact
#                          snapshot materialised on cuda, old vs new bits ("rc=1" if any differs)
#   profile.txt, traces.tgz  scripts/gpu_op_profile.py for the new emulated at n_q 1, 64, 4096
#   bench.txt/.json        scripts/peers_bench.py --kernels emulated (the table row)
# Every step runs under `timeout`; a step that fails leaves its rc in its .txt and the next runs.
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/emu29"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"

if [ -n "${EMU29_TINY:-}" ]; then
  SIZE=(--keys 256 --cache-rows 4096)
  CASTS=()
  OLDNEW=(--n-q 1,4 --iters 2)
  TORCHSTATE=(--n-q 4 --iters 2)
  PROF=(--n-q 1,4 --calls 1)
  BENCH=(--n-q 1,4 --keys 256 --cache-rows 4096 --iters 2 --max-seconds 1)
else
  SIZE=(--keys 2048 --cache-rows 1048576)
  CASTS=(--exhaustive)
  OLDNEW=(--n-q 1,64,1024,4096 --iters 10)
  TORCHSTATE=(--n-q 64,4096 --iters 5)
  PROF=(--n-q 1,64,4096 --calls 3)
  BENCH=(--n-q 1,64,1024,4096 --iters 10 --max-seconds 2)
fi

if [ -n "${EMU29_QUICK:-}" ]; then OLDNEW=(--n-q 64,1024,4096 --iters 6); fi

timeout -k 5 60 python3 scripts/emu_cast_check.py "${CASTS[@]}" > "$R/casts.txt" 2>&1
echo "casts rc=$?" >> "$R/casts.txt"

timeout -k 5 150 python3 scripts/emu_old_new.py "${OLDNEW[@]}" "${SIZE[@]}" --json "$R/old_new.json" > "$R/old_new.txt" 2>&1
echo "old_new rc=$?" >> "$R/old_new.txt"

EMULATED_TRITON_DECODE=0 timeout -k 5 120 python3 scripts/emu_old_new.py "${OLDNEW[@]}" "${SIZE[@]}" > "$R/old_new_decode.txt" 2>&1
echo "old_new_decode rc=$?" >> "$R/old_new_decode.txt"

if [ -z "${EMU29_QUICK:-}" ]; then
  EMULATED_TRITON_STATE=0 timeout -k 5 90 python3 scripts/emu_old_new.py "${TORCHSTATE[@]}" "${SIZE[@]}" > "$R/old_new_torch.txt" 2>&1
  echo "old_new_torch rc=$?" >> "$R/old_new_torch.txt"
fi

timeout -k 5 120 python3 scripts/emu_old_new.py --n-q 1 --keys 256 --cache-rows 4096 --iters 1 --snapshot-cases > "$R/snapshot_bits.txt" 2>&1
echo "snapshot_bits rc=$?" >> "$R/snapshot_bits.txt"

if [ -n "${EMU29_QUICK:-}" ]; then
  cat "$R/casts.txt" "$R/old_new.txt" "$R/old_new_decode.txt"; grep -E "DIFFERS|ALL SAME|SOME DIFFER|rc=" "$R/snapshot_bits.txt"
  exit 0
fi

timeout -k 5 90 python3 scripts/gpu_op_profile.py "${PROF[@]}" "${SIZE[@]}" --kernels emulated --top 30 --trace-dir "$R/traces" > "$R/profile.txt" 2> "$R/profile.err"
echo "profile rc=$?" >> "$R/profile.txt"
if [ -d "$R/traces" ]; then tar czf "$R/traces.tgz" -C "$R" traces && rm -rf "$R/traces"; fi

timeout -k 5 60 python3 scripts/peers_bench.py "${BENCH[@]}" --kernels emulated --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
echo "bench rc=$?" >> "$R/bench.txt"

cat "$R/casts.txt" "$R/old_new.txt" "$R/old_new_decode.txt" "$R/old_new_torch.txt"; grep -E "DIFFERS|ALL SAME|SOME DIFFER|rc=" "$R/snapshot_bits.txt"; cat "$R/bench.txt"
