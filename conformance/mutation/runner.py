"""Mutation score: how many catalogued broken kernels the conformance suite kills, and how fast.

`run_mutation_score` runs the conformance suite (pytest in a subprocess) once against every
mutant of `conformance.mutants.CATALOGUE` and once against the unbroken `emulated` kernel (the
baseline, which must pass: no false alarms). Each run gets

    python -m pytest conformance -x -q -rfE -p no:cacheprovider --no-capture-corpus
        --hypothesis-profile PROFILE --kernel SPEC -p conformance.mutation [--device DEV]

in its own fresh CONFORMANCE_DIR (a temporary folder) and its own CONFORMANCE_RUN_ID, so runs
never mix their example records. `-x` stops a run at its first failing test: a mutant is
*killed* when a test fails in its call phase, *survived* when the whole suite passes,
*survived (timeout)* when the run exceeds the per-run timeout, and *error* when the run could
not judge it (collection or fixture error, every test skipped, pytest usage error).

This module is also the pytest plugin the runner loads into each subprocess
(`-p conformance.mutation`). Loaded, it

- orders the suite for fast kills (`ORDER`, `_sort_key`): corpus entries first, cheapest
  recipe first (edge cases are the highest-yield examples per second), then host validation,
  then gfx950 bit-exact agreement, then the Hypothesis properties in `PROPERTY_ORDER`
  (highest yield per second first, measured on this catalogue), then anything else in
  collection order. The test files are not edited;
- drops Hypothesis's shrink and explain phases unless CONFORMANCE_MUTATION_SHRINK=1 (the
  profile's generate phase, hence whether and where a mutant is killed, is unchanged; only the
  time spent minimising the failing example after the kill is saved);
- with CONFORMANCE_MUTATION_REPORT=PATH, appends JSON lines to PATH: one `start` event (the
  Hypothesis profile actually loaded), one `report` event per failed phase and per call phase,
  one `collect_error` per failed collection, one `finish` event (exit status). Times are
  `time.time()` seconds (Unix epoch).

Counting examples: the harness (`conformance.harness.record`) appends one JSON line per judged
example to `<CONFORMANCE_DIR>/runs/<run id>/examples-<worker>.jsonl`; the differential check
writes one line per comparison mode for the same kernel call, so consecutive lines of one
property and recipe with distinct `mode`s count as one example. A mutant's *examples* are the
examples recorded up to and including the first one whose outcome is "fail" (all recorded
examples when the failure left no "fail" line: a kernel that raised, host validation, a
precondition-run assertion). Its *first failure* time is that example's `time` minus the
subprocess's start, else the end of the failing test as pytest reported it.

Exit status of the command: 0 when every selected mutant is killed and the baseline (when run)
passes, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SUITE_PATH = "conformance"
BASELINE_KERNEL = "emulated"
PLUGIN = "conformance.mutation"
REPORT_ENV = "CONFORMANCE_MUTATION_REPORT"
SHRINK_ENV = "CONFORMANCE_MUTATION_SHRINK"
STATE_DIR_ENV = "CONFORMANCE_DIR"  # conformance.harness.STATE_DIR_ENV (not imported: it pulls torch)
RUN_ID_ENV = "CONFORMANCE_RUN_ID"  # conformance.harness.RUN_ID_ENV
PENDING_ENV = "CONFORMANCE_PENDING_DIR"  # conformance.crashes.PENDING_ENV
DEFAULT_TIMEOUT_S = 1200.0
KILL_GRACE_S = 5.0

# Environment a nested pytest must not inherit: it would believe it is an xdist worker of the
# calling session (tests/test_mutation_score.py runs under `pytest -n auto`), pin the calling
# session's GPU, or take extra options (-n, -k, ...) that break `-x` and the chosen order.
_SCRUBBED_ENV_PREFIXES = ("PYTEST_XDIST_", "CONFORMANCE_GPU_")
_SCRUBBED_ENV = ("PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", RUN_ID_ENV, STATE_DIR_ENV, REPORT_ENV, PENDING_ENV)

RunStatus = Literal["killed", "survived", "timeout", "error", "passed", "false_alarm"]
Role = Literal["mutant", "baseline"]


# =============================================================================================
# The pytest plugin (loaded in the subprocess with `-p conformance.mutation`).

# (file name, test function) in run order; None as the function takes the whole file.
CHEAP_STAGES: tuple[tuple[str, str | None], ...] = (
    ("test_corpus.py", "test_corpus_entry"),
    ("test_host_validation.py", None),
    ("test_gfx950_agreement.py", "test_bit_exact_agreement_with_emulated"),
)
# The Hypothesis properties, in the order that kills fastest (measured on this catalogue with
# the corpus left out, see docs/mutation-score.md): greedily the highest marginal yield per
# second after the stages above, then total yield per second. The documented scale behaviour
# is the only property killing qk_scale_mantissa (a mantissa kept where the gfx950 kernel drops
# it shows only under a violated precondition) and kills 21 of the 22 mutants, so it comes
# first although it is slow per example; then mutants killed / seconds for 25 ci examples of
# the emulated kernel (one CPU thread): long rows 16 / 1.5 s, beyond 4 GiB 19 / 3.4 s (the only
# property killing offset32), precondition runs 7 / 1.3 s, split and merge 15 / 3.3 s,
# permuting keys 16 / 3.9 s, strides 2 / 0.8 s, differential 19 / 11 s, a row alone 1 / 0.9 s,
# two runs 0 / 1.1 s. Properties not listed run after these, in collection order.
PROPERTY_ORDER: tuple[tuple[str, str], ...] = (
    ("test_gfx950_agreement.py", "test_documented_scale_behaviour"),
    ("test_differential.py", "test_differential_long_rows"),
    ("test_differential.py", "test_differential_beyond_4gib"),
    ("test_preconditions.py", "test_precondition_violations"),
    ("test_metamorphic.py", "test_split_and_merge"),
    ("test_metamorphic.py", "test_permuting_keys"),
    ("test_metamorphic.py", "test_strided_equals_contiguous"),
    ("test_differential.py", "test_differential"),
    ("test_metamorphic.py", "test_row_alone_equals_row_in_batch"),
    ("test_metamorphic.py", "test_two_runs_bit_identical"),
)
ORDER: tuple[tuple[str, str | None], ...] = CHEAP_STAGES + PROPERTY_ORDER
HUGE_CACHE_BYTES = 1 << 32
RECORD_BYTES = 656


def corpus_recipe_cost(path: Path) -> float:
    """Estimated cost of replaying a corpus entry, in key-heads (sum of row lengths x heads);
    a cache over 4 GiB adds 10^6 (its mapping and poisoned neighbours dominate). An unreadable
    file costs 0 (it runs first, and fails or errors quickly)."""
    try:
        recipe = json.loads(Path(path).read_text(encoding="utf-8"))["recipe"]
        keys = sum(max(int(x), 0) for x in recipe.get("row_lengths", ()))
        cost = float(keys * int(recipe.get("heads", 1)))
        if int(recipe.get("cache_rows", 0)) * RECORD_BYTES > HUGE_CACHE_BYTES:
            cost += 1e6
        return cost
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _sort_key(item: Any, index: int) -> tuple[int, float, int]:
    """(stage, cost, collection index) of a collected item: see ORDER."""
    file_name = Path(str(getattr(item, "path", getattr(item, "fspath", "")))).name
    function = getattr(getattr(item, "function", None), "__name__", None) or item.name.split("[")[0]
    for stage, (wanted_file, wanted_function) in enumerate(ORDER):
        if file_name == wanted_file and wanted_function in (None, function):
            cost = 0.0
            if wanted_function == "test_corpus_entry":
                callspec = getattr(item, "callspec", None)
                path = callspec.params.get("path") if callspec is not None else None
                cost = corpus_recipe_cost(Path(path)) if path is not None else 0.0
            return stage, cost, index
    return len(ORDER), 0.0, index


def order_items(items: list[Any]) -> None:
    """Reorder collected pytest items in place for fast kills (see ORDER)."""
    keyed = sorted(((_sort_key(item, i), item) for i, item in enumerate(items)), key=lambda pair: pair[0])
    items[:] = [item for _, item in keyed]


def _emit(event: dict[str, Any]) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(event, sort_keys=True) + "\n")


def _first_line(report: Any) -> str:
    """The first two non-empty lines of a report's failure or skip message (300 characters at most)."""
    longrepr = getattr(report, "longrepr", None)
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        text = str(crash.message)
    elif isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (file, line, reason)
        text = str(longrepr[2])
    else:
        text = str(longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[:2])[:300]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After Hypothesis loaded --hypothesis-profile: drop shrink/explain unless asked not to."""
    profile = ""
    try:
        from hypothesis import Phase, settings

        if os.environ.get(SHRINK_ENV) != "1":
            current = settings.get_current_profile_name()
            phases = tuple(p for p in settings.default.phases if p not in (Phase.shrink, Phase.explain))
            name = f"{current}-no-shrink"
            settings.register_profile(name, phases=phases)
            settings.load_profile(name)
        profile = settings.get_current_profile_name()
        max_examples = settings.default.max_examples
    except ImportError:  # no Hypothesis: nothing to change
        max_examples = None
    _emit({"event": "start", "time": time.time(), "hypothesis_profile": profile, "max_examples": max_examples})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    order_items(items)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _emit({"event": "collect_error", "nodeid": report.nodeid, "time": time.time(), "message": _first_line(report)})


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call" or report.outcome != "passed":
        _emit({
            "event": "report", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "time": time.time(), "duration": float(report.duration), "message": _first_line(report) if report.outcome != "passed" else "",
        })


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit({"event": "finish", "time": time.time(), "exitstatus": int(exitstatus), "collected": int(session.testscollected)})


# =============================================================================================
# Parsing what a run left behind.


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
                previous is not None and mode is not None and previous["modes"]
                and previous["property"] == line.get("property") and previous["recipe"] == recipe
                and mode not in previous["modes"]
            ):
                previous["modes"].add(mode)
                previous["failed"] = previous["failed"] or line.get("outcome") == "fail"
                continue
            previous = {
                "property": line.get("property"), "recipe": recipe, "modes": {mode} if mode is not None else set(),
                "failed": line.get("outcome") == "fail", "time": float(line.get("time") or 0.0),
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
                rest = line[len(tag):]
                nodeid, _, message = rest.partition(" - ")
                found.append((nodeid.strip(), message.strip()))
    return found


# =============================================================================================
# One run and its verdict.


@dataclass
class RunResult:
    """The verdict of one suite run against one kernel.

    name: mutant name or "emulated"; spec: the --kernel value; role: mutant or baseline;
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


def judge(
    *, name: str, spec: str, role: Role, returncode: int | None, timed_out: bool, wall_s: float, started: float,
    events: PytestEvents, examples: Examples, stdout: str = "",
) -> RunResult:
    """The verdict of one run from what it left behind (pure: no I/O).

    started: Unix time the subprocess was started (for first_failure_s)."""
    result = RunResult(name=name, spec=spec, role=role, status="error", wall_s=wall_s, returncode=returncode,
                       hypothesis_profile=events.hypothesis_profile, tests=events.passed + events.failed,
                       skipped=events.skipped)
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
    """One run to make: display name, --kernel value and role."""

    name: str
    spec: str
    role: Role


def child_env(base: dict[str, str], *, state_dir: Path, run_id: str, report: Path, shrink: bool, threads: int | None) -> dict[str, str]:
    """The subprocess's environment: `base` without the calling session's pytest/xdist/suite
    variables, with this run's CONFORMANCE_DIR, run id and report path, and pending corpus
    entries (crash entries included) kept inside the run's state folder, never in the
    repository's corpus; PYTHONPATH starts with the repository root; `threads` (when given)
    caps torch's intra-op threads (OMP/MKL)."""
    env = {k: v for k, v in base.items() if k not in _SCRUBBED_ENV and not k.startswith(_SCRUBBED_ENV_PREFIXES)}
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
    spec: str, *, profile: str, device: str | None = None, suite: Sequence[str] = (SUITE_PATH,), extra: Sequence[str] = (),
) -> list[str]:
    """The pytest arguments of one run (after `python -m pytest`); `extra` goes last (so it can
    override, e.g. `--maxfail=100` for a kill matrix, or add `--ignore=...`)."""
    args = [*suite, "-x", "-q", "-rfE", "-p", "no:cacheprovider", "-p", PLUGIN, "--no-capture-corpus",
            "--hypothesis-profile", profile, "--kernel", spec]
    if device:
        args += ["--device", device]
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
    run: RunSpec, *, work_dir: Path, profile: str, timeout_s: float, device: str | None = None,
    shrink: bool = False, threads: int | None = None, command: Sequence[str] | None = None,
    suite: Sequence[str] = (SUITE_PATH,), extra: Sequence[str] = (), cwd: Path = REPO_ROOT,
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
    argv = [*(command or (sys.executable, "-m", "pytest")), *suite_args(run.spec, profile=profile, device=device, suite=suite, extra=extra)]
    with log.open("wb") as out:
        out.write(("$ " + shlex.join(argv) + "\n").encode())
        out.flush()
        started = time.time()
        t0 = time.perf_counter()
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
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
    result = judge(
        name=run.name, spec=run.spec, role=run.role, returncode=returncode, timed_out=timed_out, wall_s=wall_s,
        started=started, events=read_events(report), examples=count_examples(state_dir / "runs" / run_id), stdout=stdout,
    )
    result.log = str(log)
    return result


# =============================================================================================
# The whole score.


@dataclass
class Score:
    """A mutation-score run: every result, and what it was run with.

    mutants: results in catalogue order; baseline: the emulated run (None with no baseline);
    wall_s: seconds the whole score took; jobs: runs in parallel; date: ISO local date-time of
    the start; command: how to reproduce it."""

    mutants: list[RunResult]
    baseline: RunResult | None
    profile: str
    jobs: int
    wall_s: float
    date: str
    command: str
    shrink: bool = False

    @property
    def killed(self) -> list[RunResult]:
        return [r for r in self.mutants if r.status == "killed"]

    @property
    def ok(self) -> bool:
        """Every mutant killed and the baseline (when run) passed."""
        return all(r.ok for r in self.mutants) and (self.baseline is None or self.baseline.ok)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def median_kill_s(self) -> float | None:
        """Median seconds to the first failure over killed mutants (None if none killed)."""
        times = [r.first_failure_s if r.first_failure_s is not None else r.wall_s for r in self.killed]
        return statistics.median(times) if times else None

    def median_kill_wall_s(self) -> float | None:
        """Median wall seconds of the killed mutants' runs (start to process exit)."""
        times = [r.wall_s for r in self.killed]
        return statistics.median(times) if times else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "date": self.date,
            "command": self.command,
            "profile": self.profile,
            "jobs": self.jobs,
            "shrink": self.shrink,
            "cpus": os.cpu_count(),
            "wall_s": self.wall_s,
            "killed": len(self.killed),
            "total": len(self.mutants),
            "median_kill_s": self.median_kill_s(),
            "median_kill_wall_s": self.median_kill_wall_s(),
            "ok": self.ok,
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "mutants": [r.to_json() for r in self.mutants],
        }


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _short_test(nodeid: str | None) -> str:
    if not nodeid:
        return "-"
    return nodeid.removeprefix(f"{SUITE_PATH}/")


def table_rows(score: Score) -> list[list[str]]:
    """Rows (header first) of the result table: mutant, result, killed by, examples, first
    failure (s), wall (s)."""
    rows = [["mutant", "result", "killed by", "examples", "first failure (s)", "wall (s)"]]
    for r in score.mutants:
        rows.append([r.name, r.label, _short_test(r.test) if r.status == "killed" else (r.message[:60] or "-"),
                     str(r.examples), _fmt_s(r.first_failure_s), _fmt_s(r.wall_s)])
    if score.baseline is not None:
        b = score.baseline
        rows.append([f"{b.name} (baseline)", b.label, _short_test(b.test) if b.test else f"{b.tests} tests, {b.skipped} skipped",
                     str(b.examples), _fmt_s(b.first_failure_s), _fmt_s(b.wall_s)])
    return rows


def summary_lines(score: Score) -> list[str]:
    """The summary under the table (plain text)."""
    lines = [f"killed {len(score.killed)}/{len(score.mutants)} mutants (profile {score.profile}, jobs {score.jobs}, shrinking {'on' if score.shrink else 'off'})"]
    survivors = [r for r in score.mutants if not r.ok]
    for r in survivors:
        lines.append(f"NOT KILLED: {r.name} ({r.label}): {r.message or 'the whole suite passed'}")
    median, median_wall = score.median_kill_s(), score.median_kill_wall_s()
    if median is not None:
        lines.append(f"median seconds to kill: {median:.1f} to the first failure, {median_wall:.1f} wall (per run, start to exit)")
    if score.baseline is None:
        lines.append("baseline: not run")
    else:
        b = score.baseline
        extra = f"{b.tests} tests, {b.skipped} skipped, {b.examples} examples, {b.wall_s:.1f} s"
        lines.append(f"baseline {b.name}: {b.label} ({extra})" + (f": {b.test} {b.message}" if not b.ok else ""))
    lines.append(f"total wall time: {score.wall_s:.1f} s")
    lines.append("result: " + ("PASS" if score.ok else "FAIL"))
    return lines


def format_table(score: Score) -> str:
    """A plain-text, column-aligned table with its summary."""
    rows = table_rows(score)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    numeric = {3, 4, 5}
    out = []
    for n, row in enumerate(rows):
        cells = [cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out + [""] + summary_lines(score)) + "\n"


def format_markdown(score: Score) -> str:
    """A Markdown table with the command, date and summary."""
    rows = table_rows(score)

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"Mutation score, {score.date}: `{score.command}`", "", line(rows[0]),
           "|---|---|---|---:|---:|---:|"]
    out += [line(r[:2] + [f"`{r[2]}`" if "::" in r[2] else r[2]] + r[3:]) for r in rows[1:]]
    out += [""] + [f"- {s}" for s in summary_lines(score)]
    return "\n".join(out) + "\n"


def progress_line(result: RunResult, done: int, total: int) -> str:
    """One stderr line for a finished run."""
    head = f"[{done}/{total}] {result.label:<18} {result.name}"
    if result.status in ("killed", "false_alarm"):
        return f"{head} by {_short_test(result.test)} after {result.examples} examples, {_fmt_s(result.first_failure_s)} s to the failure, {result.wall_s:.1f} s wall"
    if result.status in ("passed", "survived"):
        return f"{head}: {result.tests} tests, {result.examples} examples, {result.wall_s:.1f} s"
    return f"{head}: {result.message} ({result.wall_s:.1f} s)"


def catalogue_specs() -> dict[str, str]:
    """{name: --kernel spec} of the catalogued mutants, in catalogue order (imports
    conformance.mutants, hence torch)."""
    from conformance.mutants import CATALOGUE

    return {name: mutant.spec for name, mutant in CATALOGUE.items()}


def select_runs(only: Sequence[str] | None, *, baseline: bool = True, specs: dict[str, str] | None = None) -> list[RunSpec]:
    """The runs to make: the baseline first (it is the longest, so it starts first), then the
    selected mutants in catalogue order. KeyError naming the unknown ones for a bad `only`.

    specs: {name: --kernel spec} (default: the catalogue's)."""
    known = dict(specs) if specs is not None else catalogue_specs()
    chosen = list(known)
    if only:
        unknown = [n for n in only if n not in known]
        if unknown:
            raise KeyError(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(known)}")
        chosen = [n for n in known if n in set(only)]
    runs = [RunSpec(BASELINE_KERNEL, BASELINE_KERNEL, "baseline")] if baseline else []
    return runs + [RunSpec(n, known[n], "mutant") for n in chosen]


def run_mutation_score(
    runs: Sequence[RunSpec], *, profile: str = "ci", jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
    device: str | None = None, shrink: bool = False, progress: TextIO | None = None, command: Sequence[str] | None = None,
    suite: Sequence[str] = (SUITE_PATH,), extra: Sequence[str] = (), keep: Path | None = None, command_line: str = "",
    on_result: Callable[[RunResult], None] | None = None,
) -> Score:
    """Run every `runs` entry, `jobs` at a time (default: CPU count), and collect the score.

    Each run works in its own subfolder of a temporary folder (of `keep` when given, which is
    then left in place for inspection). When more than one run goes at a time, each
    subprocess's torch gets one intra-op thread (OMP/MKL_NUM_THREADS, unless already set).
    `progress` gets one line per finished run."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    threads = 1 if jobs > 1 else None
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    root = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="mutation-score-"))
    root.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    results: dict[RunSpec, RunResult] = {}
    t0 = time.perf_counter()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {
                pool.submit(run_one, run, work_dir=root / run.name, profile=profile, timeout_s=timeout_s, device=device,
                            shrink=shrink, threads=threads, command=command, suite=suite, extra=extra): run
                for run in runs
            }
            for future in concurrent.futures.as_completed(futures):
                run = futures[future]
                result = future.result()
                with lock:
                    results[run] = result
                    if progress is not None:
                        print(progress_line(result, len(results), len(runs)), file=progress, flush=True)
                if on_result is not None:
                    on_result(result)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    wall_s = time.perf_counter() - t0
    baseline = next((results[r] for r in runs if r.role == "baseline"), None)
    mutants = [results[r] for r in runs if r.role == "mutant"]
    return Score(mutants=mutants, baseline=baseline, profile=profile, jobs=jobs, wall_s=wall_s, date=date,
                 command=command_line, shrink=shrink)
