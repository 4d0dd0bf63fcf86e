"""The suite's pytest plugin: options, the `target` fixture, failure capture.

Registered through the `pytest11` entry point (`pip install` the project, then
`pytest --pyargs conformance --kernel NAME` from any directory) and by the checkout's root
conftest.py. Options:
    --kernel NAME       backend to test (default: flydsl on gfx950, else emulated); built-in
                        names or package.module:attr
    --profile NAME      numerics profile for a kernel that declares none (or to override)
    --device DEV        cpu | cuda (default: cuda when available and the kernel runs there)
    --workers-per-gpu N with `-n auto`: xdist workers per visible GPU (default 1)
    --no-capture-corpus do not save failing recipes to the pending corpus

GPU pinning per worker: conformance.suite.gpus. Crash recovery and the run report:
conformance.suite.session. A failing property test's last noted recipe (the target's
`judged`, see conformance.target) is saved as a pending corpus entry named by its content hash
and logged to `<run>/failures-<worker>.jsonl` for the run report.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from conformance.hypothesis_profiles import register_profiles
from conformance.state import RUN_ID_ENV, current_run_dir, new_run_id, pending_dir, run_dir, worker_id
from conformance.suite.gpus import pin_worker_gpu, publish_gpus, pytest_xdist_auto_num_workers  # noqa: F401 - hook
from conformance.suite.session import (  # noqa: F401 - hooks
    pytest_handlecrashitem,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
    pytest_testnodedown,
)
from conformance.target import SuiteTarget, TargetError, build_target

FAILURES_LOG = "failures-{worker}.jsonl"

register_profiles()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "sparse MLA conformance suite")
    group.addoption("--kernel", default=None, help="kernel under test: emulated, flydsl, flashmla or package.module:attr")
    group.addoption("--profile", default=None, help="numerics profile of the kernel (overrides what it declares)")
    group.addoption("--device", default=None, help="device to run on: cpu or cuda (default: cuda when available)")
    group.addoption("--workers-per-gpu", type=int, default=1, help="with -n auto on a GPU machine: xdist workers per GPU")
    group.addoption("--no-capture-corpus", action="store_true", help="do not save failing recipes to conformance/corpus/pending")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "huge_cache: cases with a KV cache larger than 4 GiB (grouped on one worker)")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        pin_worker_gpu(worker)
        return
    from conformance import crashes

    inherited = current_run_dir()
    if inherited is not None and crashes.owned_by_another_session(inherited):
        # a session started from inside another one (a test running pytest) gets a run of its own
        os.environ.pop(RUN_ID_ENV)
    os.environ.setdefault(RUN_ID_ENV, new_run_id())
    publish_gpus()


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
    suite = getattr(item, "funcargs", {}).get("target")
    judged = suite.judged if isinstance(suite, SuiteTarget) else None
    if judged is None or judged.recipe is None:
        return
    if report.failed and not item.config.getoption("--no-capture-corpus"):
        from conformance.corpus import new_entry, save_entry

        kernel = item.config.getoption("--kernel") or "default"
        lines = str(call.excinfo.value).splitlines() if call.excinfo else []
        caught = (lines[0] if lines else type(call.excinfo.value).__name__ if call.excinfo else "failure")[:500]
        entry = new_entry(judged.recipe, caught=f"{item.nodeid}: {caught}", kernel=kernel, property_name=judged.property_name, expect=judged.expect)
        path = save_entry(entry, pending_dir())
        report.sections.append(("conformance corpus", f"failing recipe saved to {path}"))
        try:
            _log_failure({"nodeid": item.nodeid, "kernel": kernel, "property": judged.property_name, "expect": judged.expect,
                          "caught": caught, "entry": str(path), "time": time.time()})
        except OSError as err:  # the entry is saved; only the report line is missing
            report.sections.append(("conformance report", f"failure not logged for the run report: {err}"))
    judged.clear()


def _log_failure(line: dict[str, Any]) -> None:
    """Append one failure line to this worker's failures file of the run (for the report)."""
    path = run_dir() / FAILURES_LOG.format(worker=worker_id())
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")
