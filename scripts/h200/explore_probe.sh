#!/usr/bin/env bash
# Exploration (issue 20): MMA-Sim-style directed probes of the Hopper bf16 tensor-core f32
# accumulation through plain torch.mm (cuBLAS, wgmma) with f32 output, and through one Triton
# tl.dot when Triton imports: fraction bits kept after alignment, rounding of the aligned terms and
# of the result, products summed per rounding (instruction block), cancellation; then a randomized
# bit-exact check of the surviving models (conformance/tools/probe/mma.py). Small: a few seconds of GPU,
# runs beside other scripts. Writes $RESULTS/probe/{explore.log,mma.json}. Budget 240 s.
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/probe"; mkdir -p "$R"
{
  date -u +%FT%TZ
  timeout 10 nvidia-smi -L
  timeout 20 python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cublas', torch.backends.cuda.preferred_blas_library() if hasattr(torch.backends.cuda, 'preferred_blas_library') else '?')"
  timeout 200 python3 -m conformance.tools.probe.mma --device cuda --json "$R/mma.json"
  echo "mma rc=$?"
  date -u +%FT%TZ
} 2>&1 | tee "$R/explore.log"
