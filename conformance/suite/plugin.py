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
    --conformance-shard I/N        run shard I of N of the collected tests (default: $CONFORMANCE_SHARD
                                   or the CI system's variables: conformance.fleet.shards), split by
                                   the durations in --conformance-durations PATH (pytest-split's
                                   format; --conformance-store-durations records them)
    --conformance-shared-store URL the fleet's Redis/Valkey store ($CONFORMANCE_SHARED_STORE):
                                   Hypothesis examples under `--hypothesis-profile fleet` (read
                                   only under dev, unused under ci), failures pushed to its inbox
                                   under fleet; fail-soft (conformance.fleet), said in the header
                                   and at the end
    --conformance-require-shared-store
                                   a store that is missing or unreachable fails the session

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

Fleet runs (docs/fleet.md): the shard split happens at collection (after -k / -m), identically
in every process; the shared store's examples database is made per process and namespaced by
the target (conformance.fleet.namespace); a failure saved to the pending folder is pushed to the
store's inbox at once under the fleet profile (queued locally when the store is down).

GPU pinning per worker: conformance.suite.gpus. Crash recovery, the run report and the terminal
summary: conformance.suite.session and conformance.suite.failures.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.durability.jsonlines import append_json_lines
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


@dataclass
class _Fleet:
    """A suite session's use of the fleet (conformance.fleet): its shard, the shared store (None:
    none configured), the store's examples database, and this process's runner (made on first push)."""

    shard: Any
    store: Any = None
    database: Any = None
    runner: Any = None


_FLEET = pytest.StashKey[_Fleet]()


def _fleet_setup(config: pytest.Config) -> _Fleet:
    """The session's shard and shared store from the options and environment; a usage error names
    what cannot be used. A store (and CI variables' shards) only for a session that runs the suite."""
    from conformance.fleet import shards
    from conformance.fleet.store import EXTRA_HINT, StoreError, address_from, open_store, redis_available

    run = suite_run(config)
    option = options.get(config, options.SHARD)
    try:
        shard = shards.resolve(option) if (option or run) else shards.UNSHARDED  # type: ignore[arg-type]
        address = address_from(options.get(config, options.SHARED_STORE)) if run else None  # type: ignore[arg-type]
    except (shards.ShardError, StoreError) as err:
        message = str(err).replace("--shard", options.SHARD).replace("--shared-store", options.SHARED_STORE)
        raise pytest.UsageError(f"conformance: {message}") from None
    fleet = _Fleet(shard)
    if address is not None:
        if not redis_available():
            raise pytest.UsageError(f"conformance: the shared store {address.shown} needs redis-py: {EXTRA_HINT}")
        from conformance.fleet.database import FailSoftDatabase
        from conformance.fleet.namespace import suite_namespace

        fleet.store = open_store(address)
        named = [options.get(config, o) for o in options.TARGET_OPTIONS]
        fleet.database = FailSoftDatabase(fleet.store, lambda: suite_namespace(*named))  # type: ignore[arg-type]
    config.stash[_FLEET] = fleet
    return fleet


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Only in a session that asks for the suite (conformance.suite.activation), before xdist and
    Hypothesis read their options: the suite's Hypothesis profiles, `--dist load` unless the user
    chose, no cap on worker restarts."""
    if not suite_active(config):
        return
    fleet = _fleet_setup(config)
    try:
        register_profiles(fleet.database)
    except ValueError as err:  # a malformed $CONFORMANCE_FLEET_EXAMPLES
        raise pytest.UsageError(f"conformance: {err}") from None
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
    config.pluginmanager.register(_FleetHooks(config), "conformance-fleet")
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
    _check_required_store(config)
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
        what, kernel = f"kernel {named or 'default'}: {err}", options.kernel_name(config)
    hypothesis = f"Hypothesis profile {settings.get_current_profile_name()!r} ({settings.default.max_examples} examples per property test)"
    saved = (
        "not saved (--conformance-no-capture)"
        if options.get(config, options.NO_CAPTURE)
        else f"saved to {_abs(kernel_pending_dir(kernel))}"
    )
    return [f"conformance: {what}; {hypothesis}", f"conformance: failing recipes {saved}", *_fleet_header(config)]


def _fleet_header(config: pytest.Config) -> list[str]:
    """The header's lines about the shard and the shared store (what it is used for under the
    session's Hypothesis profile, or that it is unreachable and the run uses local state only)
    and the entries a run could not push."""
    from hypothesis import settings

    from conformance.fleet import inbox
    from conformance.fleet.runner import PUSH_HINT

    fleet = config.stash.get(_FLEET, None)
    if fleet is None:
        return []
    lines = []
    if fleet.shard.sharded:
        path = _durations_path(config)
        try:
            from conformance.fleet.shards import read_durations

            known = f"{len(read_durations(path))} recorded in {path}"
        except ValueError as err:
            known = str(err)
        lines.append(f"conformance: {fleet.shard.describe()}: tests split by recorded durations ({known})")
    profile = settings.get_current_profile_name()
    waiting = inbox.count_queued()
    unpushed = f"; {waiting} entr{'y' if waiting == 1 else 'ies'} unpushed ({PUSH_HINT})" if waiting else ""
    if fleet.store is None:
        if profile == "fleet" or waiting:
            lines.append(
                f"conformance: no shared store (--conformance-shared-store URL or $CONFORMANCE_SHARED_STORE): local state only{unpushed}"
            )
        return lines
    if not fleet.store.ping():
        lines.append(f"conformance: {fleet.store.breaker.reason}{unpushed}")
        return lines
    use = {
        "fleet": f"examples read and written ({_namespace_text(config)}); failures pushed to its inbox",
        "dev": f"examples read only ({_namespace_text(config)}; dev never writes or deletes them); failures not pushed",
        "ci": "not used (ci has no examples database: the verdict never depends on a store); failures not pushed",
    }.get(profile, f"not used by the {profile} profile (--hypothesis-profile fleet shares examples and failures)")
    lines.append(f"conformance: shared store {fleet.store.address.shown}: {use}{unpushed}")
    return lines


def _namespace_text(config: pytest.Config) -> str:
    """The examples namespace, as far as the controller knows it without touching a GPU."""
    from conformance.fleet.namespace import device_architecture, fleet_kernel_id

    named = [options.get(config, o) for o in options.TARGET_OPTIONS]
    try:
        target = build_target(named[0], profile=named[1], device=named[2], check_only=True)  # type: ignore[arg-type]
    except TargetError:
        return "namespace of a kernel that cannot be built here"
    import hypothesis

    arch = device_architecture(target.device) if target.device.type == "cpu" else "the GPU architecture of each worker"
    kernel = fleet_kernel_id(str(named[0] or target.name))
    return f"namespace kernel {kernel}, profile {target.profile.name}, {arch}, Hypothesis {hypothesis.__version__}"


def _check_required_store(config: pytest.Config) -> None:
    """Controller, with --conformance-require-shared-store: no store, or one that does not answer, is a usage error."""
    if not options.get(config, options.REQUIRE_SHARED_STORE):
        return
    fleet = config.stash.get(_FLEET, None)
    if fleet is None or fleet.store is None:
        raise pytest.UsageError(
            f"conformance: {options.REQUIRE_SHARED_STORE} needs a store: {options.SHARED_STORE} URL or $CONFORMANCE_SHARED_STORE"
        )
    if not fleet.store.ping():
        raise pytest.UsageError(f"conformance: {fleet.store.breaker.reason.split('; this run')[0]} ({options.REQUIRE_SHARED_STORE})")


def _durations_path(config: pytest.Config) -> Path:
    from conformance.fleet.shards import DEFAULT_DURATIONS

    given = options.get(config, options.DURATIONS)
    path = Path(str(given)) if given else Path(DEFAULT_DURATIONS)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


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
    kernel = options.kernel_name(item.config)
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
    pushed = _push(item, entry, info, saved)
    report.sections.append(("conformance corpus", f"failing recipe {saved}" + (f"; {pushed}" if pushed else "")))
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


def _push(item: pytest.Item, entry: Any, info: dict[str, Any], saved: str) -> str:
    """Under the fleet profile with a shared store: push the saved entry to the store's inbox
    (conformance.fleet.runner; shrunk: Hypothesis shrank it before the test failed). One line
    saying what happened, "" when nothing was to be pushed."""
    from hypothesis import settings

    fleet = item.config.stash.get(_FLEET, None)
    if fleet is None or fleet.store is None or settings.get_current_profile_name() != "fleet" or saved.startswith("is the reviewed"):
        return ""
    if fleet.runner is None:
        from conformance.fleet.runner import FleetRunner, finder_id

        target = item.funcargs.get("target") if hasattr(item, "funcargs") else None
        named = [options.get(item.config, o) for o in options.TARGET_OPTIONS]
        if target is None:
            try:
                target = build_target(named[0], profile=named[1], device=named[2], check_only=True)  # type: ignore[arg-type]
            except TargetError:
                return ""
        kernel = str(named[0] or target.name)
        run_id = os.environ.get(RUN_ID_ENV, "run")
        fleet.runner = FleetRunner.for_target(
            fleet.store,
            kernel,
            target.profile.name,
            finder_id(run_id, fleet.shard, worker_id()),
            profile_option=named[1],  # type: ignore[arg-type]
            shard=fleet.shard,
        )
    try:
        return fleet.runner.send(entry, info["finding"], shrunk=True)
    except Exception as err:  # noqa: BLE001 - the entry is saved; pushing it is best effort
        return f"not pushed ({type(err).__name__}: {err})"


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
    kernel = options.kernel_name(item.config)
    try:
        _log(NOT_JUDGED_LOG, {"nodeid": item.nodeid, "kernel": kernel, "reason": reasons, "time": time.time()})
    except OSError as err:
        report.sections.append(("conformance report", f"not-judged test not logged for the run report: {err}"))


def _log(name: str, line: dict[str, Any]) -> None:
    """Append one JSON line to this worker's file `name` of the run (for the report)."""
    append_json_lines(run_dir() / name.format(worker=worker_id()), [line])


class _FleetHooks:
    """Hooks of a suite session's fleet part (registered in pytest_configure, in every process):
    the shard split at collection, the durations file, each process's store status, and the
    controller's closing lines about the store (and exit status under --conformance-require-shared-store)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.kept: tuple[int, int, float, float] | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Keep this shard's tests (conformance.fleet.shards.split over the tests left after -k / -m)."""
        fleet = config.stash.get(_FLEET, None)
        if fleet is None or not fleet.shard.sharded or not items:
            return
        from conformance.fleet.shards import ShardError, read_durations, shard_seconds, split

        try:
            durations = read_durations(_durations_path(config))
        except ShardError as err:
            raise pytest.UsageError(f"conformance: {err}") from None
        ids = [item.nodeid for item in items]
        mine = set(split(ids, fleet.shard.count, durations)[fleet.shard.index - 1])
        kept = [item for item in items if item.nodeid in mine]
        dropped = [item for item in items if item.nodeid not in mine]
        self.kept = (len(kept), len(items), shard_seconds([i.nodeid for i in kept], durations), shard_seconds(ids, durations))
        items[:] = kept
        if dropped:
            config.hook.pytest_deselected(items=dropped)

    def pytest_report_collectionfinish(self, config: pytest.Config) -> list[str]:
        fleet = config.stash.get(_FLEET, None)
        if self.kept is None or fleet is None:
            return []
        mine, total, seconds, all_seconds = self.kept
        return [f"conformance: {fleet.shard.describe()}: {mine} of {total} tests (~{seconds:.0f} s of ~{all_seconds:.0f} s recorded)"]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        fleet = config.stash.get(_FLEET, None)
        if fleet is None or not suite_run(config):
            return
        run = current_run_dir()
        if fleet.store is not None and run is not None and (fleet.store.down or fleet.runner is not None):
            from conformance.fleet.runner import FleetRunner

            runner = fleet.runner or FleetRunner(fleet.store, "", "", "")
            run.mkdir(parents=True, exist_ok=True)
            runner.write_status(run, worker_id())
        if hasattr(config, "workerinput"):
            return
        if options.get(config, options.STORE_DURATIONS):
            self._store_durations(config)
        if options.get(config, options.REQUIRE_SHARED_STORE) and self._statuses(run) and any(s["down"] for s in self._statuses(run)):
            if session.exitstatus == 0:
                session.exitstatus = 1

    def _statuses(self, run: Path | None) -> list[dict[str, Any]]:
        from conformance.fleet.runner import read_statuses

        return read_statuses(run) if run is not None and run.is_dir() else []

    def _store_durations(self, config: pytest.Config) -> None:
        from conformance.fleet.shards import write_durations

        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        measured: dict[str, float] = {}
        for reports in reporter.stats.values():
            for report in reports:
                if isinstance(report, pytest.TestReport) and report.duration >= 0:
                    measured[report.nodeid] = measured.get(report.nodeid, 0.0) + report.duration
        if measured:
            try:
                self.durations_written: str = (
                    f"{len(measured)} test durations merged into {write_durations(_durations_path(config), measured)}"
                )
            except (OSError, ValueError) as err:
                self.durations_written = f"test durations not written: {err}"

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        """Controller: how the store fared (lost during the run: from then on local state only),
        what was pushed, what waits for `corpus push`."""
        if hasattr(config, "workerinput") or not suite_run(config):
            return
        written = getattr(self, "durations_written", "")
        if written:
            terminalreporter.write_line(f"conformance: {written}")
        fleet = config.stash.get(_FLEET, None)
        if fleet is None or fleet.store is None:
            return
        from conformance.fleet import inbox
        from conformance.fleet.runner import PUSH_HINT

        statuses = self._statuses(current_run_dir())
        down = [s for s in statuses if s.get("down")]
        pushed = sum(int(s.get("pushed", 0)) for s in statuses)
        waiting = inbox.count_queued()
        parts = [down[0]["reason"] if down else f"shared store {fleet.store.address.shown}"]
        if pushed:
            parts.append(f"{pushed} failure entr{'y' if pushed == 1 else 'ies'} pushed")
        parts.append(f"{waiting} entr{'y' if waiting == 1 else 'ies'} unpushed" + (f" ({PUSH_HINT})" if waiting else ""))
        terminalreporter.write_line("conformance: " + "; ".join(parts), red=bool(down))
        if down and options.get(config, options.REQUIRE_SHARED_STORE):
            terminalreporter.write_line(f"conformance: {options.REQUIRE_SHARED_STORE}: the store was lost during the run: exit status 1")
