"""Session hooks of the suite's pytest plugin: crash recovery and the run report.

Run by the xdist controller (or the only process without xdist). At the start of the session
the run folder is marked live and write-ahead files left by dead processes of earlier runs
become crash entries (conformance.records.crashes); when an xdist worker goes down its in-flight recipe
is recorded at once and the crashed test's report names the entry; at the end the run report
(conformance.records.report) is written from every worker's files and one summary line points at it.
A session that recorded nothing leaves no run folder behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.durability.state import current_run_dir, kernel_pending_dir
from conformance.records import crashes
from conformance.suite import failures, options
from conformance.suite.activation import suite_run

_CRASHES_KEY = pytest.StashKey[dict]()
_REPORT_KEY = pytest.StashKey[Any]()


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _controller_of_suite(config: pytest.Config) -> bool:
    """The xdist controller (or the only process) of a session that runs the suite."""
    return not is_worker(config) and suite_run(config)


def _kernel(config: pytest.Config) -> str:
    return options.kernel_name(config)


def _crash_destination(config: pytest.Config, run: Path) -> Path:
    return run / "crashes" if options.get(config, options.NO_CAPTURE) else kernel_pending_dir(_kernel(config))


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Controller: mark this run as live, then recover crashes left by earlier runs."""
    config = session.config
    if not _controller_of_suite(config):
        return
    config.stash[_CRASHES_KEY] = {}
    if failures.owns_display(config):
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            failures.quiet_short_summary(reporter, config)
    run = current_run_dir()
    if run is None:
        return
    try:
        run.mkdir(parents=True, exist_ok=True)
        crashes.mark_session_start(run, kind="pytest", kernel=options.get(config, options.KERNEL))
        # an earlier run's leftovers are filed under the kernel that crashed, not this session's
        earlier = run / "crashes" if options.get(config, options.NO_CAPTURE) else kernel_pending_dir
        for line in crashes.recover_leftovers(run.name, earlier, recovering_run=run):
            _say(config, "conformance: recovered " + crashes.describe(line))
    except Exception as err:  # noqa: BLE001 - a read-only state folder (or any surprise) must not stop the tests
        _say(
            config,
            f"conformance: crash recovery skipped ({type(err).__name__}: {err}); leftover write-ahead files stay for a later session",
        )


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    """Controller (xdist): a worker went down; record the recipe it had in flight, if any."""
    config = node.config
    if error is None or not suite_run(config):
        return
    run = current_run_dir()
    if run is None:
        return
    worker = str(node.gateway.id)
    reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else "crashed"
    try:
        line = crashes.recover_worker(run, worker, error=reason, destination=_crash_destination(config, run))
    except Exception as err:  # noqa: BLE001 - the write-ahead file stays; the next session records it
        _say(
            config,
            f"\nconformance: worker {worker} crash not recorded now ({type(err).__name__}: {err}); "
            "its write-ahead file stays for the next session",
        )
        return
    if line is not None:
        config.stash.setdefault(_CRASHES_KEY, {})[worker] = line
        _say(config, "\nconformance: " + crashes.describe(line))


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """Controller (xdist): name the crash entry in the crashed test's report."""
    node = getattr(report, "node", None)
    if node is None:
        return
    line = node.config.stash.get(_CRASHES_KEY, {}).get(str(node.gateway.id))
    if line is None:
        return
    crashes.annotate_nodeid(line, crashitem)
    report.longrepr = f"{report.longrepr}\nthe recipe in flight was saved as crash entry {line.get('entry')}"
    report.user_properties.append((failures.PROPERTY, failures.crash_info(crashitem, line, _kernel(node.config))))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Controller: write the run report (all workers' files), mark the run finished; a run
    folder that recorded nothing is removed."""
    config = session.config
    if not _controller_of_suite(config):
        return
    run = current_run_dir()
    if run is None or not run.is_dir():
        return
    try:
        crashes.mark_session_finish(run, exitstatus=int(exitstatus))
        contents = {p.name for p in run.iterdir()}
        if contents <= {crashes.SESSION_FILE}:
            (run / crashes.SESSION_FILE).unlink(missing_ok=True)
            run.rmdir()
            return
        from conformance.records.report import write_report

        config.stash[_REPORT_KEY] = write_report(run)
    except Exception as err:  # noqa: BLE001 - the report must never break the session
        config.stash[_REPORT_KEY] = f"conformance report not written: {type(err).__name__}: {err}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Controller: one report per distinct failure (conformance.suite.failures), then one line
    pointing at the run report."""
    if not _controller_of_suite(config):
        return
    try:
        failures.print_summary(terminalreporter, config)
    except Exception as err:  # noqa: BLE001 - the summary must never break the session
        terminalreporter.write_line(
            f"conformance: failure summary not printed ({type(err).__name__}: {err}); rerun with --conformance-tracebacks"
        )
    files = config.stash.get(_REPORT_KEY, None)
    if files is None:
        return
    if isinstance(files, str):
        terminalreporter.write_line(files)
        return
    from conformance.records.report import summary_line

    terminalreporter.write_line(summary_line(files))
