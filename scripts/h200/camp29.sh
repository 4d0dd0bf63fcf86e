#!/usr/bin/env bash
# Issue 21, session 29 (camp29): the emulated campaign's rate and stages after the host-read cuts
# (compare 24 -> 1 reads per example, input guard 4 -> 1, materialise one host-to-device copy),
# how the rate scales with processes and without the GPU, and flashmla-prefill's adapter against
# its bare kernel. Run ALONE: the bench times the GPU, the campaigns use every core.
#   bash scripts/h200/camp29.sh [all|bench|campaign|sweep]      (default all)
# Wall time (defaults): bench <= 75 + 45 s; campaign <= 90 + 60 s (about 110 s); sweep <= 2 x (45 + 60) s
# (about 2 x 65 s); all <= 375 s, about 360 s.
# Writes under "$RESULTS/camp29/":
#   env.txt                  date, GPUs, commit, cores, load
#   bench.txt/.json/.err     scripts/peers_bench.py --kernels flashmla-prefill (n_q 1, 64, 1024, 4096;
#                            the adapter, its bare kernel, x bare; the GPU alone)
#   op-profile.txt/.err      scripts/gpu_op_profile.py: flashmla-prefill and its bare kernel's top
#                            operators by device and host time per call (n_q 1, 64, 4096)
#   gpu15/throughput/        scripts/h200/final_throughput.sh campaign $S with KERNELS=emulated,
#                            PROCS=$P (15), no cProfile: fuzz-emulated-N.txt/.json, campaigns.txt/.md
#   gpu15/timers/ timers.txt scripts/campaign_profile.py --timers: one more emulated nightly
#                            campaign of $TS s beside those 15 (the same load): stages, wall and CPU
#   gpu8/throughput/         the same campaign with 8 processes for $SWEEP_S s (does the rate scale
#                            with processes, or is the GPU's time-slicing between contexts the limit?)
#   mixed-gpu8/, mixed-cpu7/ 8 GPU processes and, at the same time, 7 with --device cpu, $SWEEP_S s
#                            (the host's spare cores as a second fleet; CPU problem sizes: at most 64
#                            rows, 8192 keys): the two tables together are the machine's rate
#   summary.txt              the campaign tables one after another
# Environment: CAMPAIGN_S (or SECONDS_CAMPAIGN; 90), PROCS (15), TIMER_S (60), SWEEP_S (45), PYTHON (python3),
# CAMP29_TINY=1 (a CPU check of the logic: 2 processes, 8 s campaigns, n_q 1,4, emulated rows).
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/camp29"
mkdir -p "$R"
PY="${PYTHON:-python3}"
TINY="${CAMP29_TINY:-0}"
S="${CAMPAIGN_S:-${SECONDS_CAMPAIGN:-90}}"
P="${PROCS:-15}"
TS="${TIMER_S:-60}"
SWEEP_S="${SWEEP_S:-45}"
P_SMALL=8
NQ=1,64,1024,4096
OPNQ=1,64,4096
BENCH_KERNELS=flashmla-prefill
SIZE=()
if [ "$TINY" = 1 ]; then
  S=8; P=2; TS=6; SWEEP_S=6; P_SMALL=1; NQ=1,4; OPNQ=1; BENCH_KERNELS=emulated; SIZE=(--cache-rows 4096 --keys 256)
fi
{ date -u; nvidia-smi -L 2>&1; git rev-parse HEAD 2>/dev/null || true; echo "cores $(getconf _NPROCESSORS_ONLN)"; uptime; } > "$R/env.txt"

bench() {
  timeout -k 5 75 "$PY" scripts/peers_bench.py --n-q "$NQ" --iters 10 --max-seconds 3 \
    --kernels "$BENCH_KERNELS" "${SIZE[@]}" --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
  echo "bench rc=$?" >> "$R/bench.txt"
  if [ "$TINY" = 1 ]; then
    op_kernels=emulated; op_device=(--device cpu)
  else
    op_kernels=flashmla-prefill; op_device=()
  fi
  timeout -k 5 45 "$PY" scripts/gpu_op_profile.py --n-q "$OPNQ" --kernels "$op_kernels" "${op_device[@]}" "${SIZE[@]}" \
    --calls 3 --top 20 > "$R/op-profile.txt" 2> "$R/op-profile.err"
  echo "op profile rc=$?" >> "$R/op-profile.txt"
  cat "$R/bench.txt"
}

# one emulated campaign of PROCS processes: run_campaign NAME PROCS SECONDS [FUZZ_ARGS]
run_campaign() {
  local name=$1 procs=$2 seconds=$3 extra=${4:-}
  mkdir -p "$R/$name"
  KERNELS=emulated PROCS="$procs" PROFILE=0 RESULTS="$R/$name" PYTHON="$PY" FUZZ_ARGS="$extra" \
    timeout -k 15 $(( seconds + 60 )) bash scripts/h200/final_throughput.sh campaign "$seconds" > "$R/$name/campaign.log" 2>&1
  echo "campaign $name rc=$?" >> "$R/$name/campaign.log"
  { echo "--- $name: $procs processes, $seconds s ${extra}"; cat "$R/$name/throughput/campaigns.txt" 2> /dev/null || tail -5 "$R/$name/campaign.log"; } >> "$R/summary.txt"
}

campaign() {
  # the stage timers' campaign beside the PROCS campaigns (started first: it shares their load)
  mkdir -p "$R/gpu15"
  CONFORMANCE_PENDING_DIR="$R/gpu15/pending-timers" OMP_NUM_THREADS=1 timeout -s INT -k 15 $(( TS + 50 )) \
    "$PY" scripts/campaign_profile.py --timers --out "$R/gpu15/timers" -- \
    --kernel emulated --seconds "$TS" --hypothesis-profile nightly --shrink-seconds 10 --no-save > "$R/gpu15/timers.txt" 2>&1 &
  timers_pid=$!
  run_campaign gpu15 "$P" "$S"
  wait "$timers_pid"
  echo "timers rc=$?" >> "$R/gpu15/timers.txt"
  { echo "--- stage timers (one more emulated process beside gpu15)"; cat "$R/gpu15/timers/stages.txt" 2> /dev/null || tail -5 "$R/gpu15/timers.txt"; } >> "$R/summary.txt"
}

sweep() {
  run_campaign gpu8 "$P_SMALL" "$SWEEP_S"
  run_campaign mixed-gpu8 "$P_SMALL" "$SWEEP_S" &
  gpu_pid=$!
  run_campaign mixed-cpu7 $(( P - P_SMALL )) "$SWEEP_S" "--device cpu"
  wait "$gpu_pid"
}

case "${1:-all}" in
bench) bench ;;
campaign) campaign ;;
sweep) sweep ;;
all) bench; campaign; sweep ;;
*) echo "usage: bash scripts/h200/camp29.sh [all|bench|campaign|sweep]" >&2; exit 2 ;;
esac
cat "$R/summary.txt" 2> /dev/null
