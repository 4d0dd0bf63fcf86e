#!/usr/bin/env bash
# Issue 21 on one H200: the bench (run ALONE, <= 150 s) and the nightly-profile fuzz campaigns.
#   bash scripts/h200/final_throughput.sh bench
#       scripts/peers_bench.py (n_q 1, 64, 1024, 4096; the gather / fp64 limits and the adapter /
#       bare-kernel ratio beside each row) -> bench.txt, bench.json, bench.err
#   bash scripts/h200/final_throughput.sh campaign SECONDS
#       `python -m conformance fuzz --hypothesis-profile nightly --seconds SECONDS` for emulated,
#       flashmla, flashmla-prefill and torch-sdpa concurrently (one process each on the GPU,
#       failures saved to pending-<kernel>/), plus one emulated campaign of min(SECONDS, 120) s under
#       cProfile (scripts/campaign_profile.py: where the time goes). Writes fuzz-<kernel>.txt/.err,
#       fuzz-<kernel>.json (the fuzz summary: per-property rates and coverage), campaigns.txt /
#       campaigns.md (scripts/campaign_table.py), profile-emulated/ (stages.txt, top.txt, profile.pstats).
# Everything goes under "$RESULTS/throughput/". Every step runs under `timeout`.
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/throughput"
mkdir -p "$R"
KERNELS="emulated flashmla flashmla-prefill torch-sdpa"

case "${1:-}" in
bench)
  { date -u; nvidia-smi -L; } > "$R/bench-env.txt" 2>&1
  timeout 150 python3 scripts/peers_bench.py --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
  echo "bench rc=$?" | tee -a "$R/bench.txt"
  cat "$R/bench.txt"; tail -3 "$R/bench.err"
  ;;
campaign)
  S="${2:?usage: final_throughput.sh campaign SECONDS}"
  PROF_S=$(( S < 120 ? S : 120 ))
  # five processes share the host's cores: torch's default of one intra-op thread per core each
  # oversubscribes them (the profile of the final run spent 29 s of a 126 s campaign in CPU
  # repeat_interleave calls of a few thousand elements); a few threads per process instead
  NPROC=$(nproc 2> /dev/null || echo 16)
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( NPROC / 5 > 1 ? NPROC / 5 : 1 ))}
  date -u > "$R/campaign-env.txt"
  for k in $KERNELS; do
    CONFORMANCE_PENDING_DIR="$R/pending-$k" timeout $(( S + 180 )) python3 -m conformance fuzz --kernel "$k" --seconds "$S" \
      --hypothesis-profile nightly --shrink-seconds 30 > "$R/fuzz-$k.txt" 2> "$R/fuzz-$k.err" &
  done
  CONFORMANCE_PENDING_DIR="$R/pending-profile" timeout $(( PROF_S + 240 )) python3 scripts/campaign_profile.py --out "$R/profile-emulated" -- \
    --kernel emulated --seconds "$PROF_S" --hypothesis-profile nightly --shrink-seconds 30 --no-save > "$R/profile-emulated.txt" 2>&1 &
  wait
  summaries=()
  for k in $KERNELS; do
    path=$(sed -n 's/^  summary (JSON): //p' "$R/fuzz-$k.txt" | tail -1)
    if [ -n "$path" ] && [ -f "$path" ]; then cp "$path" "$R/fuzz-$k.json"; summaries+=("$R/fuzz-$k.json"); fi
    echo "--- fuzz $k"; grep -E "^fuzz summary|^  (differential|long_rows|preconditions) |examples/s|FAILURES|^  - " "$R/fuzz-$k.txt" | head -12; tail -2 "$R/fuzz-$k.err"
  done
  if [ ${#summaries[@]} -gt 0 ]; then
    timeout 30 python3 scripts/campaign_table.py "${summaries[@]}" > "$R/campaigns.txt" 2>&1
    timeout 30 python3 scripts/campaign_table.py --markdown "${summaries[@]}" > "$R/campaigns.md" 2>&1
    cat "$R/campaigns.txt"
  fi
  echo "--- where the time goes (emulated, under cProfile)"; cat "$R/profile-emulated/stages.txt" 2>/dev/null || tail -5 "$R/profile-emulated.txt"
  ;;
*)
  echo "usage: bash scripts/h200/final_throughput.sh bench | campaign SECONDS" >&2
  exit 2
  ;;
esac
