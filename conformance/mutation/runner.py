"""One mutation run: the conformance suite against one kernel in a subprocess, and its verdict.

`run_one` starts `python -m pytest conformance ... -p conformance.mutation.plugin` in a fresh
state folder, with a wall-clock limit; `read_events` and `count_examples` parse what the run
left behind and `judge_run` turns that into a `RunResult` (see conformance.mutation for the
statuses and how examples are counted).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from conformance.durability.state import PENDING_ENV, RUN_ID_ENV, STATE_DIR_ENV, scrubbed_env
from conformance.mutation.plugin import REPORT_ENV, SHRINK_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITE_PATH = "conformance"
PLUGIN = "conformance.mutation.plugin"
KILL_GRACE_S = 5.0
# A nested pytest must also not take the calling session's extra options (-n, -k, ...) that
# break `-x` and the chosen order.
_EXTRA_SCRUBBED_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", REPORT_ENV, PENDING_ENV)

RunStatus = Literal["killed", "survived", "timeout", "error", "passed", "false_alarm"]
Role = Literal["mutant", "baseline"]


@dataclass
class Examples:
    """Examples recorded by the harness in one run (see module docstring).

    total: examples recorded; records: JSON lines read (a differential example has one per
    mode); until_failure: examples up to and including the first failing one (= total when none
    failed); first_failure_time: `time` of the first failing example (Unix seconds) or None;
    first_failure_property: its `property` field; bad_lines: lines that were not JSON objects.
    """

    total: int = 0
    records: int = 0
    until_failure: int = 0
    first_failure_time: float | None = None
    first_failure_property: str | None = None
    bad_lines: int = 0
    times: list[float] = field(default_factory=list)

    def count_until(self, when: float) -> int:
        """Examples recorded at or before Unix time `when`."""
        return sum(1 for t in self.times if t <= when)


def count_examples(run_dir: Path) -> Examples:
    """Read every `examples-*.jsonl` of a run folder (missing folder: no examples).

    Consecutive lines of one file with the same property and recipe and distinct `mode`s are
    one example; examples are ordered by time across files (xdist workers)."""
    groups: list[dict[str, Any]] = []
    result = Examples()
    for path in sorted(Path(run_dir).glob("examples-*.jsonl")) if Path(run_dir).is_dir() else ():
        previous: dict[str, Any] | None = None
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                result.bad_lines += 1
                continue
            if not isinstance(line, dict):
                result.bad_lines += 1
                continue
            result.records += 1
            recipe = json.dumps(line.get("recipe"), sort_keys=True)
            mode = line.get("mode")
            if (
                previous is not None
                and mode is not None
                and previous["modes"]
                and previous["property"] == line.get("property")
                and previous["recipe"] == recipe
                and mode not in previous["modes"]
            ):
                previous["modes"].add(mode)
                previous["failed"] = previous["failed"] or line.get("outcome") == "fail"
                continue
            previous = {
                "property": line.get("property"),
                "recipe": recipe,
                "modes": {mode} if mode is not None else set(),
                "failed": line.get("outcome") == "fail",
                "time": float(line.get("time") or 0.0),
            }
            groups.append(previous)
    groups.sort(key=lambda g: g["time"])
    result.times = [g["time"] for g in groups]
    result.total = len(groups)
    result.until_failure = result.total
    for i, group in enumerate(groups):
        if group["failed"]:
            result.until_failure = i + 1
            result.first_failure_time = group["time"]
            result.first_failure_property = group["property"]
            break
    return result


@dataclass
class PytestEvents:
    """What the plugin reported from one pytest process (see module docstring).

    first_failure: the first failing phase as {nodeid, when, time, message} or None;
    collect_errors: messages of failed collections; passed / failed / skipped: call-phase
    counts (a skip in setup counts as skipped); first_skip: the first skip reason;
    exitstatus: pytest's exit status or None when the process ended without reporting it;
    hypothesis_profile: the profile the run actually used ("" if unknown).
    """

    first_failure: dict[str, Any] | None = None
    collect_errors: list[str] = field(default_factory=list)
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_skip: str = ""
    exitstatus: int | None = None
    hypothesis_profile: str = ""
    started: float | None = None


def read_events(path: Path) -> PytestEvents:
    """Parse the plugin's JSON-lines report (a missing or partly written file gives what it holds)."""
    events = PytestEvents()
    if not Path(path).is_file():
        return events
    for raw in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("event")
        if kind == "start":
            events.hypothesis_profile = str(event.get("hypothesis_profile") or "")
            events.started = event.get("time")
        elif kind == "collect_error":
            events.collect_errors.append(f"{event.get('nodeid')}: {event.get('message', '')}")
        elif kind == "finish":
            events.exitstatus = int(event.get("exitstatus", -1))
        elif kind == "report":
            outcome, when = event.get("outcome"), event.get("when")
            if outcome == "failed":
                if when == "call":
                    events.failed += 1
                if events.first_failure is None:
                    events.first_failure = {k: event.get(k) for k in ("nodeid", "when", "time", "message")}
            elif outcome == "skipped":
                events.skipped += 1
                if not events.first_skip:
                    events.first_skip = f"{event.get('nodeid')}: {event.get('message', '')}"
            elif outcome == "passed" and when == "call":
                events.passed += 1
    return events


def summary_failures(stdout: str) -> list[tuple[str, str]]:
    """(node id, message) of the `FAILED`/`ERROR` lines of pytest's short summary (-rfE), a
    fallback when the plugin's report is missing."""
    found = []
    for line in stdout.splitlines():
        for tag in ("FAILED ", "ERROR "):
            if line.startswith(tag):
                rest = line[len(tag) :]
                nodeid, _, message = rest.partition(" - ")
                found.append((nodeid.strip(), message.strip()))
    return found


# =============================================================================================
# One run and its verdict.


@dataclass
class RunResult:
    """The verdict of one suite run against one kernel.

    name: mutant name or "emulated"; spec: the --conformance-kernel value; role: mutant or baseline;
    status: killed / survived / timeout / error (mutants), passed / false_alarm / timeout /
    error (baseline); test: node id of the first failing test (None if none); message: its
    first failure line, or why the run is an error; examples / records: see `Examples`
    (examples until the first failure); first_failure_s: seconds from the subprocess's start
    to the first failing example (JSON lines) or else to the end of the failing test (None when
    nothing failed); wall_s: seconds the subprocess ran; tests: tests that reached their call
    phase (passed + failed); skipped: tests skipped; hypothesis_profile: the profile the run loaded; returncode: the
    subprocess's (None on timeout); log: path of its captured output (deleted with the work
    folder unless kept).
    """

    name: str
    spec: str
    role: Role
    status: RunStatus
    test: str | None = None
    message: str = ""
    examples: int = 0
    records: int = 0
    first_failure_s: float | None = None
    first_failure_from: Literal["examples", "pytest", ""] = ""
    wall_s: float = 0.0
    tests: int = 0
    skipped: int = 0
    hypothesis_profile: str = ""
    returncode: int | None = None
    log: str = ""

    @property
    def ok(self) -> bool:
        """A mutant is ok when killed; the baseline when it passed."""
        return self.status == ("killed" if self.role == "mutant" else "passed")

    @property
    def label(self) -> str:
        """The status as shown in reports."""
        if self.status == "timeout":
            return "survived (timeout)" if self.role == "mutant" else "timeout"
        return self.status.replace("_", " ")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["label"] = self.label
        data["ok"] = self.ok
        return data


def judge_run(
    *,
    name: str,
    spec: str,
    role: Role,
    returncode: int | None,
    timed_out: bool,
    wall_s: float,
    started: float,
    events: PytestEvents,
    examples: Examples,
    stdout: str = "",
) -> RunResult:
    """The verdict of one run from what it left behind (pure: no I/O).

    started: Unix time the subprocess was started (for first_failure_s)."""
    result = RunResult(
        name=name,
        spec=spec,
        role=role,
        status="error",
        wall_s=wall_s,
        returncode=returncode,
        hypothesis_profile=events.hypothesis_profile,
        tests=events.passed + events.failed,
        skipped=events.skipped,
    )
    failure = events.first_failure
    if failure is None and not timed_out and returncode == 1:
        fallback = summary_failures(stdout)
        if fallback:
            failure = {"nodeid": fallback[0][0], "when": "call", "time": None, "message": fallback[0][1]}
    result.records = examples.records
    pytest_time = float(failure["time"]) if failure is not None and failure.get("time") is not None else None
    example_time = examples.first_failure_time
    if example_time is not None and (pytest_time is None or example_time <= pytest_time):
        # the failing example is the first failure (a failing test ends after its example)
        result.examples = examples.until_failure
        result.first_failure_s = max(0.0, example_time - started)
        result.first_failure_from = "examples"
    elif pytest_time is not None:
        # the first failure left no "fail" line (host validation, a raising kernel, ...)
        result.examples = examples.count_until(pytest_time)
        result.first_failure_s = max(0.0, pytest_time - started)
        result.first_failure_from = "pytest"
    else:
        result.examples = examples.total
    if timed_out:
        result.status = "timeout"
        result.message = f"no verdict within {wall_s:.0f} s"
        if examples.first_failure_time is not None:
            result.message += f" (a failing {examples.first_failure_property} example was recorded at {result.first_failure_s:.1f} s)"
        return result
    if events.collect_errors:
        result.message = "collection error: " + events.collect_errors[0]
        return result
    if failure is not None:
        result.test = str(failure.get("nodeid"))
        result.message = str(failure.get("message") or "")
        if failure.get("when") != "call":
            result.message = f"error in {failure.get('when')} of {result.test}: {result.message}"
            return result
        result.status = "killed" if role == "mutant" else "false_alarm"
        return result
    if returncode != 0:
        tail = " | ".join(line for line in stdout.strip().splitlines()[-3:])
        result.message = f"pytest exited with {returncode} and no failing test" + (f": {tail}" if tail else "")
        return result
    if events.passed == 0:
        result.message = "every test was skipped" + (f" (first: {events.first_skip})" if events.first_skip else "")
        return result
    result.status = "survived" if role == "mutant" else "passed"
    return result


@dataclass(frozen=True)
class RunSpec:
    """One run to make: display name, --conformance-kernel value and role."""

    name: str
    spec: str
    role: Role


def child_env(base: dict[str, str], *, state_dir: Path, run_id: str, report: Path, shrink: bool, threads: int | None) -> dict[str, str]:
    """The subprocess's environment: `base` without the calling session's pytest/xdist/suite
    variables, with this run's CONFORMANCE_DIR, run id and report path, and pending corpus
    entries (crash entries included) kept inside the run's state folder, never in the
    repository's corpus; PYTHONPATH starts with the repository root; `threads` (when given)
    caps torch's intra-op threads (OMP/MKL)."""
    env = scrubbed_env(base, _EXTRA_SCRUBBED_ENV)
    env[STATE_DIR_ENV] = str(state_dir)
    env[RUN_ID_ENV] = run_id
    env[REPORT_ENV] = str(report)
    env[PENDING_ENV] = str(state_dir / "pending")
    env[SHRINK_ENV] = "1" if shrink else "0"
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO_ROOT), base.get("PYTHONPATH", "")) if x)
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, str(threads))
    return env


def suite_args(
    spec: str,
    *,
    hypothesis_profile: str,
    device: str | None = None,
    suite: Sequence[str] = (SUITE_PATH,),
    extra: Sequence[str] = (),
) -> list[str]:
    """The pytest arguments of one run (after `python -m pytest`); `extra` goes last (so it can
    override, e.g. `--maxfail=100` for a kill matrix, or add `--ignore=...`)."""
    args = [
        *suite,
        "-x",
        "-q",
        "-rfE",
        "-p",
        "no:cacheprovider",
        "-p",
        PLUGIN,
        "--conformance-no-capture",
        "--hypothesis-profile",
        hypothesis_profile,
        "--conformance-kernel",
        spec,
    ]
    if device:
        args += ["--conformance-device", device]
    return args + list(extra)


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the run's process group, SIGKILL it after KILL_GRACE_S."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(
    run: RunSpec,
    *,
    work_dir: Path,
    hypothesis_profile: str,
    timeout_s: float,
    device: str | None = None,
    shrink: bool = False,
    threads: int | None = None,
    command: Sequence[str] | None = None,
    suite: Sequence[str] = (SUITE_PATH,),
    extra: Sequence[str] = (),
    cwd: Path = REPO_ROOT,
) -> RunResult:
    """Run the suite against one kernel in a subprocess and judge it.

    work_dir: a fresh folder of its own (CONFORMANCE_DIR, report, log); timeout_s: wall-clock
    limit in seconds, after which the process group is terminated and the run is a timeout;
    command: the pytest launcher (default `python -m pytest`; tests put a fake here)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    state_dir = work_dir / "state"
    report = work_dir / "events.jsonl"
    log = work_dir / "pytest.log"
    run_id = f"mutation-{run.name}"
    env = child_env(dict(os.environ), state_dir=state_dir, run_id=run_id, report=report, shrink=shrink, threads=threads)
    argv = [
        *(command or (sys.executable, "-m", "pytest")),
        *suite_args(run.spec, hypothesis_profile=hypothesis_profile, device=device, suite=suite, extra=extra),
    ]
    with log.open("wb") as out:
        out.write(("$ " + shlex.join(argv) + "\n").encode())
        out.flush()
        started = time.time()
        t0 = time.perf_counter()
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        timed_out = False
        try:
            returncode: int | None = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _terminate(process)
            returncode = None
        except BaseException:
            _terminate(process)
            raise
        wall_s = time.perf_counter() - t0
    stdout = log.read_text(encoding="utf-8", errors="replace")
    result = judge_run(
        name=run.name,
        spec=run.spec,
        role=run.role,
        returncode=returncode,
        timed_out=timed_out,
        wall_s=wall_s,
        started=started,
        events=read_events(report),
        examples=count_examples(state_dir / "runs" / run_id),
        stdout=stdout,
    )
    result.log = str(log)
    return result
