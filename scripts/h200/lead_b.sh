#!/usr/bin/env bash
# The lead's second call: the timing call (lead_a.sh: issue 21 speed21, the Triton peers' bench),
# alone on the GPU, then side by side issue 24's second freedom round on every GPU kernel
# (freedoms24.sh) and the Triton peers' kept-cache bits and timings (peers_kept.sh).
set -uo pipefail
: "${RESULTS:?RESULTS must be set}"
timeout -k 10 380 bash scripts/h200/lead_a.sh
echo "lead_a rc=$?"
( timeout -k 10 290 bash scripts/h200/freedoms24.sh > "$RESULTS/freedoms24.log" 2>&1; echo "freedoms24 rc=$?" ) &
( timeout -k 10 270 bash scripts/h200/peers_kept.sh > "$RESULTS/peers_kept.log" 2>&1; echo "peers_kept rc=$?" ) &
wait
tail -30 "$RESULTS/freedoms24.log" "$RESULTS/peers_kept.log"
