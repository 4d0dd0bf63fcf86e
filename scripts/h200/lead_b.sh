#!/usr/bin/env bash
# The lead's second call: the timing call (lead_a.sh: issue 21 speed21, the Triton peers' bench),
# alone on the GPU, then issue 24's second freedom round on every GPU kernel (freedoms24.sh).
set -uo pipefail
: "${RESULTS:?RESULTS must be set}"
timeout -k 10 380 bash scripts/h200/lead_a.sh
echo "lead_a rc=$?"
timeout -k 10 290 bash scripts/h200/freedoms24.sh
echo "freedoms24 rc=$?"
