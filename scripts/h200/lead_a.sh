#!/usr/bin/env bash
# The lead's timing call (nothing else on the GPU): issue 21's reference and adapter speed
# (scripts/h200/speed21.sh, <= 200 s), then issue 23's Triton peers beside their bare kernels,
# uncontended (scripts/h200/final_peers_bench.py, n_q 1, 1024, 4096, <= 150 s).
# Writes "$RESULTS/speed21/" (see speed21.sh) and "$RESULTS/peers_alone/bench.txt|json|err".
set -uo pipefail
export PYTHONUNBUFFERED=1
: "${RESULTS:?RESULTS must be set}"
timeout -k 10 210 bash scripts/h200/speed21.sh
echo "speed21 rc=$?"
R="$RESULTS/peers_alone"; mkdir -p "$R"
VLLM_DIR=/tmp/vllm_py
if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR"
fi
PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD" timeout -k 5 150 python3 scripts/h200/final_peers_bench.py --n-q 1,1024,4096 \
  --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
echo "peers bench rc=$?" | tee -a "$R/bench.txt"
cat "$R/bench.txt"; tail -3 "$R/bench.err"
