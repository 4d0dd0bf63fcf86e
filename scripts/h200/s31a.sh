#!/usr/bin/env bash
# Issue 21, session 31's first call: every step alone on the GPU, one after another (<= 540 s).
#   bash scripts/h200/s31a.sh
# Steps: scripts/h200/emuqk31.sh (fused QK + PV), emupv31.sh (fused PV), oracle31.sh (the
# oracle's fused products), final_throughput.sh bench (the bench table with limits).
set -u
export PYTHONUNBUFFERED=1
mkdir -p "${RESULTS:-results}/logs"
bash scripts/h200/seq.sh 150:scripts/h200/emuqk31.sh 125:scripts/h200/emupv31.sh 125:scripts/h200/oracle31.sh "155:scripts/h200/final_throughput.sh%bench"
