#!/usr/bin/env bash
# Issue 23 exploration on the H200: does each candidate peer kernel import, compile and agree with a
# float64 softmax on sparse rows; bare-kernel timings; PTX facts of the Triton kernels; the sglang
# fp8_ds_mla writer's bytes against the project's writers.
#
# Run from the repo root with the wheels of .whl installed to /tmp/site and PYTHONPATH set
# (sglang 0.5.10.post1 is one of them). Carried: .h200/carry_peers/ (vllm_py.tar.xz: vLLM 0.33.0's
# Python files and dist-info, no compiled libraries).
# Writes everything under "$RESULTS/peers/"; at most ~330 s wall clock; runs beside other scripts
# on the same GPU (one process at a time here, each under its own timeout).
set -u
: "${RESULTS:?RESULTS must be set}"
OUT="$RESULTS/peers"
mkdir -p "$OUT"
START=$(date +%s)
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/peers_triton_cache
rm -rf "$TRITON_CACHE_DIR"
CARRY=.h200/carry_peers
PY="scripts/h200/explore_peers.py"

log() { echo "[explore_peers $(($(date +%s) - START)) s] $*" | tee -a "$OUT/steps.log"; }

{
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  python3 -c 'import torch, triton, sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  python3 -m pip list 2>/dev/null | grep -iE '^(sglang|vllm|flashinfer|xformers|flash.attn|sgl.flash.mla|torch|triton) '
  nvcc --version | tail -2
  ls -la "$CARRY" 2>&1
  echo "PYTHONPATH=${PYTHONPATH:-}"
} > "$OUT/env.txt" 2>&1
log "env written"

# vLLM's Python tree (wheel 0.33.0 minus its compiled libraries), extracted beside /tmp/site.
VLLM_DIR=/tmp/vllm_py
if [ -f "$CARRY/vllm_py.tar.xz" ]; then
  rm -rf "$VLLM_DIR" && mkdir -p "$VLLM_DIR"
  timeout 60 tar -xJf "$CARRY/vllm_py.tar.xz" -C "$VLLM_DIR" && log "vllm python tree extracted" || log "vllm extract FAILED"
else
  log "no $CARRY/vllm_py.tar.xz: vllm probes will fail at import"
fi

run_probe() {  # name, timeout seconds, extra PYTHONPATH
  local name=$1 secs=$2 extra=${3:-}
  log "probe $name (timeout $secs s)"
  TRITON_CACHE_DIR="$TRITON_CACHE_DIR/$name" PYTHONPATH="${extra:+$extra:}${PYTHONPATH:-}:$PWD" timeout -k 5 "$secs" python3 "$PY" "$name" "$OUT" > "$OUT/$name.log" 2>&1
  log "probe $name rc=$?"
}

# Two lanes at once (Triton compiles are CPU-bound; timings share the GPU with the other lane
# and with other scripts: read them as rough).
(
  run_probe ftz-triton 40
  run_probe sglang-decode 110
  run_probe sglang-writer 50
) &
LANE_A=$!
(
  run_probe vllm-decode 130 "$VLLM_DIR"
  run_probe vllm-sparse 110 "$VLLM_DIR"
) &
LANE_B=$!
wait "$LANE_A" "$LANE_B"
# The committed adapters (kernel/backends/{sglang_decode,vllm_decode,vllm_sparse}.py) through the registry.
LEFT=$((320 - ($(date +%s) - START)))
if [ "$LEFT" -gt 30 ]; then run_probe adapters "$LEFT" "$VLLM_DIR"; else log "adapters probe skipped ($LEFT s left)"; fi

# Keep only small files (PTX copies are a few hundred KB at most).
find "$OUT" -type f -size +8M -print -delete | sed 's/^/deleted (too big): /' >> "$OUT/steps.log"
log "done"
