"""Where this worker runs: with several GPUs published by the controller, each xdist worker sees
exactly its own one (device pinning before torch initialises the GPU). Prints the device so a
run's log (pytest -rP) shows which worker used which GPU."""

from __future__ import annotations

import os

import pytest
import torch

from conformance.judging.target import Target
from conformance.suite.gpus import GPU_LIST_ENV, GPU_VAR_ENV


@pytest.mark.parametrize("probe", range(4))
def test_worker_device_pinning(target: Target, probe: int) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    published = [x for x in os.environ.get(GPU_LIST_ENV, "").split(",") if x]
    variable = os.environ.get(GPU_VAR_ENV, "CUDA_VISIBLE_DEVICES")
    if target.device.type != "cuda":
        print(f"worker {worker} (probe {probe}): {target.device}")
        pytest.skip("no GPU in use")
    visible = os.environ.get(variable, "")
    name = torch.cuda.get_device_name(target.device)
    uuid = str(getattr(torch.cuda.get_device_properties(target.device), "uuid", "?"))
    print(f"worker {worker} (probe {probe}): {variable}={visible} device {name} uuid {uuid}")
    if worker != "main" and len(published) > 1:
        assert visible in published and "," not in visible, f"worker {worker} sees {visible!r}, expected one of {published}"
        assert torch.cuda.device_count() == 1
