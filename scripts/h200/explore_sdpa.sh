#!/usr/bin/env bash
# Issue 19 (torch-sdpa worker crash), exploration on one H200, <= 240 s. Each step in its own
# process, so a CUDA fault stops only that step:
#   1. the failing metamorphic test (-n 1, as reported), every tensor handed to the fused SDPA op
#      logged before the op runs (scripts/h200/sdpa_dump_plugin.py);
#   2. the same test in-process with CUDA_LAUNCH_BLOCKING=1 (-n 0): the last logged call is the
#      one that faults;
#   3. the standalone reproducer (scripts/repro/torch_sdpa_misaligned.py) on the logged layout of
#      the faulting call, public API (F.scaled_dot_product_attention under
#      sdpa_kernel(EFFICIENT_ATTENTION)) and private op, one process each;
#   4. the reproducer's sweep of q offsets 0..7 elements x both APIs (one process per case), and
#      compute-sanitizer on the private op at offset 4 (data_ptr % 16 == 8) when it exists.
# Writes under "$RESULTS/sdpa/": env.txt, test-n1.log, calls-n1.jsonl, test-n0.log, calls-n0.jsonl,
# repro-public.txt, repro-private.txt, sweep.txt, sanitizer.txt, summary.txt.
# Usage (device, repo root, PYTHONPATH set by the driver): bash scripts/h200/explore_sdpa.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/sdpa"
mkdir -p "$R"
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
export PYTHONPATH="$PWD/scripts/h200:${PYTHONPATH:-$PWD}"
REPRO=scripts/repro/torch_sdpa_misaligned.py

{
  date -u
  nvidia-smi -L 2>&1
  timeout 30 python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" 2>&1
} > "$R/env.txt"

echo "=== 1. test -n 1 ($(elapsed) s)"
CI=1 PYTEST_PLUGINS=sdpa_dump_plugin SDPA_DUMP="$R/calls-n1.jsonl" timeout 80 python3 -m pytest \
  conformance/suite/test_metamorphic.py -k row_alone --kernel torch-sdpa -n 1 -q -rfE -p no:cacheprovider > "$R/test-n1.log" 2>&1
echo "rc=$?"; grep -iE "misaligned|crash|worker|passed|failed|error" "$R/test-n1.log" | head -15

echo "=== 2. test -n 0, CUDA_LAUNCH_BLOCKING=1 ($(elapsed) s)"
CI=1 CUDA_LAUNCH_BLOCKING=1 PYTEST_PLUGINS=sdpa_dump_plugin SDPA_DUMP="$R/calls-n0.jsonl" timeout 50 python3 -m pytest \
  conformance/suite/test_metamorphic.py -k row_alone --kernel torch-sdpa -n 0 -q -rfE -p no:cacheprovider -x > "$R/test-n0.log" 2>&1
echo "rc=$?"; grep -iE "misaligned|passed|failed|error" "$R/test-n0.log" | head -10

DUMP="$R/calls-n0.jsonl"
[ -s "$DUMP" ] || DUMP="$R/calls-n1.jsonl"
echo "=== 3+4. reproducers on $(basename "$DUMP"), sweep, sanitizer ($(elapsed) s)"
if [ -s "$DUMP" ]; then
  timeout 60 python3 "$REPRO" --api public --from-dump "$DUMP" > "$R/repro-public.txt" 2>&1 &
  timeout 60 python3 "$REPRO" --api private --from-dump "$DUMP" > "$R/repro-private.txt" 2>&1 &
fi
timeout 75 python3 "$REPRO" --sweep --jobs 16 --timeout 60 > "$R/sweep.txt" 2>&1 &
if command -v compute-sanitizer > /dev/null; then
  timeout 75 compute-sanitizer --tool memcheck python3 "$REPRO" --api private --q-offset 4 > "$R/sanitizer.txt" 2>&1 &
else
  echo "compute-sanitizer not found" > "$R/sanitizer.txt"
fi
wait

{
  echo "elapsed $(elapsed) s"
  for f in repro-public repro-private; do echo "--- $f"; cat "$R/$f.txt" 2>/dev/null | tail -5; done
  echo "--- sweep"; cat "$R/sweep.txt"
  echo "--- sanitizer (first error lines)"; grep -m 8 -E "Invalid|misaligned|ERROR SUMMARY|address" "$R/sanitizer.txt"
  echo "--- logged calls: q/key/value/bias data_ptr % 16 (counts), n1 and n0"
  for f in calls-n1 calls-n0; do
    [ -s "$R/$f.jsonl" ] || continue
    timeout 20 python3 - "$R/$f.jsonl" << 'EOF'
import collections, json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
c = collections.Counter((r["q"]["ptr_mod16"], r["key"]["ptr_mod16"], r["value"]["ptr_mod16"], r["bias"]["ptr_mod16"]) for r in rows)
print(sys.argv[1].rsplit("/", 1)[-1], len(rows), "calls; (q, key, value, bias) ptr%16 ->", dict(c))
last = rows[-1]
print("last call:", json.dumps({k: last[k] for k in ("call", "q", "key", "bias")}))
EOF
  done
} > "$R/summary.txt" 2>&1
cat "$R/summary.txt"
