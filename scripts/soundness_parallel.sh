#!/usr/bin/env bash
# The soundness campaign split over N processes: scripts/soundness_parallel.sh N PROBLEMS OUTDIR
set -uo pipefail
n=${1:-4}; total=${2:-100000}; out=${3:-soundness-out}; mkdir -p "$out"
per=$(( (total + n - 1) / n ))
for i in $(seq 1 "$n"); do
  keys=$(( i % 4 == 0 ? 4096 : 1024 ))
  OMP_NUM_THREADS=1 python3 -m conformance soundness --quiet --problems "$per" --max-total-keys "$keys" --json "$out/part$i.json" > "$out/part$i.log" 2>&1 &
done
wait
python3 -m conformance soundness --merge "$out"/part*.json --json "$out/summary.json"
