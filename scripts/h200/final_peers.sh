#!/usr/bin/env bash
# Issue 23's final H200 call: the conformance suite and a 6-minute nightly fuzz campaign against each
# new peer (sglang-decode, vllm-decode, vllm-sparse), all at once, plus adapter / bare timings.
# Run from the repo root with the wheels of .whl installed to /tmp/site and PYTHONPATH set (the
# sglang 0.5.10.post1 wheel among them); .h200/carry_peers/vllm_py.tar.xz (vLLM 0.33.0's Python
# files) carried. At most ~450 s wall clock; every step under `timeout` (suite and fuzz get SIGINT first:
# pytest and fuzz still print their summaries); runs beside other scripts.
# Writes under "$RESULTS/peers/":
#   env.txt, resolve.txt, steps.log            versions, each backend resolved, what ran when, exit codes
#   suite-<K>.log                              `CI=1 pytest conformance --kernel K -n 4 -q -rfE` (tail: the counts)
#   fuzz-<K>.txt / .err / fuzz-<K>.json        the campaign's summary (stdout), progress, its fuzz-summary.json
#   pending-suite-<K>/, pending-fuzz-<K>/      failing recipes saved by the suite / the campaign (corpus JSON)
#   replay-<K>.txt                             each saved failure: `conformance replay` (its class) and the direct call
#   features-<K>.json / .txt                   scripts/peers_features.py over the run folders: err/bound max / median, features
#   runs-<K>.tgz                               the run folders (files under 2 MB; the archive left out above 3 MB)
#   bench.txt / bench.json                     adapter and bare-kernel medians at n_q 1, 1024, 4096 (contended)
#   probe-<K>.txt / .json, probed-<K>.toml    `conformance probe`: the measured profile and its evidence
#   sglang-int32.txt                           sglang's reader / decode kernel just past 2^31-element offsets
set -u
: "${RESULTS:?RESULTS must be set}"
R="$RESULTS/peers"
mkdir -p "$R"
START=$(date +%s)
export PYTHONUNBUFFERED=1
PEERS="sglang-decode vllm-decode vllm-sparse"
STATE=/tmp/peers-state
rm -rf "$STATE"; mkdir -p "$STATE"
# SIGINT at its default disposition in the child (an asynchronous job may inherit it ignored), so that
# `timeout -s INT` lets pytest and fuzz print their summaries.
DFLINT=(python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])')
log() { echo "[final_peers $(($(date +%s) - START)) s] $*" | tee -a "$R/steps.log"; }

VLLM_DIR=/tmp/vllm_py
if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR" && log "vllm python tree extracted"
fi
export PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD"
{
  date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} > "$R/env.txt" 2>&1
log "env written"
( for k in $PEERS; do timeout 90 python3 -c "from kernel.registry import resolve; b = resolve('$k'); print('$k', 'ok', b.profile)" 2>&1 | tail -1; done \
    > "$R/resolve.txt" ) &

for k in $PEERS; do
  ( CI=1 CONFORMANCE_DIR="$STATE/suite-$k" CONFORMANCE_PENDING_DIR="$R/pending-suite-$k" \
      timeout -s INT -k 20 320 "${DFLINT[@]}" python3 -m pytest conformance --kernel "$k" -n 4 -q -rfE -p no:cacheprovider > "$R/suite-$k.log" 2>&1
    log "suite $k rc=$?" ) &
  ( CONFORMANCE_DIR="$STATE/fuzz-$k" CONFORMANCE_PENDING_DIR="$R/pending-fuzz-$k" \
      timeout -s INT -k 20 410 "${DFLINT[@]}" python3 -m conformance fuzz --kernel "$k" --minutes 6 --hypothesis-profile nightly --shrink-seconds 30 \
      > "$R/fuzz-$k.txt" 2> "$R/fuzz-$k.err"
    log "fuzz $k rc=$?" ) &
done
for k in $PEERS; do
  ( CONFORMANCE_DIR="$STATE/probe-$k" timeout -k 5 300 python3 -m conformance probe --kernel "$k" --device cuda \
      --out "$R/probed-$k.toml" --json "$R/probe-$k.json" > "$R/probe-$k.txt" 2>&1
    log "probe $k rc=$?" ) &
done
( timeout -k 5 150 python3 scripts/h200/final_peers_bench.py --json "$R/bench.json" > "$R/bench.txt" 2>&1; log "bench rc=$?" ) &
( timeout -k 5 330 python3 scripts/repro/sglang_decode_reader_int32.py > "$R/sglang-int32.txt" 2>&1; log "sglang int32 repro rc=$?" ) &
wait
log "suites, campaigns and bench finished"

for k in $PEERS; do
  summary=$(find "$STATE/fuzz-$k" -name fuzz-summary.json 2>/dev/null | head -1)
  [ -n "$summary" ] && cp "$summary" "$R/fuzz-$k.json"
  timeout -k 5 60 python3 scripts/peers_features.py "$STATE/suite-$k"/runs/* "$STATE/fuzz-$k"/runs/* --json "$R/features-$k.json" \
    > "$R/features-$k.txt" 2>&1
  (cd "$STATE" && find "suite-$k" "fuzz-$k" -type f -size -2M 2>/dev/null | tar czf "$R/runs-$k.tgz" -T - 2>/dev/null)
  [ "$(stat -c %s "$R/runs-$k.tgz" 2>/dev/null || echo 0)" -gt 3000000 ] && rm -f "$R/runs-$k.tgz" && log "runs-$k.tgz over 3 MB: left out"
done
# Each saved failure replayed (class and worst element), while time remains.
for k in $PEERS; do
  for f in $(ls "$R/pending-suite-$k"/*.json "$R/pending-fuzz-$k"/*.json 2>/dev/null | head -4); do
    [ $(( $(date +%s) - START )) -gt 440 ] && break 2
    { echo "=== $f"; timeout -k 5 25 python3 -m conformance replay "$f" --kernel "$k" 2>&1 | tail -40
      echo "--- direct call (scripts/repro/sglang_vllm_triton.py)"
      timeout -k 5 40 python3 scripts/repro/sglang_vllm_triton.py "$f" "$k" 2>&1 | tail -8; } >> "$R/replay-$k.txt"
  done
done
find "$R" -type f -size +8M -print -delete | sed 's/^/deleted (too big): /' >> "$R/steps.log"
log "done"
