#!/usr/bin/env bash
# The lead's last H200 call of session 28 (a drive.sh step, --par 400), every step ALONE on the GPU:
#   1. scripts/h200/speed28.sh (oracle, bound, emulated: bench, ops, same bits);
#   2. scripts/h200/final_peers_bench.py (the Triton peers' adapter / bare ratios, vLLM on PYTHONPATH);
#   3. final_throughput.sh bench (scripts/peers_bench.py: oracle, emulated and the FlashMLA / SDPA
#      adapters beside their bare kernels and the limits).
# Writes $RESULTS/speed28/, $RESULTS/peers-alone/, $RESULTS/throughput/, $RESULTS/lead28c.txt.
set -uo pipefail
: "${RESULTS:?RESULTS must be set}"
log="$RESULTS/lead28c.txt"
echo "start $(date -u +%T)" > "$log"
timeout -k 5 230 bash scripts/h200/speed28.sh > "$RESULTS/speed28.log" 2>&1; echo "speed28 rc=$? $(date -u +%T)" >> "$log"
VLLM_DIR=/tmp/vllm_py
if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR"
fi
mkdir -p "$RESULTS/peers-alone"
PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD" timeout -k 5 80 python3 scripts/h200/final_peers_bench.py --n-q 1,1024,4096 \
  --json "$RESULTS/peers-alone/bench.json" > "$RESULTS/peers-alone/bench.txt" 2> "$RESULTS/peers-alone/bench.err"
echo "triton peers bench rc=$? $(date -u +%T)" >> "$log"
timeout -k 5 160 bash scripts/h200/final_throughput.sh bench > "$RESULTS/throughput-bench.log" 2>&1; echo "peers_bench rc=$? $(date -u +%T)" >> "$log"
cat "$log"
