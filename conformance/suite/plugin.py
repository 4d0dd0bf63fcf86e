"""The suite's pytest plugin: options, the `target` fixture, failure capture.

Registered through the `pytest11` entry point (`pip install` the project, then
`pytest --pyargs conformance --conformance-kernel NAME` from any directory) and by the checkout's
root conftest.py. Every option is prefixed `--conformance-` (conformance.suite.options), so
installing the package breaks no other pytest session:
    --conformance-kernel NAME      backend to test (default: flydsl on gfx950, else emulated):
                                   built-in names, package.module:attr or path/to/file.py:attr
    --conformance-profile NAME     numerics profile for a kernel that declares none (or to override)
    --conformance-device DEV       cpu | cuda (default: cuda when available and the kernel runs there)
    --conformance-workers-per-gpu N
                                   with `-n auto`: xdist workers per visible GPU (default 1)
    --conformance-no-capture       do not save failing recipes to the pending folder
    --conformance-call-timeout S   seconds one kernel call may take (default 300; 0: no limit); a
                                   hung call fails its test with a "hung" entry, and under xdist
                                   ends its worker, which is replaced (conformance.durability.watchdog)
    --conformance-tracebacks       pytest's own report of every failing test instead of one
                                   report per distinct failure (conformance.suite.failures)

A kernel the user named that cannot be used here (unknown name, import error, no profile, bad
profile or device, a backend unavailable on this machine or whose own stack is unusable) is a
usage error: the session stops before any test with one line naming the problem (exit 4).

Failing recipes are saved, named by their content hash, to `.conformance/pending/<kernel>/` under
the folder pytest was started from ($CONFORMANCE_PENDING_DIR moves the pending folder), never
inside the installed package; the path is printed with the failure. A property whose every
example was rejected (too large for this machine, out of device memory under load, a call the
backend declares it does not take) is reported as not judged, with the reasons: a skip, never a
failure of the kernel.

Crash containment under xdist: a worker that dies (GPU fault, abort, SIGKILL, a hang past the
hard limit) fails the one test it was running, its in-flight recipe becomes a crash entry, and a
replacement worker takes the remaining tests. The plugin makes `--dist load` the default and
lifts xdist's cap on worker restarts, since worker replacement under grouped scheduling
(`--dist loadgroup`) can hang or abort the session (pytest-xdist issues); cases that must not
run concurrently (caches over 4 GiB) take a machine-wide lock instead (conformance.suite.locks).

GPU pinning per worker: conformance.suite.gpus. Crash recovery, the run report and the terminal
summary: conformance.suite.session and conformance.suite.failures.
"""

from __future__ import annotations

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
    kernel_pending_dir,
    new_run_id,
    run_dir,
    worker_id,
)
from conformance.judging.hypothesis_profiles import register_profiles
from conformance.judging.target import Target, TargetError, build_target, judged_recipe
from conformance.suite import failures, gpus, options, threads
from conformance.suite.activation import suite_active, suite_run
from conformance.suite.session import (  # noqa: F401 - hooks
    pytest_handlecrashitem,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
    pytest_testnodedown,
)

FAILURES_LOG = "failures-{worker}.jsonl"
NOT_JUDGED_LOG = "not-judged-{worker}.jsonl"
MAX_WORKER_RESTARTS = 10_000


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser, DEFAULT_CALL_TIMEOUT_S)


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
    timeout = options.get(config, options.CALL_TIMEOUT)
    if timeout is not None:
        os.environ[CALL_TIMEOUT_ENV] = repr(timeout)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        gpus.pin_worker_gpu(worker)
        threads.share_cores_among_workers()
        return
    gpus.publish_gpus()
    if not suite_run(config):
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
    failures.configure_terminal(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The session header of a suite run: kernel, numerics profile, device, Hypothesis profile, and
    where failing recipes are saved."""
    if not suite_run(config) or hasattr(config, "workerinput"):
        return []
    from hypothesis import settings

    named = options.get(config, options.KERNEL)
    try:
        target = build_target(
            named, profile=options.get(config, options.PROFILE), device=options.get(config, options.DEVICE), check_only=True
        )
        what = (
            f"kernel {target.name}{'' if named else ' (the default here)'}, numerics profile {target.profile.name}, device {target.device}"
        )
        kernel = target.name
    except TargetError as err:
        what, kernel = f"kernel {named or 'default'}: {err}", named or "default"
    hypothesis = f"Hypothesis profile {settings.get_current_profile_name()!r} ({settings.default.max_examples} examples per property test)"
    saved = (
        "not saved (--conformance-no-capture)"
        if options.get(config, options.NO_CAPTURE)
        else f"saved to {_abs(kernel_pending_dir(kernel))}"
    )
    return [f"conformance: {what}; {hypothesis}", f"conformance: failing recipes {saved}"]


def _abs(path: Any) -> str:
    from pathlib import Path

    return str(Path(path).absolute())


def _check_target(config: pytest.Config) -> None:
    """Controller: a kernel, profile or device the user named that cannot be used is a usage error."""
    named = [options.get(config, o) for o in options.TARGET_OPTIONS]
    if not any(named):
        return
    try:
        build_target(named[0], profile=named[1], device=named[2], check_only=True)  # type: ignore[arg-type]
    except TargetError as err:
        raise pytest.UsageError(f"conformance: {err}") from None


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Target:
    """The kernel under test (the machine's default when none is named); a kernel that cannot run
    here fails every test that needs it, with the reason."""
    config = request.config
    try:
        return build_target(
            options.get(config, options.KERNEL),  # type: ignore[arg-type]
            profile=options.get(config, options.PROFILE),  # type: ignore[arg-type]
            device=options.get(config, options.DEVICE),  # type: ignore[arg-type]
        )
    except TargetError as err:
        pytest.fail(f"conformance: {err}", pytrace=False)


PROGRESS_EVERY_S = 15.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Suite sessions: a test running longer than PROGRESS_EVERY_S (many Hypothesis examples)
    prints one line to stderr every PROGRESS_EVERY_S seconds with its kernel calls so far; the
    tally of rejected examples starts afresh."""
    if not suite_active(item.config):
        yield
        return
    from conformance.judging import progress, rejections

    rejections.reset()
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
    """Suite runs: a property none of whose examples could be judged becomes a skip saying why
    (not judged); a failure gets its finding (conformance.judging.finding), its recipe saved to the
    kernel's pending folder and what the terminal summary needs in `report.user_properties`."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not suite_run(item.config) or call.excinfo is None:
        return
    err = call.excinfo.value
    if _unsatisfiable(err):
        _not_judged(item, report)
        return
    if not report.failed:
        return
    kernel = options.get(item.config, options.KERNEL) or "default"
    judged = judged_recipe(err)
    info = failures.describe(item.nodeid, err, judged, kernel=str(kernel))
    if judged is not None and not options.get(item.config, options.NO_CAPTURE):
        _capture(item, report, info, judged, str(kernel))
    report.user_properties.append((failures.PROPERTY, info))


def _capture(item: pytest.Item, report: pytest.TestReport, info: dict[str, Any], judged: Any, kernel: str) -> None:
    """Save the failing recipe as a pending entry of the kernel and log the failure for the run report."""
    from conformance.records.corpus import new_entry, save_pending

    caught = info["message"]
    entry = new_entry(
        judged.recipe, caught=f"{item.nodeid}: {caught}", kernel=kernel, property_name=judged.property_name, expect=judged.expect
    )
    try:
        path, saved = save_pending(entry, kernel_pending_dir(kernel))
    except OSError as err:  # CorpusWriteError names the folder and $CONFORMANCE_PENDING_DIR
        info["saved"] = f"failing recipe not saved: {err}"
        report.sections.append(("conformance corpus", f"failing recipe not saved: {err}\nrecipe: {judged.recipe.to_json()}"))
        return
    info["entry"], info["saved"] = _abs(path), saved
    report.sections.append(("conformance corpus", f"failing recipe {saved}"))
    try:
        _log(
            FAILURES_LOG,
            {
                "nodeid": item.nodeid,
                "kernel": kernel,
                "property": judged.property_name,
                "expect": judged.expect,
                "caught": caught,
                "finding": info["finding"],
                "entry": _abs(path),
                "time": time.time(),
            },
        )
    except OSError as err:  # the entry is saved; only the report line is missing
        report.sections.append(("conformance report", f"failure not logged for the run report: {err}"))


def _unsatisfiable(err: BaseException) -> bool:
    try:
        from hypothesis.errors import Unsatisfiable
    except ImportError:  # pragma: no cover - Hypothesis is a dependency
        return False
    return isinstance(err, Unsatisfiable)


def _not_judged(item: pytest.Item, report: pytest.TestReport) -> None:
    """Turn a property whose every example was rejected into a skip naming why, logged for the run report."""
    from conformance.judging import rejections

    reasons = rejections.summary() or "every example was rejected (no reason recorded)"
    reason = f"not judged: no example could be judged here ({reasons})"
    path, line, _ = item.location
    report.outcome = "skipped"
    report.longrepr = (str(item.path), (line or 0) + 1, reason)
    kernel = options.get(item.config, options.KERNEL) or "default"
    try:
        _log(NOT_JUDGED_LOG, {"nodeid": item.nodeid, "kernel": kernel, "reason": reasons, "time": time.time()})
    except OSError as err:
        report.sections.append(("conformance report", f"not-judged test not logged for the run report: {err}"))


def _log(name: str, line: dict[str, Any]) -> None:
    """Append one JSON line to this worker's file `name` of the run (for the report)."""
    path = run_dir() / name.format(worker=worker_id())
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")
