"""One GPU per xdist worker: `-n auto` counts visible GPUs, each worker pins its own device.

The controller publishes the visible device list (CONFORMANCE_GPU_LIST) and the variable that
selects devices (CONFORMANCE_GPU_VAR: CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES) before the
workers start; worker gwN then sets that variable to entry N mod len(list) before torch touches
the GPU. GPUs are found without initialising CUDA in this process (nvidia-smi, or ROCm's torch).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

GPU_LIST_ENV = "CONFORMANCE_GPU_LIST"
GPU_VAR_ENV = "CONFORMANCE_GPU_VAR"


def visible_gpus() -> tuple[list[str], str]:
    """(device ids, variable) visible to this process, without initialising CUDA in torch."""
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(var)
        if value is not None:
            return [x for x in value.split(",") if x.strip()], var
    count = 0
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
            count = sum(1 for line in listing.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            count = 0
        return [str(i) for i in range(count)], "CUDA_VISIBLE_DEVICES"
    if shutil.which("rocm-smi") or os.path.exists("/dev/kfd"):
        try:
            import torch

            count = torch.cuda.device_count() if torch.version.hip else 0
        except Exception:  # noqa: BLE001 - no ROCm runtime: no GPUs
            count = 0
        return [str(i) for i in range(count)], "HIP_VISIBLE_DEVICES"
    return [], "CUDA_VISIBLE_DEVICES"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker per visible GPU (times --conformance-workers-per-gpu); CPU count otherwise."""
    gpus, _ = visible_gpus()
    if not gpus:
        return None
    from conformance.suite import options

    return len(gpus) * max(1, int(options.get(config, options.WORKERS_PER_GPU) or 1))


def publish_gpus() -> None:
    """Controller: publish the visible GPU list and selecting variable for the workers."""
    gpus, var = visible_gpus()
    os.environ[GPU_LIST_ENV] = ",".join(gpus)
    os.environ[GPU_VAR_ENV] = var


def pin_worker_gpu(worker: str) -> None:
    """Worker `gwN`: select GPU N mod (published count), when any were published."""
    gpus = [x for x in os.environ.get(GPU_LIST_ENV, "").split(",") if x]
    if gpus:
        index = int(worker.removeprefix("gw")) % len(gpus)
        os.environ[os.environ.get(GPU_VAR_ENV, "CUDA_VISIBLE_DEVICES")] = gpus[index]
