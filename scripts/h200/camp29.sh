#!/usr/bin/env bash
# Issue 21, session 29 (camp29): the emulated campaign's rate and stages after the host-read cuts,
# and flashmla-prefill's adapter against its bare kernel. Run ALONE: the bench times the GPU and
# the campaign uses every core. <= 330 s: bench 75 s + op profile 60 s + campaign 120 + 70 s.
#   bash scripts/h200/camp29.sh [bench|campaign|all]     (default all: bench, then campaign)
# Writes under "$RESULTS/camp29/":
#   env.txt                  date, GPUs, commit, cores, load
#   bench.txt/.json/.err     scripts/peers_bench.py --kernels flashmla-prefill (n_q 1, 64, 1024, 4096;
#                            the adapter, its bare kernel, x bare; the GPU alone)
#   op-profile.txt/.err      scripts/gpu_op_profile.py: flashmla-prefill and its bare kernel's top
#                            operators by device and host time per call (n_q 1, 64, 4096)
#   throughput/              scripts/h200/final_throughput.sh campaign $SECONDS with KERNELS=emulated,
#                            PROCS=$PROCS (default 15), no cProfile: fuzz-emulated-N.txt/.json and
#                            campaigns.txt / campaigns.md (scripts/campaign_table.py)
#   timers/ timers.txt       scripts/campaign_profile.py --timers: one more emulated nightly campaign
#                            of $TIMER_SECONDS (default 60) s beside the others (the same load),
#                            its stages with wall and CPU clocks
# Environment: SECONDS_CAMPAIGN (default 120), PROCS (15), TIMER_SECONDS (60), PYTHON (python3),
# CAMP29_TINY=1 (a CPU check of the logic: 2 processes, 8 s campaigns, n_q 1,4, emulated rows).
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/camp29"
mkdir -p "$R"
PY="${PYTHON:-python3}"
TINY="${CAMP29_TINY:-0}"
S="${SECONDS_CAMPAIGN:-120}"
P="${PROCS:-15}"
TS="${TIMER_SECONDS:-60}"
NQ=1,64,1024,4096
OPNQ=1,64,4096
BENCH_KERNELS=flashmla-prefill
SIZE=()
if [ "$TINY" = 1 ]; then S=8; P=2; TS=6; NQ=1,4; OPNQ=1; BENCH_KERNELS=emulated; SIZE=(--cache-rows 4096 --keys 256); fi
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
  timeout -k 5 60 "$PY" scripts/gpu_op_profile.py --n-q "$OPNQ" --kernels "$op_kernels" "${op_device[@]}" "${SIZE[@]}" \
    --calls 3 --top 20 > "$R/op-profile.txt" 2> "$R/op-profile.err"
  echo "op profile rc=$?" >> "$R/op-profile.txt"
  cat "$R/bench.txt"
}

campaign() {
  # the stage timers' campaign beside the PROCS campaigns (started first: it shares their load)
  CONFORMANCE_PENDING_DIR="$R/pending-timers" OMP_NUM_THREADS=1 timeout -s INT -k 15 $(( TS + 50 )) \
    "$PY" scripts/campaign_profile.py --timers --out "$R/timers" -- \
    --kernel emulated --seconds "$TS" --hypothesis-profile nightly --shrink-seconds 10 --no-save > "$R/timers.txt" 2>&1 &
  timers_pid=$!
  KERNELS=emulated PROCS="$P" PROFILE=0 RESULTS="$R" PYTHON="$PY" \
    timeout -k 15 $(( S + 90 )) bash scripts/h200/final_throughput.sh campaign "$S" > "$R/campaign.log" 2>&1
  echo "campaign rc=$?" >> "$R/campaign.log"
  wait "$timers_pid"
  echo "timers rc=$?" >> "$R/timers.txt"
  tail -25 "$R/campaign.log"
  echo "--- stage timers (one more emulated process beside the campaign)"
  cat "$R/timers/stages.txt" 2> /dev/null || tail -5 "$R/timers.txt"
}

case "${1:-all}" in
bench) bench ;;
campaign) campaign ;;
all) bench; campaign ;;
*) echo "usage: bash scripts/h200/camp29.sh [bench|campaign|all]" >&2; exit 2 ;;
esac
