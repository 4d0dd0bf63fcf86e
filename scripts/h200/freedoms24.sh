#!/usr/bin/env bash
# Issue 24, second freedom round, on the H200: every GPU kernel against the seven new edge corpus
# entries (q head-major / row stride 0 / head stride 0 / overlapping heads, a head-major out=,
# garbage in unconsumed index entries, a one-row cache) and the differential property under the
# ci profile (which now draws the same freedoms). Run from the repo root with the wheels of .whl
# installed to /tmp/site and PYTHONPATH set (sglang among them); .h200/carry_peers/vllm_py.tar.xz
# carried for vllm-*. At most ~270 s wall clock, every step under `timeout`; runs beside other
# scripts (one pytest process per kernel, -n 0, kernels in sequence within three parallel lanes).
# For a dry run on a CPU: DEVICE=cpu LANES="emulated" bash scripts/h200/freedoms24.sh
# Writes under "$RESULTS/freedoms24/":
#   env.txt, steps.log          versions, what ran when, exit codes
#   corpus-<K>.log              `pytest conformance --kernel K -k <the 7 entries> -rfE` (each verdict)
#   differential-<K>.log        `pytest conformance --kernel K -k "test_differential and not beyond and not long"`
#   pending-<K>/                failing recipes saved by the suite (corpus JSON: replay with `conformance replay`)
set -u
: "${RESULTS:?RESULTS must be set}"
R="$RESULTS/freedoms24"
mkdir -p "$R"
START=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
STATE=/tmp/freedoms24-state
rm -rf "$STATE"; mkdir -p "$STATE"
# SIGINT at its default disposition in the child (a background job may inherit it ignored), so that
# `timeout -s INT` lets pytest print its summary
DFLINT=(python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])')
log() { echo "[freedoms24 $(($(date +%s) - START)) s] $*" | tee -a "$R/steps.log"; }
VLLM_DIR=/tmp/vllm_py
if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR" && log "vllm python tree extracted"
fi
export PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD"
{ date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null; python3 -c 'import torch; print("torch", torch.__version__)'; } > "$R/env.txt" 2>&1
ENTRIES="edge-head-major-q or edge-q-row-stride-0 or edge-q-head-stride-0 or edge-overlapping-q-heads or edge-head-major-out or edge-unconsumed-garbage or edge-one-row-cache"
DEVICE=${DEVICE:-cuda}
LANES=${LANES:-"emulated flashmla;flashmla-prefill torch-sdpa;sglang-decode vllm-decode vllm-sparse"}
run_kernel() {  # $1 kernel
  local k=$1
  CONFORMANCE_DIR="$STATE/$k" CONFORMANCE_PENDING_DIR="$R/pending-$k" timeout -k 10 40 \
    python3 -m pytest conformance --kernel "$k" --device "$DEVICE" -n 0 -q -rfE -p no:cacheprovider -k "$ENTRIES" > "$R/corpus-$k.log" 2>&1
  log "corpus $k rc=$?"
  CI=1 CONFORMANCE_DIR="$STATE/$k" CONFORMANCE_PENDING_DIR="$R/pending-$k" timeout -s INT -k 10 90 \
    "${DFLINT[@]}" python3 -m pytest conformance --kernel "$k" --device "$DEVICE" -n 0 -q -rfE -p no:cacheprovider \
    -k "test_differential and not beyond and not long" > "$R/differential-$k.log" 2>&1
  log "differential $k rc=$?"
}
IFS=';' read -r -a lanes <<< "$LANES"
for lane in "${lanes[@]}"; do
  ( for k in $lane; do run_kernel "$k"; done ) &
done
wait
log "done"
