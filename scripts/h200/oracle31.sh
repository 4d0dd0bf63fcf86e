#!/usr/bin/env bash
# Issue 21, oracle31: the float64 oracle's fused products (oracle.fused_products: q . K and
# exp-weights @ V from the records, no f64 key tensor) against the bmm's over decoded keys
# (ORACLE_FUSED_PRODUCTS=0) on one H200: self-check, max |fused - bmm| in units of the
# reference's rounding bound and in ulps (bench problem, snapshot problems), reference() ms
# old / fused at n_q 64, 1024, 4096, and the kernels' launch shapes.
# <= 120 s: timeouts 60 + 28 + 28 s.
#   bash scripts/h200/oracle31.sh            (ORACLE31_TINY=1: tiny sizes, for a CPU dry run)
# Writes under "$RESULTS/oracle31/": env.txt, main.txt (selfcheck, products, bench),
# snapshot.txt, shapes.txt (scripts/h200/oracle31.py's sections).
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/oracle31"
mkdir -p "$R"
{ date -u; nvidia-smi -L 2>&1; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" 2>&1; } > "$R/env.txt"
if [ "${ORACLE31_TINY:-0}" = 1 ]; then
  SIZES=(--n-q 4,16 --keys 64 --heads 4 --cache-rows 4096 --iters 2)
else
  SIZES=(--n-q 64,1024,4096 --iters 10)
fi
timeout -k 5 60 python3 scripts/h200/oracle31.py "${SIZES[@]}" --sections selfcheck,products,bench > "$R/main.txt" 2>&1
echo "main rc=$?" >> "$R/main.txt"
timeout -k 5 28 python3 scripts/h200/oracle31.py "${SIZES[@]}" --sections snapshot > "$R/snapshot.txt" 2>&1
echo "snapshot rc=$?" >> "$R/snapshot.txt"
timeout -k 5 28 python3 scripts/h200/oracle31.py "${SIZES[@]}" --sections shapes > "$R/shapes.txt" 2>&1
echo "shapes rc=$?" >> "$R/shapes.txt"
clean() { grep -v "Warning\|warn(\|^  output =\|^  return TensorHandle" "$1" | cut -c1-220; }
clean "$R/main.txt" | tail -n 30; clean "$R/snapshot.txt" | grep -v "^snapshot so far" | tail -n 8
clean "$R/snapshot.txt" | grep "^snapshot so far" | tail -n 1; clean "$R/shapes.txt" | tail -n 20
