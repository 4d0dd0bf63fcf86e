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
report hook saves it as a pending corpus entry named by its content hash (in
$CONFORMANCE_PENDING_DIR when set, see conformance.crashes.pending_dir) and logs it to
`<run>/failures-<worker>.jsonl` for the run report.

Nothing lost (conformance.crashes): at the start of a session the controller (or the only
process without xdist) turns write-ahead files left by dead processes of earlier runs into crash
entries; with xdist, a worker that goes down has its in-flight recipe recorded at once, and the
crashed test's report names the entry.

Run report (conformance.report): at the end of the session the controller aggregates every
worker's files of the run into `report.json`, `report.md` (and `report.png` with matplotlib) in
the run folder and prints one summary line pointing at it. A session that recorded nothing
leaves no run folder behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.settings import register_profiles

GPU_LIST_ENV = "CONFORMANCE_GPU_LIST"
GPU_VAR_ENV = "CONFORMANCE_GPU_VAR"
FAILURES_LOG = "failures-{worker}.jsonl"
_CRASHES_KEY = pytest.StashKey[dict]()
_REPORT_KEY = pytest.StashKey[Any]()

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
        from conformance import crashes

        inherited = crashes.current_run_dir()
        if inherited is not None and crashes.owned_by_another_session(inherited):
            # a session started from inside another one (a test running pytest) gets a run of its own
            os.environ.pop("CONFORMANCE_RUN_ID")
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


class TargetError(RuntimeError):
    """The kernel under test cannot run here; the message says why."""


def build_target(name: str | None, *, profile: str | None = None, device: str | None = None) -> SuiteTarget:
    """Resolve a kernel (None: the machine's default) with its numerics profile and device, as
    the `target` fixture does; TargetError names the problem (unknown kernel, unavailable
    backend, unknown profile, bad or unsupported device)."""
    import torch

    from kernel.registry import BackendUnavailable, default_kernel_name, resolve
    from oracle.profiles import get_profile

    name = name or default_kernel_name()
    try:
        backend = resolve(name, profile=profile)
    except BackendUnavailable as err:
        raise TargetError(f"kernel {name!r} unavailable: {err}") from err
    try:
        numerics = get_profile(backend.profile)
    except KeyError as err:
        raise TargetError(str(err.args[0] if err.args else err)) from err
    wanted = device
    if wanted is None:
        wanted = "cuda" if torch.cuda.is_available() and "cuda" in backend.devices else "cpu"
    try:
        dev = torch.device(wanted)
    except RuntimeError as err:
        raise TargetError(f"bad device {wanted!r}: {err}") from err
    if dev.type not in backend.devices:
        raise TargetError(f"kernel {name!r} runs on {backend.devices}, not {dev.type}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise TargetError(f"device {wanted!r} asked for but torch sees no GPU")
        torch.cuda.set_device(dev.index or 0)
    return SuiteTarget(name=name, backend=backend, device=dev, profile=numerics)


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> SuiteTarget:
    """Resolve the kernel under test; skip every test with the reason when it cannot run here."""
    try:
        return build_target(request.config.getoption("--kernel"), profile=request.config.getoption("--profile"), device=request.config.getoption("--device"))
    except TargetError as err:
        pytest.skip(str(err))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    if report.failed and current.recipe is not None and not item.config.getoption("--no-capture-corpus"):
        from conformance.corpus import new_entry, save_entry
        from conformance.crashes import pending_dir

        kernel = item.config.getoption("--kernel") or "default"
        lines = str(call.excinfo.value).splitlines() if call.excinfo else []
        caught = (lines[0] if lines else type(call.excinfo.value).__name__ if call.excinfo else "failure")[:500]
        entry = new_entry(current.recipe, caught=f"{item.nodeid}: {caught}", kernel=kernel, property_name=current.property_name, expect=current.expect)
        path = save_entry(entry, pending_dir())
        report.sections.append(("conformance corpus", f"failing recipe saved to {path}"))
        try:
            _log_failure({"nodeid": item.nodeid, "kernel": kernel, "property": current.property_name, "expect": current.expect,
                          "caught": caught, "entry": str(path), "time": time.time()})
        except OSError as err:  # the entry is saved; only the report line is missing
            report.sections.append(("conformance report", f"failure not logged for the run report: {err}"))
    current.recipe = None


def _log_failure(line: dict[str, Any]) -> None:
    """Append one failure line to this worker's failures file of the run (for the report)."""
    from conformance.harness import run_dir, worker_id

    path = run_dir() / FAILURES_LOG.format(worker=worker_id())
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------
# Crash recovery and the run report (the xdist controller, or the only process without xdist)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _crash_destination(config: pytest.Config, run: Path) -> Path:
    from conformance.crashes import pending_dir

    return run / "crashes" if config.getoption("--no-capture-corpus") else pending_dir()


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller: mark this run as live, then recover crashes left by earlier runs."""
    config = session.config
    if _is_worker(config):
        return
    from conformance import crashes

    config.stash[_CRASHES_KEY] = {}
    run = crashes.current_run_dir()
    if run is None:
        return
    try:
        run.mkdir(parents=True, exist_ok=True)
        crashes.mark_session_start(run, kind="pytest", kernel=config.getoption("--kernel"))
        for line in crashes.recover_leftovers(run.name, _crash_destination(config, run), recovering_run=run):
            _say(config, "conformance: recovered " + crashes.describe(line))
    except Exception as err:  # noqa: BLE001 - a read-only state folder (or any surprise) must not stop the tests
        _say(config, f"conformance: crash recovery skipped ({type(err).__name__}: {err}); leftover write-ahead files stay for a later session")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    """Controller (xdist): a worker went down; record the recipe it had in flight, if any."""
    if error is None:
        return
    from conformance import crashes

    config = node.config
    run = crashes.current_run_dir()
    if run is None:
        return
    worker = str(node.gateway.id)
    reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else "crashed"
    try:
        line = crashes.recover_worker(run, worker, error=reason, destination=_crash_destination(config, run))
    except Exception as err:  # noqa: BLE001 - the write-ahead file stays; the next session records it
        _say(config, f"\nconformance: worker {worker} crash not recorded now ({type(err).__name__}: {err}); its write-ahead file stays for the next session")
        return
    if line is not None:
        config.stash.setdefault(_CRASHES_KEY, {})[worker] = line
        _say(config, "\nconformance: " + crashes.describe(line))


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """Controller (xdist): name the crash entry in the crashed test's report."""
    from conformance import crashes

    node = getattr(report, "node", None)
    if node is None:
        return
    line = node.config.stash.get(_CRASHES_KEY, {}).get(str(node.gateway.id))
    if line is None:
        return
    crashes.annotate_nodeid(line, crashitem)
    report.longrepr = f"{report.longrepr}\nthe recipe in flight was saved as crash entry {line.get('entry')}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Controller: write the run report (all workers' files), mark the run finished; a run
    folder that recorded nothing is removed."""
    config = session.config
    if _is_worker(config):
        return
    from conformance import crashes

    run = crashes.current_run_dir()
    if run is None or not run.is_dir():
        return
    try:
        crashes.mark_session_finish(run, exitstatus=int(exitstatus))
        contents = {p.name for p in run.iterdir()}
        if contents <= {crashes.SESSION_FILE}:
            (run / crashes.SESSION_FILE).unlink(missing_ok=True)
            run.rmdir()
            return
        from conformance.report import write_report

        config.stash[_REPORT_KEY] = write_report(run)
    except Exception as err:  # noqa: BLE001 - the report must never break the session
        config.stash[_REPORT_KEY] = f"conformance report not written: {type(err).__name__}: {err}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Controller: one line pointing at the run report."""
    if _is_worker(config):
        return
    files = config.stash.get(_REPORT_KEY, None)
    if files is None:
        return
    if isinstance(files, str):
        terminalreporter.write_line(files)
        return
    from conformance.report import summary_line

    terminalreporter.write_line(summary_line(files))
