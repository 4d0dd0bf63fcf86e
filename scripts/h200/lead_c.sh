#!/usr/bin/env bash
# The lead's campaign call: vLLM's Python files on PYTHONPATH (for vllm-decode / vllm-sparse), then
# `final_throughput.sh campaign SECONDS` (every registered GPU kernel, nightly profile, plus the
# profile of one emulated campaign). Usage: bash scripts/h200/lead_c.sh SECONDS
set -uo pipefail
: "${RESULTS:?RESULTS must be set}"
VLLM_DIR=/tmp/vllm_py
if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR"
fi
export PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD"
bash scripts/h200/final_throughput.sh campaign "${1:?usage: lead_c.sh SECONDS}"
