#!/usr/bin/env bash
# Session 28's extra H200 call: the whole suite on sglang-decode after its adapter's per-call
# trimming (CI=1, -n 4), then the Triton peers' adapter / bare bench twice back to back, alone
# (the n_q 1 ratios moved between the calls of this session). Writes $RESULTS/suite-sglang/,
# $RESULTS/peers-bench-{1,2}/, $RESULTS/lead28d.txt.
set -uo pipefail
: "${RESULTS:?RESULTS must be set}"
log="$RESULTS/lead28d.txt"; echo "start $(date -u +%T)" > "$log"
VLLM_DIR=/tmp/vllm_py
if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR"
fi
export PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD"
for n in 1 2; do
  mkdir -p "$RESULTS/peers-bench-$n"
  timeout -k 5 80 python3 scripts/h200/final_peers_bench.py --n-q 1,1024,4096 --json "$RESULTS/peers-bench-$n/bench.json" \
    > "$RESULTS/peers-bench-$n/bench.txt" 2> "$RESULTS/peers-bench-$n/bench.err"
  echo "triton peers bench $n rc=$? $(date -u +%T)" >> "$log"
done
mkdir -p "$RESULTS/suite-sglang"
CONFORMANCE_DIR="$RESULTS/suite-sglang/state" CONFORMANCE_PENDING_DIR="$RESULTS/suite-sglang/pending" CI=1 OMP_NUM_THREADS=1 \
  timeout -k 10 300 python3 -m pytest -n 4 -q -p no:cacheprovider conformance --kernel sglang-decode \
  > "$RESULTS/suite-sglang/pytest.txt" 2>&1
echo "suite sglang-decode rc=$? $(date -u +%T)" >> "$log"
tail -3 "$RESULTS/suite-sglang/pytest.txt" >> "$log"
cat "$log"
