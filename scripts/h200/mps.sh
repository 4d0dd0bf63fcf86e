#!/usr/bin/env bash
# NVIDIA's Multi-Process Service (MPS) for the many processes of one campaign on one GPU, sourced:
#   . scripts/h200/mps.sh; mps_start LOGDIR && ...; mps_stop
# Without MPS the GPU time-slices between the processes' contexts: one context's kernels run at a
# time, so fifteen processes that each launch ~1,300 small kernels per example wait on each other.
# Under MPS their kernels share the GPU at once through one server context. What it costs: a fatal
# GPU fault of one client (an illegal address) ends every client of the server, so use it for
# kernels that do not fault (the emulator), not for crash containment of foreign kernels.
# mps_start starts a control daemon with its own pipe folder (short: a Unix socket path), exports
# CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY for the processes started after it, and checks
# that a CUDA client gets a server; on any failure it stops what it started, unsets them, prints
# why and returns 1 (the campaign then runs without MPS). The GPU's settings are not touched: MPS
# runs in the default compute mode.
# MPS_CONTROL names the control program (default: nvidia-cuda-mps-control on PATH, else in
# /usr/local/nvidia/bin). MPS_STATE: "on (server PID)" or "off: <why>" after mps_start.
MPS_STATE="off: not requested"
mps_start() {
  local logdir="$1" ctl pipe
  if [ -n "${MPS_CONTROL:-}" ]; then
    ctl="$MPS_CONTROL"
    if [ ! -x "$ctl" ]; then MPS_STATE="off: MPS_CONTROL=$ctl is not an executable file"; echo "MPS $MPS_STATE"; return 1; fi
  else
    ctl=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2> /dev/null || true)
    if [ -z "$ctl" ]; then MPS_STATE="off: no nvidia-cuda-mps-control on PATH or in /usr/local/nvidia/bin"; echo "MPS $MPS_STATE"; return 1; fi
  fi
  pipe="/tmp/mps-pipe-$$"; mkdir -p "$pipe" "$logdir"
  export CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$logdir"
  MPS_CTL="$ctl"
  if ! timeout 20 "$ctl" -d > "$logdir/start.txt" 2>&1; then
    MPS_STATE="off: '$ctl -d' failed: $(tail -c 300 "$logdir/start.txt")"; _mps_undo; echo "MPS $MPS_STATE"; return 1
  fi
  # a client: the server starts on the first CUDA context
  if ! timeout 60 "${PYTHON:-python3}" -c 'import torch; x = torch.ones(4, device="cuda"); torch.cuda.synchronize(); print(float(x.sum()))' \
      > "$logdir/client.txt" 2>&1; then
    MPS_STATE="off: a CUDA client failed under MPS: $(tail -c 300 "$logdir/client.txt")"; mps_stop; echo "MPS $MPS_STATE"; return 1
  fi
  local servers
  servers=$(echo get_server_list | timeout 10 "$ctl" 2> /dev/null | tr '\n' ' ')
  if [ -z "${servers// /}" ]; then
    MPS_STATE="off: the daemon lists no server after a client ran"; mps_stop; echo "MPS $MPS_STATE"; return 1
  fi
  MPS_STATE="on (server ${servers% })"; echo "MPS $MPS_STATE"
}
_mps_undo() { unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; }
mps_stop() {
  if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && [ -n "${MPS_CTL:-}" ]; then
    echo quit | timeout 20 "$MPS_CTL" > /dev/null 2>&1 || true
    sleep 1
  fi
  _mps_undo
}
