"""The mutation score (conformance.mutation, `python -m conformance mutation-score`).

- The recorded kills (conformance.mutation.kills): every catalogued mutant and precision defect
  fails the suite test recorded as its cheapest kill, under the `ci` Hypothesis profile, and
  emulated and every correct variant pass every recorded test (so no kill is a false alarm).
  Each runs in this process (seconds); the full score, the whole suite per kernel, is the CLI
  command `python -m conformance mutation-score`, which says where a kill differs from the record.
- The other tests check the runner's parsing and aggregation against a fake pytest (a small
  script writing the same files the real suite and plugin write): example counting, verdicts,
  timeouts, exit codes, parallel runs, ordering of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.cli import mutation as cli_mutation
from conformance.judging.target import build_target
from conformance.mutation import plugin as mutation_plugin
from conformance.mutation import runner
from conformance.mutation import score as scoring
from conformance.mutation.kills import KILLED_BY, run_suite_test
from conformance.mutation.runner import Examples, PytestEvents, RunSpec, count_examples, read_events
from conformance.mutation.runner import judge_run as judge

REPO = Path(__file__).resolve().parents[3]
SUITE = Path("conformance/suite")

# ---------------------------------------------------------------------------------------------
# A fake `python -m pytest`: behaviour chosen by the --conformance-kernel value's part after ":".

FAKE_PYTEST = textwrap.dedent(
    r"""
    import json, os, sys, time
    args = sys.argv[1:]
    kernel = args[args.index("--conformance-kernel") + 1]
    mode = kernel.split(":")[-1]
    run_dir = os.path.join(os.environ["CONFORMANCE_DIR"], "runs", os.environ["CONFORMANCE_RUN_ID"])
    os.makedirs(run_dir, exist_ok=True)
    report = os.environ["CONFORMANCE_MUTATION_REPORT"]
    leaked = sorted(k for k in os.environ if k.startswith("PYTEST_XDIST_") or k == "PYTEST_ADDOPTS")
    if not os.environ["CONFORMANCE_PENDING_DIR"].startswith(os.environ["CONFORMANCE_DIR"]):
        leaked.append("CONFORMANCE_PENDING_DIR")

    def event(**e):
        with open(report, "a") as f:
            f.write(json.dumps(e) + "\n")

    def example(prop, seed, outcome="pass", modes=(None,)):
        with open(os.path.join(run_dir, "examples-main.jsonl"), "a") as f:
            for mode in modes:
                line = {"property": prop, "kernel": kernel, "outcome": outcome, "recipe": {"seed": seed}, "time": time.time()}
                if mode:
                    line["mode"] = mode
                f.write(json.dumps(line) + "\n")
        time.sleep(0.01)

    def test(nodeid, outcome="passed", message="", when="call"):
        event(event="report", nodeid=nodeid, when=when, outcome=outcome, time=time.time(), duration=0.01, message=message)

    event(event="start", time=time.time(), hypothesis_profile="ci-no-shrink", max_examples=25)
    print("argv " + json.dumps(args))
    print("leaked " + json.dumps(leaked))
    if mode in ("pass", "survive"):
        example("corpus:a", 1, modes=("float64", "exact-steps"))
        test("conformance/suite/test_corpus.py::test_corpus_entry[a]")
        example("differential", 2, modes=("float64", "exact-steps"))
        example("metamorphic_repeat", 3)
        test("conformance/suite/test_differential.py::test_differential")
        event(event="finish", time=time.time(), exitstatus=0, collected=2)
        print("2 passed")
        sys.exit(0)
    if mode == "kill3":  # third example fails, in its second mode line
        example("corpus:a", 1, modes=("float64", "exact-steps"))
        test("conformance/suite/test_corpus.py::test_corpus_entry[a]")
        example("differential", 2, modes=("float64", "exact-steps"))
        with open(os.path.join(run_dir, "examples-main.jsonl"), "a") as f:
            for mode_name, outcome in (("float64", "pass"), ("exact-steps", "fail")):
                f.write(json.dumps({"property": "differential", "outcome": outcome, "recipe": {"seed": 9},"""
    r""" "mode": mode_name, "time": time.time()}) + "\n")
        time.sleep(0.05)
        example("differential", 9, outcome="fail", modes=("float64", "exact-steps"))  # Hypothesis's final replay
        test("conformance/suite/test_differential.py::test_differential", "failed","""
    r""" "AssertionError: kernel output outside the a-priori bound:")
        event(event="finish", time=time.time(), exitstatus=1, collected=5)
        print("FAILED conformance/suite/test_differential.py::test_differential - AssertionError: kernel output outside")
        sys.exit(1)
    if mode == "unrecorded":  # killed by a test that records no example (host validation)
        example("corpus:a", 1, modes=("float64", "exact-steps"))
        example("corpus:b", 2, modes=("float64", "exact-steps"))
        test("conformance/suite/test_host_validation.py::test_bad_input_gets_clear_error[q_2d]", "failed","""
    r""" "AssertionError: q_2d: the error does not name 'q'")
        time.sleep(0.05)
        example("late", 3)  # after the failure: not counted
        sys.exit(1)
    if mode == "stdout-only":  # no plugin report: the short summary is the fallback
        os.remove(report)
        print("FAILED conformance/suite/test_x.py::test_y[1] - AssertionError: boom")
        sys.exit(1)
    if mode == "setup-error":
        test("conformance/suite/test_corpus.py::test_corpus_entry[a]", "failed", "RuntimeError: fixture broke", when="setup")
        event(event="finish", time=time.time(), exitstatus=1, collected=1)
        sys.exit(1)
    if mode == "allskip":
        test("conformance/suite/test_corpus.py::test_corpus_entry[a]", "skipped","""
    r""" "kernel 'x' unavailable: declares no numerics profile", when="setup")
        event(event="finish", time=time.time(), exitstatus=0, collected=1)
        sys.exit(0)
    if mode == "collect-error":
        event(event="collect_error", nodeid="conformance/suite/test_corpus.py", time=time.time(), message="ImportError: no module")
        event(event="finish", time=time.time(), exitstatus=2, collected=0)
        sys.exit(2)
    if mode == "crash":
        print("Fatal Python error: Segmentation fault")
        sys.exit(-11 % 256)
    if mode == "hang":
        example("differential", 1, outcome="fail")
        time.sleep(120)
        sys.exit(0)
    sys.exit(4)
    """
)


@pytest.fixture
def fake_pytest(tmp_path: Path) -> list[str]:
    """The launcher of the fake pytest (replaces `python -m pytest`)."""
    script = tmp_path / "fake_pytest.py"
    script.write_text(FAKE_PYTEST, encoding="utf-8")
    return [sys.executable, str(script)]


def _run(fake: list[str], tmp_path: Path, mode: str, role: str = "mutant", timeout_s: float = 60.0) -> runner.RunResult:
    run = RunSpec(mode, f"fake:{mode}", role)  # type: ignore[arg-type]
    return runner.run_one(run, work_dir=tmp_path / "work" / mode, hypothesis_profile="ci", timeout_s=timeout_s, command=fake)


# ---------------------------------------------------------------------------------------------
# Parsing.


def _write_lines(path: Path, lines: list[dict[str, Any] | str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")


def test_count_examples_merges_modes_and_stops_at_first_failure(tmp_path: Path) -> None:
    def line(prop, seed, t, outcome="pass", mode=None):
        return {
            "property": prop,
            "recipe": {"seed": seed},
            "time": t,
            "outcome": outcome,
            **({"mode": mode} if mode else {}),
        }

    _write_lines(
        tmp_path / "examples-gw0.jsonl",
        [
            line("differential", 1, 10.0, mode="float64"),
            line("differential", 1, 10.1, mode="exact-steps"),  # one example
            line("differential", 1, 10.2, mode="float64"),  # same recipe again (a replay): a new example
            line("metamorphic_repeat", 2, 11.0),
            line("differential", 3, 12.0, mode="float64"),
            line("differential", 3, 12.1, "fail", mode="exact-steps"),
            "not json",
            "[1, 2]",
            line("differential", 3, 13.0, "fail", mode="float64"),
        ],
    )
    _write_lines(tmp_path / "examples-gw1.jsonl", [line("preconditions", 4, 10.5, "observed")])
    ex = count_examples(tmp_path)
    assert ex.records == 8 and ex.bad_lines == 2
    assert ex.total == 6
    assert ex.until_failure == 5  # diff 1, diff 1 replay, preconditions (10.5, other worker), repeat, diff 3
    assert ex.first_failure_time == 12.0 and ex.first_failure_property == "differential"
    assert ex.count_until(11.0) == 4


def test_count_examples_of_a_missing_run_is_empty(tmp_path: Path) -> None:
    ex = count_examples(tmp_path / "absent")
    assert (ex.total, ex.records, ex.until_failure, ex.first_failure_time) == (0, 0, 0, None)


def test_read_events_and_summary_fallback(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    _write_lines(
        path,
        [
            {"event": "start", "time": 1.0, "hypothesis_profile": "ci-no-shrink"},
            {"event": "report", "nodeid": "a::t1", "when": "call", "outcome": "passed", "time": 2.0},
            {"event": "report", "nodeid": "a::t2", "when": "setup", "outcome": "skipped", "time": 2.5, "message": "why"},
            {"event": "report", "nodeid": "a::t3", "when": "call", "outcome": "failed", "time": 3.0, "message": "boom"},
            {"event": "report", "nodeid": "a::t3", "when": "teardown", "outcome": "failed", "time": 3.1, "message": "later"},
            '{"event": "report", "trunc',
            {"event": "finish", "time": 4.0, "exitstatus": 1},
        ],
    )
    ev = read_events(path)
    assert (ev.passed, ev.failed, ev.skipped, ev.exitstatus, ev.hypothesis_profile) == (1, 1, 1, 1, "ci-no-shrink")
    assert ev.first_failure == {"nodeid": "a::t3", "when": "call", "time": 3.0, "message": "boom"}
    assert ev.first_skip == "a::t2: why"
    assert read_events(tmp_path / "none.jsonl") == PytestEvents()
    summary = "x\nFAILED conformance/t.py::test_a[p-1] - AssertionError: a - b\nERROR conformance/t.py::test_b\n"
    assert runner.summary_failures(summary) == [
        ("conformance/t.py::test_a[p-1]", "AssertionError: a - b"),
        ("conformance/t.py::test_b", ""),
    ]


def _judge(
    role: str = "mutant",
    returncode: int | None = 1,
    timed_out: bool = False,
    events: PytestEvents | None = None,
    examples: Examples | None = None,
    stdout: str = "",
) -> runner.RunResult:
    return judge(
        name="m",
        spec="x:m",
        role=role,
        returncode=returncode,
        timed_out=timed_out,
        wall_s=9.0,
        started=100.0,  # type: ignore[arg-type]
        events=events or PytestEvents(),
        examples=examples or Examples(),
        stdout=stdout,
    )


def test_judge_verdicts() -> None:
    failed = PytestEvents(first_failure={"nodeid": "a::t", "when": "call", "time": 105.0, "message": "boom"}, passed=3, failed=1)
    ex = Examples(total=7, records=9, until_failure=4, first_failure_time=103.0, times=[101.0, 102.0, 102.5, 103.0, 104, 104.5, 106])
    r = _judge(events=failed, examples=ex)
    assert (r.status, r.ok, r.test, r.examples, r.first_failure_s, r.first_failure_from, r.tests) == (
        "killed",
        True,
        "a::t",
        4,
        3.0,
        "examples",
        4,
    )
    # the failure left no "fail" example: count the examples recorded before the failing test ended
    r = _judge(events=failed, examples=Examples(total=7, until_failure=7, times=ex.times))
    assert (r.status, r.examples, r.first_failure_s, r.first_failure_from) == ("killed", 6, 5.0, "pytest")
    # a "fail" example recorded after an earlier unrecorded failure does not count as the first one
    r = _judge(events=failed, examples=Examples(total=7, until_failure=7, first_failure_time=106.0, times=ex.times))
    assert (r.examples, r.first_failure_s) == (6, 5.0)
    assert _judge(role="baseline", events=failed).status == "false_alarm"
    assert _judge(role="baseline", returncode=0, events=PytestEvents(passed=5), examples=Examples(total=30)).status == "passed"
    survived = _judge(returncode=0, events=PytestEvents(passed=5), examples=Examples(total=30, until_failure=30))
    assert (survived.status, survived.ok, survived.examples, survived.first_failure_s) == ("survived", False, 30, None)
    skipped = _judge(returncode=0, events=PytestEvents(skipped=3, first_skip="a::t: no profile"))
    assert skipped.status == "error" and "every test was skipped" in skipped.message and "no profile" in skipped.message
    setup = _judge(events=PytestEvents(first_failure={"nodeid": "a::t", "when": "setup", "time": 101.0, "message": "E"}))
    assert setup.status == "error" and setup.message.startswith("error in setup of a::t")
    assert _judge(events=PytestEvents(collect_errors=["x.py: ImportError"])).status == "error"
    crash = _judge(returncode=245, stdout="Fatal Python error: Segmentation fault\n")
    assert crash.status == "error" and "245" in crash.message and "Segmentation" in crash.message
    timeout = _judge(returncode=None, timed_out=True, events=failed, examples=ex)
    assert (timeout.status, timeout.label, timeout.ok) == ("timeout", "survived (timeout)", False)
    assert "3.0 s" in timeout.message  # the failing example seen before the timeout is reported


# ---------------------------------------------------------------------------------------------
# One run through a (fake) subprocess.


def test_run_one_killed_counts_examples_until_the_failure(fake_pytest: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")  # as under `pytest -n auto`: must not leak
    monkeypatch.setenv("PYTEST_ADDOPTS", "-n 2")
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "repo-pending"))
    r = _run(fake_pytest, tmp_path, "kill3")
    assert r.status == "killed" and r.test == "conformance/suite/test_differential.py::test_differential"
    assert r.examples == 3 and r.records == 8 and r.first_failure_from == "examples"
    assert r.first_failure_s is not None and 0 <= r.first_failure_s <= r.wall_s + 1
    assert r.hypothesis_profile == "ci-no-shrink" and r.message.startswith("AssertionError")
    log = Path(r.log).read_text()
    assert "leaked []" in log
    argv = json.loads(next(line for line in log.splitlines() if line.startswith("argv "))[5:])
    for required in ("-x", "--conformance-no-capture", "-p", "no:cacheprovider", "conformance.mutation.plugin"):
        assert required in argv
    assert argv[argv.index("--hypothesis-profile") + 1] == "ci" and argv[argv.index("--conformance-kernel") + 1] == "fake:kill3"


@pytest.mark.parametrize(
    ("mode", "role", "status", "examples"),
    [
        ("survive", "mutant", "survived", 3),
        ("pass", "baseline", "passed", 3),
        ("unrecorded", "mutant", "killed", 2),
        ("stdout-only", "mutant", "killed", 0),
        ("setup-error", "mutant", "error", 0),
        ("allskip", "mutant", "error", 0),
        ("collect-error", "mutant", "error", 0),
        ("crash", "mutant", "error", 0),
    ],
)
def test_run_one_verdicts(fake_pytest: list[str], tmp_path: Path, mode: str, role: str, status: str, examples: int) -> None:
    r = _run(fake_pytest, tmp_path, mode, role)
    assert (r.status, r.examples) == (status, examples), r
    if mode == "stdout-only":
        assert r.test == "conformance/suite/test_x.py::test_y[1]" and r.first_failure_s is None
    if mode == "unrecorded":
        assert r.first_failure_from == "pytest" and "host_validation" in str(r.test)


def test_run_one_timeout_kills_the_run(fake_pytest: list[str], tmp_path: Path) -> None:
    r = _run(fake_pytest, tmp_path, "hang", timeout_s=3.0)  # the fake sleeps 120 s: returning at all means it was killed
    assert (r.status, r.label, r.ok, r.returncode) == ("timeout", "survived (timeout)", False, None)
    assert r.wall_s >= 3.0 and "no verdict within" in r.message


# ---------------------------------------------------------------------------------------------
# The whole score, the CLI and its exit codes.


FAKE_SPECS = {"k1": "fake:kill3", "k2": "fake:unrecorded", "k3": "fake:kill3"}


def test_score_in_parallel_and_its_reports(fake_pytest: list[str], tmp_path: Path) -> None:
    runs = [RunSpec("emulated", "fake:pass", "baseline")] + scoring.select_runs(None, baseline=False, specs=FAKE_SPECS)
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            lines.extend(x for x in text.splitlines() if x)

        def flush(self) -> None:
            pass

    score = scoring.run_mutation_score(runs, jobs=2, command=fake_pytest, progress=Sink(), keep=tmp_path / "keep", command_line="cmd")  # type: ignore[arg-type]
    assert [r.name for r in score.mutants] == ["k1", "k2", "k3"] and score.baseline is not None
    assert score.ok and score.exit_code == 0 and len(score.killed) == 3
    assert len(lines) == 4 and all(x.startswith("[") for x in lines)
    assert score.median_kill_s() is not None
    data = score.to_json()
    assert data["killed"] == 3 and data["total"] == 3 and data["ok"] and data["baseline"]["status"] == "passed"
    assert [m["examples"] for m in data["mutants"]] == [3, 2, 3]
    table, markdown = scoring.format_table(score), scoring.format_markdown(score)
    for text in (table, markdown):
        assert "k2" in text and "test_host_validation.py::test_bad_input_gets_clear_error[q_2d]" in text and "emulated (baseline)" in text
    assert markdown.count("\n|") >= 5
    # a survivor, or a failing baseline, makes the score fail
    score.mutants[1].status = "survived"
    assert not score.ok and score.exit_code == 1 and "NOT KILLED: k2" in scoring.format_table(score)
    score.mutants[1].status = "killed"
    score.baseline.status = "false_alarm"
    assert score.exit_code == 1


def test_select_runs() -> None:
    runs = scoring.select_runs(["k3", "k1"], specs=FAKE_SPECS)
    assert [(r.name, r.role) for r in runs] == [("emulated", "baseline"), ("k1", "mutant"), ("k3", "mutant")]
    with pytest.raises(KeyError, match="unknown mutant.*nope"):
        scoring.select_runs(["nope"], specs=FAKE_SPECS)
    catalogue = scoring.select_runs(None, baseline=False)
    assert len(catalogue) >= 22 and all(r.spec == f"conformance.mutation.catalogue:{r.name}" for r in catalogue)


@pytest.mark.parametrize(("specs", "code"), [(FAKE_SPECS, 0), ({**FAKE_SPECS, "k4": "fake:survive"}, 1), ({"k5": "fake:hang"}, 1)])
def test_cli_exit_codes(
    fake_pytest: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    specs: dict[str, str],
    code: int,
) -> None:
    real = scoring.run_mutation_score
    monkeypatch.setattr(scoring, "catalogue_specs", lambda: dict(specs))
    monkeypatch.setattr(scoring, "run_mutation_score", lambda runs, **kw: real(runs, **{**kw, "command": fake_pytest}))
    monkeypatch.setattr(scoring, "BASELINE_KERNEL", "fake:pass")
    monkeypatch.setattr(scoring, "baseline_specs", lambda: {"emulated": "fake:pass"})
    out_json, out_md = tmp_path / "score.json", tmp_path / "score.md"
    assert cli_mutation.main(["--jobs", "2", "--timeout", "3", "--json", str(out_json), "--markdown", str(out_md)]) == code
    stdout, stderr = capsys.readouterr()
    assert "killed" in stdout and "mutant" in stdout
    assert len([x for x in stderr.splitlines() if x.startswith("[")]) == len(specs) + 1
    data = json.loads(out_json.read_text())
    assert data["ok"] is (code == 0) and data["profile"] == data["hypothesis_profile"] == "ci" and data["jobs"] == 2
    assert "--hypothesis-profile ci" in data["command"]
    assert "mutation-score" in data["command"] and out_md.read_text().startswith("Mutation score")
    if "k5" in specs:
        assert "survived (timeout)" in stdout


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_mutation.main(["--only", "no_such_mutant"]) == 2
    assert "unknown mutant" in capsys.readouterr().err
    assert cli_mutation.main(["--jobs", "0"]) == 2
    assert cli_mutation.main(["--list"]) == 0
    assert "conformance.mutation.catalogue:tail_unmasked" in capsys.readouterr().out
    for empty in ("", ",", " , "):
        assert cli_mutation.main(["--only", empty]) == 2
        assert "names no mutant" in capsys.readouterr().err
    assert cli_mutation.main(["--profile", "ci", "--only", "p_bf16"]) == 2  # --profile is the numerics profile now
    assert "--hypothesis-profile ci" in capsys.readouterr().err
    assert cli_mutation.main(["--json", str(Path.cwd())]) == 2  # a folder
    assert "is a folder" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The plugin: suite order, and what it reports from a real pytest.


def _item(file: str, function: str, param: str | None = None, path: Path | None = None) -> SimpleNamespace:
    callspec = SimpleNamespace(params={"path": path}) if path is not None else None
    name = function + (f"[{param}]" if param else "")
    return SimpleNamespace(path=Path("conformance") / file, function=SimpleNamespace(__name__=function), name=name, callspec=callspec)


def test_order_puts_cheap_corpus_entries_first(tmp_path: Path) -> None:
    def entry(name: str, rows: list[int], heads: int, cache_rows: int = 3000) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"recipe": {"row_lengths": rows, "heads": heads, "cache_rows": cache_rows}}))
        return path

    items = [
        _item("test_metamorphic.py", "test_two_runs_bit_identical"),
        _item("test_zzz_new.py", "test_new_property"),
        _item("test_differential.py", "test_differential"),
        _item("test_corpus.py", "test_corpus_entry", "big", entry("big", [4000], 4)),
        _item("test_corpus.py", "test_corpus_entry", "huge", entry("huge", [10], 1, cache_rows=7_000_000)),
        _item("test_corpus.py", "test_corpus_entry", "tiny", entry("tiny", [1, -3], 4)),
        _item("test_gfx950_agreement.py", "test_documented_scale_behaviour"),
        _item("test_gfx950_agreement.py", "test_bit_exact_agreement_with_emulated"),
        _item("test_host_validation.py", "test_bad_input_gets_clear_error", "q_2d"),
    ]
    mutation_plugin.order_items(items)
    assert [i.name for i in items] == [
        "test_corpus_entry[tiny]",
        "test_corpus_entry[big]",
        "test_corpus_entry[huge]",
        "test_bad_input_gets_clear_error[q_2d]",
        "test_bit_exact_agreement_with_emulated",
        "test_documented_scale_behaviour",
        "test_differential",
        "test_two_runs_bit_identical",
        "test_new_property",
    ]


def test_plugin_in_a_real_pytest(tmp_path: Path) -> None:
    """Loaded with -p, the plugin drops shrinking, reports the first failure and the profile."""
    (tmp_path / "conftest.py").write_text(
        "from hypothesis import settings\nsettings.register_profile('tiny', max_examples=50, derandomize=True, database=None)\n"
    )
    (tmp_path / "test_fake.py").write_text(
        textwrap.dedent(
            """
        from hypothesis import given, strategies as st

        CALLS = []

        def test_a():
            pass

        @given(st.integers(0, 10**6))
        def test_b(x):
            CALLS.append(x)
            assert x < 1000, f"calls so far {len(CALLS)}"
        """
        )
    )
    calls = {}
    for shrink in (False, True):
        report = tmp_path / f"events-{shrink}.jsonl"
        env = runner.child_env(dict(os.environ), state_dir=tmp_path / "state", run_id="r", report=report, shrink=shrink, threads=1)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "test_fake.py",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                runner.PLUGIN,
                "--hypothesis-profile",
                "tiny",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        ev = read_events(report)
        assert ev.hypothesis_profile == ("tiny" if shrink else "tiny-no-shrink") and ev.passed == 1 and ev.exitstatus == 1
        assert ev.first_failure is not None and ev.first_failure["nodeid"] == "test_fake.py::test_b"
        calls[shrink] = int(ev.first_failure["message"].split("calls so far ")[1].split()[0].rstrip("'\""))
    # without shrinking Hypothesis stops at the first failing example (and replays it once)
    assert calls[False] < calls[True]


# ---------------------------------------------------------------------------------------------
# The recorded kills, checked in this process.


@pytest.fixture()
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """State, run records and pending entries under tmp_path; one torch thread (small shapes)."""
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_RUN_ID", "kills")
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_recorded_kills_cover_the_score() -> None:
    from conformance.records.corpus import CORPUS_DIR

    assert list(KILLED_BY) == list(scoring.catalogue_specs()), "every mutant of the score needs a recorded kill, in catalogue order"
    for name, nodeid in KILLED_BY.items():
        file_name, _, test = nodeid.partition("::")
        assert (REPO / SUITE / file_name).is_file(), (name, nodeid)
        if "[" in test:
            assert (CORPUS_DIR / f"{test.split('[')[1].rstrip(']')}.json").is_file(), (name, nodeid)
    with pytest.raises(ValueError, match="only corpus entries and Hypothesis properties"):
        run_suite_test("test_host_validation.py::test_bad_input_gets_clear_error[q_2d]", None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(KILLED_BY))
def test_every_mutant_is_killed_by_its_recorded_test(name: str, sandbox: None) -> None:
    """A verdict (an AssertionError), not a crash or a skip, of the very test the suite runs."""
    result = run_suite_test(KILLED_BY[name], build_target(scoring.catalogue_specs()[name], device="cpu"))
    assert result.outcome == "failed", f"{name} not killed by {KILLED_BY[name]}: {result.outcome} {result.message}"


@pytest.mark.parametrize("name", list(scoring.baseline_specs()))
def test_correct_kernels_pass_every_recorded_kill(name: str, sandbox: None) -> None:
    """emulated and each correct variant of other numerics pass (or are outside: skip) every test
    recorded as a kill, so no recorded kill is a false alarm."""
    target = build_target(scoring.baseline_specs()[name], device="cpu")
    results = [run_suite_test(nodeid, target) for nodeid in sorted(set(KILLED_BY.values()))]
    wrong = [f"{r.nodeid}: {r.outcome} {r.message}" for r in results if r.outcome not in ("passed", "skipped")]
    assert not wrong, f"{name} fails recorded kills:\n" + "\n".join(wrong)
    assert sum(r.outcome == "passed" for r in results) >= len(results) - 1
