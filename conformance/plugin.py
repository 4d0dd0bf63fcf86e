"""The suite's pytest plugin: kernel choice, one device per xdist worker, failure capture.

Options:
    --kernel NAME       backend to test (default: flydsl on gfx950, else emulated); built-in
                        names or package.module:attr
    --profile NAME      numerics profile for a kernel that declares none (or to override)
    --device DEV        cpu | cuda (default: cuda when available and the kernel runs there)
    --workers-per-gpu N with `-n auto`: xdist workers per visible GPU (default 1)

`-n auto` on a GPU machine starts one worker per visible GPU (times --workers-per-gpu). The
controller publishes the visible device list before workers start; each worker then pins its
own device through CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES before torch initialises the GPU.

A failing property test leaves its last (shrunk) recipe in `conformance.plugin.current`; the
report hook saves it as a pending corpus entry named by its content hash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import pytest

from conformance.settings import register_profiles

GPU_LIST_ENV = "CONFORMANCE_GPU_LIST"
GPU_VAR_ENV = "CONFORMANCE_GPU_VAR"

register_profiles()


@dataclass
class FailureContext:
    """What the running property test last drew: set by tests, read by the report hook."""

    recipe: Any = None
    property_name: str = ""
    expect: str = "conform"


current = FailureContext()


def remember(recipe: Any, property_name: str, expect: str = "conform") -> None:
    """Note the recipe about to be judged (the last one noted is captured if the test fails)."""
    current.recipe = recipe
    current.property_name = property_name
    current.expect = expect


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "sparse MLA conformance suite")
    group.addoption("--kernel", default=None, help="kernel under test: emulated, flydsl, flashmla or package.module:attr")
    group.addoption("--profile", default=None, help="numerics profile of the kernel (overrides what it declares)")
    group.addoption("--device", default=None, help="device to run on: cpu or cuda (default: cuda when available)")
    group.addoption("--workers-per-gpu", type=int, default=1, help="with -n auto on a GPU machine: xdist workers per GPU")
    group.addoption("--no-capture-corpus", action="store_true", help="do not save failing recipes to conformance/corpus/pending")


def _visible_gpus() -> tuple[list[str], str]:
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
    """`-n auto`: one worker per visible GPU (times --workers-per-gpu); CPU count otherwise."""
    gpus, _ = _visible_gpus()
    if not gpus:
        return None
    return len(gpus) * max(1, config.getoption("--workers-per-gpu"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "huge_cache: cases with a KV cache larger than 4 GiB (grouped on one worker)")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        os.environ.setdefault("CONFORMANCE_RUN_ID", time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
        gpus, var = _visible_gpus()
        os.environ[GPU_LIST_ENV] = ",".join(gpus)
        os.environ[GPU_VAR_ENV] = var
        return
    gpus = [x for x in os.environ.get(GPU_LIST_ENV, "").split(",") if x]
    if gpus:
        index = int(worker.removeprefix("gw")) % len(gpus)
        os.environ[os.environ.get(GPU_VAR_ENV, "CUDA_VISIBLE_DEVICES")] = gpus[index]


@dataclass(frozen=True)
class SuiteTarget:
    """The kernel under test, where it runs and the numerics it declares."""

    name: str
    backend: Any
    device: Any
    profile: Any


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> SuiteTarget:
    """Resolve the kernel under test; skip every test with the reason when it cannot run here."""
    import torch

    from kernel.registry import BackendUnavailable, default_kernel_name, resolve
    from oracle.profiles import get_profile

    name = request.config.getoption("--kernel") or default_kernel_name()
    try:
        backend = resolve(name, profile=request.config.getoption("--profile"))
    except BackendUnavailable as err:
        pytest.skip(f"kernel {name!r} unavailable: {err}")
    try:
        profile = get_profile(backend.profile)
    except KeyError as err:
        pytest.skip(str(err))
    wanted = request.config.getoption("--device")
    if wanted is None:
        wanted = "cuda" if torch.cuda.is_available() and "cuda" in backend.devices else "cpu"
    device = torch.device(wanted)
    if device.type not in backend.devices:
        pytest.skip(f"kernel {name!r} runs on {backend.devices}, not {device.type}")
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)
    return SuiteTarget(name=name, backend=backend, device=device, profile=profile)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    if report.failed and current.recipe is not None and not item.config.getoption("--no-capture-corpus"):
        from conformance.corpus import PENDING_DIR, new_entry, save_entry

        kernel = item.config.getoption("--kernel") or "default"
        caught = str(call.excinfo.value).splitlines()[0][:500] if call.excinfo else "failure"
        entry = new_entry(current.recipe, caught=f"{item.nodeid}: {caught}", kernel=kernel, property_name=current.property_name, expect=current.expect)
        path = save_entry(entry, PENDING_DIR)
        report.sections.append(("conformance corpus", f"failing recipe saved to {path}"))
    current.recipe = None
