#!/usr/bin/env bash
# Issue 21, session 29's first call: where the device and host time of the slow calls goes, on
# an idle H200. Run ALONE (it times). <= 240 s: timeouts 60 + 100 + 75 s.
#   bash scripts/h200/prof29.sh
# Writes under "$RESULTS/prof29/":
#   bench.txt/.json   scripts/peers_bench.py --kernels oracle,emulated,flashmla-prefill (n_q 1, 64,
#                     1024, 4096): this tree's numbers before the session's changes
#   profile.txt       scripts/gpu_op_profile.py: top operators by self device and host time per
#                     call for oracle, emulated, flashmla-prefill (+ its bare kernel) at n_q 1, 64, 4096
#   traces/           Chrome traces of those calls
#   timers/           scripts/campaign_profile.py --timers: a 60 s emulated nightly campaign's stages
#                     (wall and CPU clocks, no cProfile inflation)
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/prof29"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; } > "$R/env.txt"
timeout -k 5 60 python3 scripts/peers_bench.py --n-q 1,64,1024,4096 --iters 10 --max-seconds 2 \
  --kernels oracle,emulated,flashmla-prefill --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
echo "bench rc=$?" >> "$R/bench.txt"
timeout -k 5 100 python3 scripts/gpu_op_profile.py --n-q 1,64,4096 --kernels oracle,emulated,flashmla-prefill \
  --calls 3 --top 30 --trace-dir "$R/traces" > "$R/profile.txt" 2> "$R/profile.err"
echo "profile rc=$?" >> "$R/profile.txt"
CONFORMANCE_PENDING_DIR="$R/pending" timeout -s INT -k 15 75 python3 scripts/campaign_profile.py --timers --out "$R/timers" -- \
  --kernel emulated --seconds 60 --hypothesis-profile nightly --shrink-seconds 10 --no-save > "$R/timers.txt" 2>&1
echo "timers rc=$?" >> "$R/timers.txt"
tar czf "$R/traces.tgz" -C "$R" traces && rm -rf "$R/traces"
cat "$R/bench.txt"; grep -A3 "^==" "$R/profile.txt" | head -60; cat "$R/timers/stages.txt" 2>/dev/null
