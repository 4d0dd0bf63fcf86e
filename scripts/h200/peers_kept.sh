#!/usr/bin/env bash
# The Triton peers' kept-cache path on the real kernels (issues 21, 23): the same bits as the
# per-slot path (first sight, build, hit, a fresh cache tensor, an in-place write) and the
# backend call beside the kernel on what it prepared, n_q 1, 64, 1024 (scripts/h200/peers_kept_bits.py).
# Runs beside other GPU work (timings then contended: read the bits). At most ~250 s.
# Writes "$RESULTS/peers_kept/bits.txt|json|err".
set -uo pipefail
export PYTHONUNBUFFERED=1
: "${RESULTS:?RESULTS must be set}"
R="$RESULTS/peers_kept"; mkdir -p "$R"
VLLM_DIR=/tmp/vllm_py
if [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 60 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR"
fi
PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD" timeout -k 5 240 python3 scripts/h200/peers_kept_bits.py --n-q 1,64,1024 \
  --json "$R/bits.json" > "$R/bits.txt" 2> "$R/bits.err"
echo "peers_kept rc=$?" | tee -a "$R/bits.txt"
cat "$R/bits.txt"; tail -3 "$R/bits.err"
