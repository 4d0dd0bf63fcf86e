"""The run report: aggregation across worker files, strict JSON, Markdown, the optional PNG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.records import crashes
from conformance.records import report as rpt

RECIPE_A = {"seed": 1, "n_q": 1, "heads": 2, "row_lengths": [5], "cache_rows": 64}
RECIPE_B = {"seed": 2, "n_q": 2, "heads": 1, "row_lengths": [3, 0], "cache_rows": 64}
RECIPE_C = {"seed": 3, "n_q": 1, "heads": 1, "row_lengths": [9], "cache_rows": 64, "writer": "raw"}


def _line(
    prop: str, outcome: str, recipe: dict[str, Any], *, mode: str | None = None, out: Any = None, lse: Any = None, **extra: Any
) -> str:
    data = {
        "property": prop,
        "kernel": "k:x",
        "outcome": outcome,
        "recipe": recipe,
        "out_ratio": out,
        "lse_ratio": lse,
        "time": 1.0,
        **extra,
    }
    if mode:
        data["mode"] = mode
    return json.dumps(data)  # Python's json writes Infinity / NaN, as conformance.judging.harness.record does


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"non-strict JSON literal {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "20260101-000000-1"
    run.mkdir(parents=True)
    gw0 = [
        _line("differential", "pass", RECIPE_A, mode="exact-steps", out=0.5, lse=0.01),
        _line("differential", "pass", RECIPE_A, mode="float64", out=0.7, lse=0.02),
        _line(
            "differential",
            "fail",
            RECIPE_B,
            mode="exact-steps",
            out=float("inf"),
            lse=float("nan"),
            kind="wrong result",
            subject="out outside the bound",
        ),
        _line("differential", "pass", RECIPE_B, mode="float64", out=0.9, lse=0.0),
        _line("metamorphic_permute", "pass", RECIPE_A),
        _line("corpus:edge-one", "pass", RECIPE_A, mode="exact-steps", out=0.25, lse=0.0),
        _line("corpus:edge-one", "pass", RECIPE_A, mode="float64", out=0.25, lse=0.0),
    ]
    gw1 = [
        _line("differential", "pass", RECIPE_A, mode="exact-steps", out=0.3, lse=0.5),  # the same recipe again: another example
        _line("differential", "pass", RECIPE_A, mode="float64", out=0.3, lse=0.5),
        _line("preconditions", "observed", RECIPE_C, observed={"kinds": ["scale_not_pow2"], "behaviour": "returned", "non_finite_out": 0}),
        _line(
            "preconditions",
            "observed",
            RECIPE_C,
            observed={"kinds": ["scale_not_pow2"], "behaviour": "returned with 3 non-finite outputs", "non_finite_out": 3},
        ),
        _line("corpus:edge-two", "raised", RECIPE_C, observed={"kinds": ["index_out_of_range"], "behaviour": "raised IndexError: boom"}),
        '{"property": "differential", "kernel": "k:x", "outc',  # a worker killed mid-write
    ]
    (run / "examples-gw0.jsonl").write_text("\n".join(gw0) + "\n", encoding="utf-8")
    (run / "examples-gw1.jsonl").write_text("\n".join(gw1) + "\n", encoding="utf-8")
    failure = {
        "nodeid": "conformance/suite/test_differential.py::test_differential",
        "kernel": "k:x",
        "property": "differential",
        "caught": "wrong result: out outside the bound (out err/bound 7 under the coarsest rounding model, 9 under the declared profile "
        "'gfx950', exact-steps mode)\nkernel output outside the a-priori bound:\n[exact-steps] 3 out elements exceed the bound",
        "entry": "/somewhere/pending/abc.json",
        "time": 2.0,
    }
    (run / "failures-gw0.jsonl").write_text(json.dumps(failure) + "\n", encoding="utf-8")
    crash = {
        "run": run.name,
        "worker": "gw1",
        "entry": "/somewhere/pending/def.json",
        "kernel": "k:x",
        "property": "differential",
        "caught": "process died during the kernel call (xdist worker gw1 went down: Not properly terminated)",
        "new": True,
    }
    recovered = {**crash, "run": "19990101-000000-7", "origin_run": "19990101-000000-7", "entry": "/somewhere/pending/ghi.json"}
    (run / "crashes.jsonl").write_text(json.dumps(crash) + "\n" + json.dumps(recovered) + "\n", encoding="utf-8")
    (run / "session.json").write_text(
        json.dumps({"pid": 1, "kind": "pytest", "started": 1.0, "finished": 2.0, "exitstatus": 1}), encoding="utf-8"
    )
    return run


def test_aggregates_worker_files_into_strict_json(run_dir: Path) -> None:
    files = rpt.write_report(run_dir, plot=False)
    data = _strict(files.json_path.read_text(encoding="utf-8"))
    assert data == _strict(json.dumps(files.report))
    k = data["kernels"]["k:x"]
    props = k["properties"]
    assert props["differential"]["examples"] == 3  # two modes of one call count once; the same recipe on gw1 is another call
    assert props["differential"]["outcomes"] == {"fail": 1, "pass": 2}
    assert props["metamorphic_permute"]["examples"] == 1
    assert props["corpus"]["examples"] == 2 and props["corpus"]["corpus_entries"] == 2
    assert props["preconditions"]["outcomes"] == {"observed": 2}
    assert data["examples"] == 8 and data["failing_examples"] == 1
    # the largest ratio per output and mode, inf encoded as a string, NaN never written
    assert k["largest_ratio"]["out"]["exact-steps"]["ratio"] == "inf"
    assert k["largest_ratio"]["out"]["float64"]["ratio"] == 0.9
    assert k["largest_ratio"]["lse"]["exact-steps"]["ratio"] == 0.5
    assert k["largest_ratio"]["out"]["exact-steps"]["recipe"]["seed"] == 2
    out_es = props["differential"]["ratios"]["out"]["exact-steps"]
    assert out_es["max"] == "inf" and out_es["infinite"] == 1 and out_es["over_bound"] == 1 and out_es["examples"] == 3
    assert any('string "inf"' in note for note in data["notes"])
    # precondition behaviour, grouped by the kinds violated
    pre = {(p["property"], tuple(p["kinds"])): p for p in k["preconditions"]}
    assert pre[("preconditions", ("scale_not_pow2",))]["behaviours"] == {"returned": 1, "returned with N non-finite outputs": 1}
    assert pre[("preconditions", ("scale_not_pow2",))]["non_finite_out_max"] == 3
    assert pre[("corpus", ("index_out_of_range",))]["behaviours"] == {"raised IndexError: boom": 1}
    assert data["failures"][0]["entry"] == "/somewhere/pending/abc.json"
    assert [c["entry"] for c in data["crashes"]] == ["/somewhere/pending/def.json"]
    assert [c["origin_run"] for c in data["recovered_crashes"]] == ["19990101-000000-7"]
    assert data["unreadable_lines"] == ["examples-gw1.jsonl:6"]
    assert data["status"] == "crashes"
    # failures by kind and by group: the failing test and the failing example of one bug are one group
    findings = data["findings"]
    assert findings["by_kind"] == {
        "crash": {"groups": 1, "tests": 0, "crashes": 1, "examples": 0},
        "wrong result": {"groups": 1, "tests": 1, "crashes": 0, "examples": 1},
    }
    first, second = findings["groups"]
    assert (first["kind"], first["subject"], first["crashes"]) == ("crash", "the process running the kernel died", 1)
    assert (second["kind"], second["subject"], second["tests"], second["examples"]) == (
        "wrong result",
        "out outside the bound",
        ["conformance/suite/test_differential.py::test_differential"],
        1,
    )
    assert "under the coarsest rounding model" in second["detail"]
    assert k["failure_kinds"] == {"wrong result": 1}
    assert data["failures"][0]["finding"]["kind"] == "wrong result"


def test_markdown_names_everything(run_dir: Path) -> None:
    files = rpt.write_report(run_dir, plot=False)
    md = files.md_path.read_text(encoding="utf-8")
    assert md.startswith(f"# Conformance run {run_dir.name}")
    assert "| differential | 3 | 1 fail, 2 pass | inf (exact-steps); 0.9 (float64) |" in md
    assert "| corpus (2 entries) | 2 |" in md
    assert "| out | exact-steps | inf | differential | fail |" in md
    assert "| preconditions | scale_not_pow2 | 2 | returned (x1); returned with N non-finite outputs (x1) | 3 |" in md
    assert "`conformance/suite/test_differential.py::test_differential`" in md and "`/somewhere/pending/abc.json`" in md
    assert "xdist worker gw1 went down" in md and "`/somewhere/pending/def.json`" in md
    assert "run 19990101-000000-7" in md
    assert "1 unreadable line(s) skipped: examples-gw1.jsonl:6" in md
    assert rpt.summary_line(files).startswith(
        "conformance report: crashes, 8 examples, 1 failing, 1 crashes (failing tests by kind: crash 1, wrong result 1)"
    )
    assert "| wrong result | yes | 1 | 1 | 0 | 1 |" in md
    assert "**wrong result: out outside the bound**: 1 failing test(s), 1 failing example(s)" in md
    assert "**crash: the process running the kernel died**: 1 crash(es)" in md
    assert "- crash: process died during the kernel call" in md
    assert "## Not judged" in md and "None recorded." in md


def test_report_files_are_readable_by_others(run_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    old = os.umask(0o022)
    try:
        files = rpt.write_report(run_dir)
    finally:
        os.umask(old)
    for path in (files.json_path, files.md_path, files.png_path):
        assert path is not None and path.stat().st_mode & 0o777 == 0o644, path


def test_not_judged_tests_are_listed_apart_and_are_not_failures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    crashes.mark_session_start(run, kind="pytest")
    crashes.mark_session_finish(run, exitstatus=0)
    (run / "examples-gw0.jsonl").write_text(_line("differential", "pass", RECIPE_A, mode="exact-steps", out=0.5, lse=0.0) + "\n")
    not_judged = {
        "nodeid": "conformance/suite/test_differential.py::test_differential_beyond_4gib",
        "kernel": "k:x",
        "reason": "25 x the recipe is too large for this machine's memory",
        "time": 3.0,
    }
    (run / "not-judged-gw1.jsonl").write_text(json.dumps(not_judged) + "\n")
    files = rpt.write_report(run, plot=False)
    report = files.report
    assert report["status"] == rpt.NOT_JUDGED == "not judged"
    assert report["failing_examples"] == 0 and report["failures"] == [] and report["findings"]["groups"] == []
    assert [n["nodeid"] for n in report["not_judged"]] == [not_judged["nodeid"]]
    assert any("judged no example" in reason for reason in report["status_reasons"])
    md = files.md_path.read_text(encoding="utf-8")
    assert "## Not judged" in md and "too large for this machine's memory" in md and "test_differential_beyond_4gib" in md
    assert "## Failures\n\nNone." in md
    assert "1 tests not judged" in rpt.summary_line(files)
    # a folder holding only not-judged lines is a run folder
    only = tmp_path / "only"
    only.mkdir()
    (only / "not-judged-main.jsonl").write_text(json.dumps(not_judged) + "\n")
    assert rpt.is_run_folder(only)


def test_a_failure_without_a_finding_is_a_suite_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    line = {"nodeid": "t.py::test_x", "kernel": "k:x", "property": "p", "caught": "KeyError: 'x'", "entry": "/e.json", "time": 1.0}
    (run / "failures-main.jsonl").write_text(json.dumps(line) + "\n")
    groups = rpt.write_report(run, plot=False).report["findings"]["groups"]
    assert [(g["kind"], g["subject"], g["detail"]) for g in groups] == [("suite error", "a failure without a finding", "KeyError: 'x'")]


def test_png_with_matplotlib(run_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    files = rpt.write_report(run_dir)
    assert files.png_path is not None and files.png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "report.png" in files.md_path.read_text(encoding="utf-8")


def test_png_of_a_failing_run_keeps_its_axis(tmp_path: Path) -> None:
    """Ratios of 1e290, inf and NaN (a far wrong result) go to the overflow and non-finite bins: the
    figure has the size of any run's with as many panels."""
    pytest.importorskip("matplotlib")
    import matplotlib.image

    sizes = []
    for worst in (0.5, 1e290):
        run = tmp_path / f"run-{worst:g}"
        run.mkdir()
        lines = [_line("differential", "pass", RECIPE_A, mode="exact-steps", out=0.5, lse=1e-3)]
        lines += [_line("differential", "fail", RECIPE_B, mode="exact-steps", out=value, lse=worst) for value in (worst, float("inf"), 3.0)]
        (run / "examples-main.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        files = rpt.write_report(run)
        assert files.png_path is not None
        sizes.append(matplotlib.image.imread(files.png_path).shape)
    assert sizes[0] == sizes[1]


def test_without_matplotlib_the_report_says_so(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    files = rpt.write_report(run_dir)
    assert files.png_path is None and not (run_dir / "report.png").exists()
    assert "matplotlib is not installed" in files.report["plot"]["note"]
    assert "matplotlib is not installed" in files.md_path.read_text(encoding="utf-8")


def test_cli_report(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path))
    assert main(["report", "--no-plot"]) == 1  # the last run (the only one) had crashes
    out = capsys.readouterr().out
    assert f"# Conformance run {run_dir.name}" in out and "report.json" in out
    assert main(["report", run_dir.name, "--json", "--no-plot"]) == 1
    assert _strict(capsys.readouterr().out)["run"] == run_dir.name
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "nope: no such run folder" in err and "Traceback" not in err
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "empty"))
    assert main(["report"]) == 2
    assert "no run with recorded examples" in capsys.readouterr().err


def test_clean_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    crashes.mark_session_start(run, kind="pytest")
    crashes.mark_session_finish(run, exitstatus=0)
    (run / "examples-main.jsonl").write_text(
        _line("differential", "pass", RECIPE_A, mode="exact-steps", out=0.0, lse=0.0) + "\n", encoding="utf-8"
    )
    files = rpt.write_report(run, plot=False)
    assert files.report["status"] == "clean" and files.report["examples"] == 1
    assert "## Failures\n\nNone." in files.md_path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Unfinished, failed and non-run folders are never "clean"

REPO = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path) -> dict[str, str]:
    import os

    from conformance.durability.state import scrubbed_env

    env = scrubbed_env(dict(os.environ))
    env.update(
        CONFORMANCE_DIR=str(tmp_path / "state"),
        CONFORMANCE_PENDING_DIR=str(tmp_path / "pending"),
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    )
    return env


def _report(run: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance", "report", str(run), "--no-plot"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_a_run_killed_by_sigkill_is_unfinished(tmp_path: Path) -> None:
    """A session that marked its start, recorded a passing example and was SIGKILLed."""
    run = tmp_path / "state" / "runs" / "killed"
    script = (
        f"import os, signal\nfrom pathlib import Path\nfrom conformance.records import crashes\nrun = Path({str(run)!r})\n"
        "run.mkdir(parents=True)\ncrashes.mark_session_start(run, kind='pytest')\n"
        "(run / 'examples-gw0.jsonl').write_text("
        f"{_line('differential', 'pass', RECIPE_A, mode='exact-steps', out=0.1, lse=0.0)!r} + '\\n')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=_env(tmp_path), timeout=60, check=False)
    assert proc.returncode == -9
    result = _report(run, tmp_path)
    assert result.returncode == 1, result.stderr
    assert "status: **unfinished**" in result.stdout and "never finished" in result.stdout
    assert "status unfinished" in result.stderr
    assert _strict((run / "report.json").read_text(encoding="utf-8"))["status"] == "unfinished"


def test_a_run_still_going_is_running(tmp_path: Path) -> None:
    run = tmp_path / "live"
    run.mkdir()
    crashes.mark_session_start(run, kind="fuzz")
    session = dict(crashes.read_session(run) or {}, pid=os.getppid())  # owned by another live process of this host
    (run / crashes.SESSION_FILE).write_text(json.dumps(session), encoding="utf-8")
    (run / "examples-main.jsonl").write_text(_line("differential", "pass", RECIPE_A) + "\n", encoding="utf-8")
    report = rpt.write_report(run, plot=False).report
    assert report["status"] == "running" and "still running" in report["status_reasons"][0]


def test_a_folder_without_session_marker_is_not_clean(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "examples-main.jsonl").write_text(_line("differential", "pass", RECIPE_A) + "\n", encoding="utf-8")
    report = rpt.write_report(run, plot=False).report
    assert report["status"] == "unfinished" and "no session.json" in report["status_reasons"][0]


def test_a_pytest_run_that_exited_1_is_failed(tmp_path: Path) -> None:
    """A real pytest session (the plugin marks it) whose examples all passed but a test failed
    without a saved recipe: pytest exits 1, the report says failed and exits 1."""
    (tmp_path / "test_fails.py").write_text(
        "from conformance.durability.state import run_dir, worker_id\n"
        "def test_records_a_pass():\n"
        "    (run_dir() / f'examples-{worker_id()}.jsonl').write_text("
        f"{_line('differential', 'pass', RECIPE_A, out=0.1, lse=0.0)!r} + '\\n')\n"
        "def test_fails():\n    assert False\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--conformance-kernel",
            "emulated",
            "test_fails.py",
        ],  # a suite session
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    runs = [p for p in (tmp_path / "state" / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, proc.stdout
    assert "conformance report: failed" in proc.stdout  # the session's own summary line
    result = _report(runs[0], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "status: **failed**" in result.stdout and "exited with status 1 (tests failed)" in result.stdout


def test_an_unrelated_folder_is_refused_and_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello\n", encoding="utf-8")
    assert main(["report", str(folder), "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "not a run folder" in err and "nothing written" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    with pytest.raises(rpt.NotARunFolder):
        rpt.write_report(folder)
