#!/usr/bin/env bash
# Issue 21 on the H200 host: the bench (run ALONE, <= 150 s) and the nightly-profile fuzz campaigns.
#   bash scripts/h200/final_throughput.sh bench
#       scripts/peers_bench.py (n_q 1, 64, 1024, 4096; the gather / fp64 limits and the adapter /
#       bare-kernel ratio beside each row) -> bench.txt, bench.json, bench.err
#   bash scripts/h200/final_throughput.sh campaign SECONDS
#       For every kernel of $KERNELS, $PROCS concurrent `python -m conformance fuzz --kernel K
#       --hypothesis-profile nightly --seconds SECONDS` processes (each its own seeds and run
#       folder; failures saved to pending-<kernel>/), every process pinned to one GPU, round robin
#       over the GPUs of $CUDA_VISIBLE_DEVICES, else of the host; OMP_NUM_THREADS=1 each; plus one
#       emulated campaign of min(SECONDS, 120) s under cProfile (scripts/campaign_profile.py:
#       where the time goes). Writes fuzz-<kernel>-<n>.txt/.err/.json (each process's summary),
#       campaigns.txt / campaigns.md (scripts/campaign_table.py: the processes of a kernel merged
#       into one row: examples/s summed, features hit by any process), profile-emulated/
#       (stages.txt, top.txt, profile.pstats), campaign-env.txt (cores, GPUs, processes).
#       Wall time: at most SECONDS + 70 s (each process gets SIGINT at SECONDS + 50 s, which
#       still writes its summary, and SIGKILL 15 s later); SECONDS 480 -> under 560 s.
# Environment: KERNELS (default: the seven registered GPU kernels), PROCS (processes per kernel;
# default (cores - 1) / kernels, at least 1, at most 12; PROCS_<kernel> for one kernel, - as _), PROFILE (0: no profile
# campaign; timers: the profile campaign under `campaign_profile.py --timers --ops`, CPU seconds and launched torch ops
# per stage, instead of cProfile), CPU_PROCS (that many more `emulated` processes with `--device cpu` and no GPU,
# fuzz-emulated-cpu-<n>.*: the host's cores beside the GPU's processes; campaign_table.py gives them their own row),
# FUZZ_ARGS (more arguments for every fuzz process, e.g. "--device cpu"), MPS (1: the GPU processes
# as clients of one NVIDIA Multi-Process Service server, scripts/h200/mps.sh; its state is written
# to campaign-env.txt, and where it cannot start the campaign runs without it).
# Everything goes under "$RESULTS/throughput/". Every step runs under `timeout`.
set -uo pipefail
export PYTHONUNBUFFERED=1
R="${RESULTS:-results}/throughput"
mkdir -p "$R"
KERNELS="${KERNELS:-emulated flashmla flashmla-prefill torch-sdpa sglang-decode vllm-decode vllm-sparse}"
PY="${PYTHON:-python3}"

case "${1:-}" in
bench)
  { date -u; nvidia-smi -L; } > "$R/bench-env.txt" 2>&1
  timeout 150 "$PY" scripts/peers_bench.py --json "$R/bench.json" > "$R/bench.txt" 2> "$R/bench.err"
  echo "bench rc=$?" | tee -a "$R/bench.txt"
  cat "$R/bench.txt"; tail -3 "$R/bench.err"
  ;;
campaign)
  S="${2:?usage: final_throughput.sh campaign SECONDS}"
  PROF_S=$(( S < 120 ? S : 120 ))
  read -r -a kernels <<< "$KERNELS"
  NPROC=$(nproc 2> /dev/null || echo 16)
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then  # the GPUs this call may use, else every GPU of the host
    read -r -a gpus <<< "${CUDA_VISIBLE_DEVICES//,/ }"
  else
    read -r -a gpus <<< "$(seq -s ' ' 0 $(( $(nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true) - 1 )))"
  fi
  NGPU=${#gpus[@]}
  DEFAULT_PROCS=$(( (NPROC - 1) / ${#kernels[@]} ))
  DEFAULT_PROCS=$(( DEFAULT_PROCS < 1 ? 1 : (DEFAULT_PROCS > 12 ? 12 : DEFAULT_PROCS) ))
  P="${PROCS:-$DEFAULT_PROCS}"
  # one CPU thread per process: many processes share the cores, and torch's intra-op threads
  # only add parallel regions whose start-up, oversubscribed, costs milliseconds per small op
  export OMP_NUM_THREADS=1
  . "$(dirname "$0")/mps.sh"
  [ "${MPS:-0}" = 1 ] && mps_start "$R/mps-log"
  { date -u; echo "cores $NPROC, GPUs $NGPU, kernels ${kernels[*]}, processes per kernel $P, campaign ${S} s, profile ${PROF_S} s";
    echo "MPS $MPS_STATE"; nvidia-smi -L 2> /dev/null; } > "$R/campaign-env.txt"
  cat "$R/campaign-env.txt"
  slot=0
  next_gpu() {  # GPU_ENV: the GPU of the next process, round robin (on a machine without GPUs only its slot number)
    if [ "$NGPU" -ge 1 ]; then GPU_ENV="CUDA_VISIBLE_DEVICES=${gpus[$(( slot % NGPU ))]}"; else GPU_ENV="THROUGHPUT_SLOT=$slot"; fi
    slot=$(( slot + 1 ))
  }
  procs_of() {  # PROCS_<kernel, - as _> overrides PROCS for one kernel (e.g. PROCS_emulated=9)
    local var="PROCS_${1//-/_}"; echo "${!var:-$P}"
  }
  for k in "${kernels[@]}"; do
    for n in $(seq 1 "$(procs_of "$k")"); do
      next_gpu
      env "$GPU_ENV" CONFORMANCE_PENDING_DIR="$R/pending-$k" timeout -s INT -k 15 $(( S + 50 )) \
        "$PY" -m conformance fuzz --kernel "$k" --seconds "$S" --hypothesis-profile nightly --shrink-seconds 20 ${FUZZ_ARGS:-} \
        > "$R/fuzz-$k-$n.txt" 2> "$R/fuzz-$k-$n.err" &
    done
  done
  for n in $(seq 1 "${CPU_PROCS:-0}"); do
    env CUDA_VISIBLE_DEVICES= CONFORMANCE_PENDING_DIR="$R/pending-emulated-cpu" timeout -s INT -k 15 $(( S + 50 )) \
      "$PY" -m conformance fuzz --kernel emulated --device cpu --seconds "$S" --hypothesis-profile nightly --shrink-seconds 20 \
      > "$R/fuzz-emulated-cpu-$n.txt" 2> "$R/fuzz-emulated-cpu-$n.err" &
  done
  if [ "${PROFILE:-1}" != 0 ]; then
    next_gpu
    PROFILE_ARGS=()
    [ "${PROFILE:-1}" = timers ] && PROFILE_ARGS=(--timers --ops)
    env "$GPU_ENV" CONFORMANCE_PENDING_DIR="$R/pending-profile" timeout -s INT -k 15 $(( PROF_S + 50 )) \
      "$PY" scripts/campaign_profile.py --out "$R/profile-emulated" "${PROFILE_ARGS[@]}" -- \
      --kernel emulated --seconds "$PROF_S" --hypothesis-profile nightly --shrink-seconds 20 --no-save > "$R/profile-emulated.txt" 2>&1 &
  fi
  if [ "${MPS:-0}" = 1 ]; then  # what the GPU saw once every process had started
    sleep $(( S < 60 ? S : 60 )); nvidia-smi > "$R/mps-log/nvidia-smi.txt" 2>&1
    echo get_server_list | timeout 10 "${MPS_CTL:-true}" > "$R/mps-log/servers.txt" 2>&1
  fi
  wait
  mps_stop
  summaries=()
  collect() {  # RUN: fuzz-RUN.txt's summary JSON copied to fuzz-RUN.json and added to the table's summaries
    local path
    path=$(sed -n 's/^  summary (JSON): //p' "$R/fuzz-$1.txt" | tail -1)
    if [ -n "$path" ] && [ -f "$path" ]; then cp "$path" "$R/fuzz-$1.json"; summaries+=("$R/fuzz-$1.json"); fi
  }
  for n in $(seq 1 "${CPU_PROCS:-0}"); do collect "emulated-cpu-$n"; done
  for k in "${kernels[@]}"; do
    echo "--- fuzz $k ($(procs_of "$k") processes)"
    for n in $(seq 1 "$(procs_of "$k")"); do
      collect "$k-$n"
      grep -E "examples/s|FAILURES|^  - |^  (a kernel call hung|Hypothesis stopped)" "$R/fuzz-$k-$n.txt" | head -6; tail -2 "$R/fuzz-$k-$n.err"
    done
  done
  if [ ${#summaries[@]} -gt 0 ]; then
    timeout 30 "$PY" scripts/campaign_table.py "${summaries[@]}" > "$R/campaigns.txt" 2>&1
    timeout 30 "$PY" scripts/campaign_table.py --markdown "${summaries[@]}" > "$R/campaigns.md" 2>&1
    cat "$R/campaigns.txt"
  fi
  if [ "${PROFILE:-1}" != 0 ]; then
    echo "--- where the time goes (emulated, profile ${PROFILE:-1})"; cat "$R/profile-emulated/stages.txt" 2> /dev/null || tail -5 "$R/profile-emulated.txt"
    cat "$R/profile-emulated/ops.txt" 2> /dev/null
  fi
  ;;
*)
  echo "usage: bash scripts/h200/final_throughput.sh bench | campaign SECONDS" >&2
  exit 2
  ;;
esac
