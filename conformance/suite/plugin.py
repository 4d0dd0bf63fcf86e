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
    --call-timeout S    seconds one kernel call may take (default 300; 0: no limit); a hung call
                        fails its test with a "hung" entry, and under xdist ends its worker,
                        which is replaced (conformance.durability.watchdog)

A kernel the user named that cannot be used here (unknown name, import error, no profile, bad
--profile or --device, a backend unavailable on this machine) is a usage error: the session
stops before any test with one line naming the problem (exit 4).

Crash containment under xdist: a worker that dies (GPU fault, abort, SIGKILL, a hang past the
hard limit) fails the one test it was running, its in-flight recipe becomes a crash entry, and a
replacement worker takes the remaining tests. The plugin makes `--dist load` the default and
lifts xdist's cap on worker restarts, since worker replacement under grouped scheduling
(`--dist loadgroup`) can hang or abort the session (pytest-xdist issues); cases that must not
run concurrently (caches over 4 GiB) take a machine-wide lock instead (conformance.suite.locks).

GPU pinning per worker: conformance.suite.gpus. Crash recovery and the run report:
conformance.suite.session. The recipe a failing property test's exception carries (a check's
JudgedRecipe, see conformance.judging.target.judging) is saved as a pending corpus entry named by its content hash
and logged to `<run>/failures-<worker>.jsonl` for the run report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

import pytest

from conformance.durability.state import (
    CALL_TIMEOUT_ENV,
    DEFAULT_CALL_TIMEOUT_S,
    RUN_ID_ENV,
    StateDirError,
    check_state_dir,
    current_run_dir,
    new_run_id,
    pending_dir,
    run_dir,
    worker_id,
)
from conformance.judging.hypothesis_profiles import register_profiles
from conformance.judging.target import Target, TargetError, build_target, judged_recipe
from conformance.suite import gpus, threads
from conformance.suite.activation import suite_active
from conformance.suite.session import (  # noqa: F401 - hooks
    pytest_handlecrashitem,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
    pytest_testnodedown,
)

FAILURES_LOG = "failures-{worker}.jsonl"
MAX_WORKER_RESTARTS = 10_000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "sparse MLA conformance suite")
    group.addoption("--kernel", default=None, help="kernel under test: emulated, flydsl, flashmla or package.module:attr")
    group.addoption("--profile", default=None, help="numerics profile of the kernel (overrides what it declares)")
    group.addoption("--device", default=None, help="device to run on: cpu or cuda (default: cuda when available)")
    group.addoption("--workers-per-gpu", type=int, default=1, help="with -n auto on a GPU machine: xdist workers per GPU")
    group.addoption("--no-capture-corpus", action="store_true", help="do not save failing recipes to conformance/corpus/pending")
    group.addoption(
        "--call-timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help=f"seconds one kernel call may take (default {DEFAULT_CALL_TIMEOUT_S:g}; 0: no limit)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text}")
    return value


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Only in a session that asks for the suite (conformance.suite.activation), before xdist and
    Hypothesis read their options: the suite's Hypothesis profiles, `--dist load` unless the user
    chose, no cap on worker restarts."""
    if not suite_active(config):
        return
    register_profiles()
    _check_hypothesis_profile(config)
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", "no") == "no":
        option.dist = "load"
    if hasattr(option, "maxworkerrestart") and option.maxworkerrestart is None:
        option.maxworkerrestart = MAX_WORKER_RESTARTS


def _check_hypothesis_profile(config: pytest.Config) -> None:
    """An unknown --hypothesis-profile is a usage error naming the known profiles (Hypothesis
    itself raises it inside pytest_configure: an INTERNALERROR traceback)."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    name = config.getoption("hypothesis_profile", None)
    if not name:
        return
    try:
        settings.get_profile(name)
    except InvalidArgument:
        known = ", ".join(sorted(settings._profiles))  # noqa: SLF001 - Hypothesis has no public list
        raise pytest.UsageError(f"conformance: unknown Hypothesis profile {name!r} (--hypothesis-profile): use one of {known}") from None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` in a suite session: one worker per visible GPU (conformance.suite.gpus)."""
    return gpus.pytest_xdist_auto_num_workers(config) if suite_active(config) else None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "huge_cache: cases with a KV cache larger than 4 GiB (one at a time per machine)")
    if not suite_active(config):
        return
    timeout = config.getoption("--call-timeout")
    if timeout is not None:
        os.environ[CALL_TIMEOUT_ENV] = repr(timeout)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        gpus.pin_worker_gpu(worker)
        threads.share_cores_among_workers()
        return
    try:
        check_state_dir()
    except StateDirError as err:
        raise pytest.UsageError(f"conformance: {err}") from None
    _check_target(config)
    from conformance.records import crashes

    inherited = current_run_dir()
    if inherited is not None and crashes.owned_by_another_session(inherited):
        # a session started from inside another one (a test running pytest) gets a run of its own
        os.environ.pop(RUN_ID_ENV)
    os.environ.setdefault(RUN_ID_ENV, new_run_id())
    gpus.publish_gpus()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The session header of a suite session: kernel, numerics profile, device, Hypothesis profile."""
    if not suite_active(config) or hasattr(config, "workerinput"):
        return []
    from hypothesis import settings

    named = config.getoption("--kernel")
    try:
        target = build_target(named, profile=config.getoption("--profile"), device=config.getoption("--device"), check_only=True)
        what = (
            f"kernel {target.name}{'' if named else ' (the default here)'}, numerics profile {target.profile.name}, device {target.device}"
        )
    except TargetError as err:
        what = f"kernel {named or 'default'}: {err}"
    hypothesis = f"Hypothesis profile {settings.get_current_profile_name()!r} ({settings.default.max_examples} examples per property test)"
    return [f"conformance: {what}; {hypothesis}"]


def _check_target(config: pytest.Config) -> None:
    """Controller: a kernel, profile or device the user named that cannot be used is a usage error."""
    named = [config.getoption(o) for o in ("--kernel", "--profile", "--device")]
    if not any(named):
        return
    try:
        build_target(*named[:1], profile=named[1], device=named[2], check_only=True)
    except TargetError as err:
        raise pytest.UsageError(f"conformance: {err}") from None


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Target:
    """The kernel under test (the machine's default when none is named); a kernel that cannot run
    here fails every test that needs it, with the reason."""
    try:
        return build_target(
            request.config.getoption("--kernel"), profile=request.config.getoption("--profile"), device=request.config.getoption("--device")
        )
    except TargetError as err:
        pytest.fail(f"conformance: {err}", pytrace=False)


PROGRESS_EVERY_S = 15.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Suite sessions: a test running longer than PROGRESS_EVERY_S (many Hypothesis examples)
    prints one line to stderr every PROGRESS_EVERY_S seconds with its kernel calls so far."""
    if not suite_active(item.config):
        yield
        return
    from conformance.judging import progress

    progress.reset()
    progress.listen(_ProgressLine(item))
    try:
        yield
    finally:
        progress.listen(None)


class _ProgressLine:
    """The listener of conformance.judging.progress for one test: at most one line per PROGRESS_EVERY_S."""

    def __init__(self, item: pytest.Item) -> None:
        self.item, self.next_at = item, PROGRESS_EVERY_S

    def __call__(self, calls: int, elapsed_s: float) -> None:
        if elapsed_s < self.next_at:
            return
        self.next_at = elapsed_s + PROGRESS_EVERY_S
        capman = self.item.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            sys.stderr.write(f"\nconformance: [{worker_id()}] {self.item.nodeid}: {calls} kernel calls in {elapsed_s:.0f} s\n")
            sys.stderr.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    judged = judged_recipe(call.excinfo.value if call.excinfo else None)
    if judged is None:
        return
    if report.failed and not item.config.getoption("--no-capture-corpus"):
        from conformance.records.corpus import new_entry, save_pending

        kernel = item.config.getoption("--kernel") or "default"
        caught = _caught(call)
        entry = new_entry(
            judged.recipe, caught=f"{item.nodeid}: {caught}", kernel=kernel, property_name=judged.property_name, expect=judged.expect
        )
        try:
            path, saved = save_pending(entry, pending_dir())
        except OSError as err:  # CorpusWriteError names the folder and $CONFORMANCE_PENDING_DIR
            report.sections.append(("conformance corpus", f"failing recipe not saved: {err}\nrecipe: {judged.recipe.to_json()}"))
            return
        again = f"python -m conformance replay {path}" + (f" --kernel {kernel}" if kernel != "default" else "")
        report.sections.append(("conformance corpus", f"failing recipe {saved}\nreplay it: {again}"))
        try:
            _log_failure(
                {
                    "nodeid": item.nodeid,
                    "kernel": kernel,
                    "property": judged.property_name,
                    "expect": judged.expect,
                    "caught": caught,
                    "entry": str(path),
                    "time": time.time(),
                }
            )
        except OSError as err:  # the entry is saved; only the report line is missing
            report.sections.append(("conformance report", f"failure not logged for the run report: {err}"))


MAX_CAUGHT = 2000


def _caught(call: pytest.CallInfo[None]) -> str:
    """The failure's whole message (every line, at most MAX_CAUGHT characters) for the entry's provenance."""
    if call.excinfo is None:
        return "failure"
    text = str(call.excinfo.value).strip() or type(call.excinfo.value).__name__
    return text if len(text) <= MAX_CAUGHT else text[: MAX_CAUGHT - 3] + "..."


def _log_failure(line: dict[str, Any]) -> None:
    """Append one failure line to this worker's failures file of the run (for the report)."""
    path = run_dir() / FAILURES_LOG.format(worker=worker_id())
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")
