#!/usr/bin/env bash
# Issue 23's left parts on the H200 (helper peers28), beside a campaign on the same GPU: at most 300 s
# (every step under timeout: writer 30 + max(bench 80, writer caches 95) + suites 150 + count 20 = 295;
# typically ~200 s; the vLLM files are unpacked first when /tmp/vllm_py lacks them, a few seconds):
#  (a) the Triton peers' adapter / bare ratios at n_q 1, 1024, 4096 (scripts/h200/final_peers_bench.py,
#      about 25 s alone; contended beside a campaign: read the ratios) -> bench.txt|json|err
#  (b) the suite's differential property and its precondition-violation property (where the sglang
#      writer's caches go for profiles that need power-of-two scales) on emulated, flashmla,
#      flashmla-prefill, torch-sdpa, sglang-decode, vllm-decode, vllm-sparse, plus float32_torch
#      (profile fp32: the sglang caches get the differential verdict there), with the sglang writer
#      drawn (it is wherever it runs: writer.txt says whether it does), 8 pytest processes at once
#      (--hypothesis-profile dev: 40 examples per property, random seeds; about 1 in 7 preconditions
#      examples is a sglang cache where the writer runs) -> suite-K.txt|err,
#      state-K/ (run folders), pending-K/ (failures), examples.json (examples per kernel, property,
#      writer and outcome; the kinds the sglang caches violated: scripts/writer_examples.py)
#  (c) caches written by sglang's quantiser (scripts/sglang_writer_caches.py: 4096 activation-like rows
#      and one recipe cache per latent distribution; bytes against pow2 / pow2-floor / raw; the H200
#      fixture tests/data/sglang_writer_h200.pt written again) and `conformance preconditions` on each
#      -> writer/summary.json, writer/*.pt, preconditions-NAME.md|json (runs during (a))
# Everything under "$RESULTS/peers28/"; steps.txt has each step's exit code and seconds.
# --cpu: the logic on a machine without CUDA (tiny sizes, --kernel emulated on the CPU, no bench;
# the writer through Triton's CPU interpreter when Triton and sglang import, its check then refuses
# the interpreter's bytes and the recipe caches are not written).
set -uo pipefail
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
: "${RESULTS:?RESULTS must be set}"
R="$RESULTS/peers28"; mkdir -p "$R"
PY="${PYTHON:-python3}"
CPU=0; [ "${1:-}" = "--cpu" ] && CPU=1
VLLM_DIR=/tmp/vllm_py
if [ "$CPU" = 0 ] && [ ! -d "$VLLM_DIR/vllm" ] && [ -f .h200/carry_peers/vllm_py.tar.xz ]; then
  mkdir -p "$VLLM_DIR" && timeout 30 tar -xJf .h200/carry_peers/vllm_py.tar.xz -C "$VLLM_DIR"
fi
export PYTHONPATH="$VLLM_DIR:${PYTHONPATH:-}:$PWD"
T0=$(date +%s)
step() {  # step NAME RC: one line per step in steps.txt
  echo "$1 rc=$2 at $(( $(date +%s) - T0 )) s" | tee -a "$R/steps.txt"
}
: > "$R/steps.txt"
{ date -u; nvidia-smi -L 2> /dev/null; "$PY" -c "import torch; print('torch', torch.__version__)"; } > "$R/env.txt" 2>&1
timeout 30 "$PY" -c "from kernel.writers import sglang as w; r = w.unavailable_reason(); print(r or 'sglang writer: runs here')" \
  > "$R/writer.txt" 2>&1
step writer $?

# (c) in the background, during (a)
(
  if [ "$CPU" = 1 ]; then
    WARGS=(--interpreter --rows 64)
  else
    WARGS=(--rows 4096)
  fi
  timeout -k 5 55 "$PY" scripts/sglang_writer_caches.py --out "$R/writer" "${WARGS[@]}" \
    --compare-with tests/data/sglang_writer_h200.pt > "$R/writer.log" 2>&1
  echo "writer_caches rc=$?" > "$R/writer.rc"
  # `conformance preconditions DUMP --format json|markdown --output ...` per dump, in one process
  timeout -k 5 30 "$PY" - "$R" >> "$R/writer.log" 2>&1 << 'EOF'
import sys
from pathlib import Path

from conformance.cli import main

out = Path(sys.argv[1])
for dump in sorted((out / "writer").glob("*.pt")):
    for fmt, ext in (("json", "json"), ("markdown", "md")):
        rc = main(["preconditions", str(dump), "--format", fmt, "--output", str(out / f"preconditions-{dump.stem}.{ext}"), "--quiet"])
    print(f"preconditions {dump.stem} rc={rc} (1: violations found)", flush=True)
EOF
) &
WRITER_PID=$!

# (a)
if [ "$CPU" = 1 ]; then
  echo "bench: skipped (--cpu: the Triton peers need CUDA)" > "$R/bench.txt"
  step bench skipped
else
  timeout -k 5 75 "$PY" scripts/h200/final_peers_bench.py --n-q 1,1024,4096 --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
  step bench $?
fi
wait "$WRITER_PID"
step writer_caches "$(sed 's/.*rc=//' "$R/writer.rc" 2> /dev/null || echo unknown)"

# (b)
if [ "$CPU" = 1 ]; then
  KERNELS=(emulated); PROFILE_ARGS=(--hypothesis-profile ci); DEVICE=(--device cpu); LIMIT=150
else
  KERNELS=(emulated flashmla flashmla-prefill torch-sdpa sglang-decode vllm-decode vllm-sparse conformance.mutation.independent:float32_torch)
  PROFILE_ARGS=(--hypothesis-profile dev); DEVICE=(--device cuda); LIMIT=140
fi
pids=()
for k in "${KERNELS[@]}"; do
  tag=${k##*:}
  CONFORMANCE_DIR="$R/state-$tag" CONFORMANCE_PENDING_DIR="$R/pending-$tag" timeout -s INT -k 10 "$LIMIT" \
    "$PY" -m pytest conformance/suite/test_differential.py::test_differential conformance/suite/test_preconditions.py \
    --kernel "$k" "${DEVICE[@]}" "${PROFILE_ARGS[@]}" -n 0 -q -rfE -p no:cacheprovider > "$R/suite-$tag.txt" 2> "$R/suite-$tag.err" &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  step "suite ${KERNELS[$i]##*:}" $?
done
states=()
for k in "${KERNELS[@]}"; do [ -d "$R/state-${k##*:}" ] && states+=("$R/state-${k##*:}"); done
if [ "${#states[@]}" -gt 0 ]; then
  timeout 20 "$PY" scripts/writer_examples.py "${states[@]}" --json "$R/examples.json" > /dev/null 2> "$R/examples.err"
  step examples $?
fi
echo "--- peers28 done in $(( $(date +%s) - T0 )) s"
cat "$R/writer.txt" "$R/bench.txt"
for k in "${KERNELS[@]}"; do echo "suite ${k##*:}: $(tail -n 1 "$R/suite-${k##*:}.txt")"; done
cat "$R/writer.rc"; grep "^preconditions" "$R/writer.log"
