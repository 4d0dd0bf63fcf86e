"""`python -m benchmarks campaign`: the processes of one kernel on one device merged into one row,
the same kernel on another device (the GPU's processes and the host's CPU processes of one
campaign) in a row of its own; a real campaign of two processes on the CPU; the time limit's
SIGINT and SIGKILL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import campaign as ct

ROOT = Path(__file__).resolve().parents[2]


def _summary(device: str, examples: int, rate: float, cpu_s: float, hit: dict[str, int]) -> dict[str, Any]:
    return {
        "kernel": "emulated",
        "device": device,
        "seconds": 100,
        "examples": examples,
        "examples_per_s": rate,
        "cpu_s": cpu_s,
        "failures": 0,
        "per_property": {"differential": {"examples": examples, "examples_per_s": rate}},
        "features": {"rows": {"counts": hit}},
    }


def test_rows_per_kernel_and_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for n, (device, examples, rate, hit) in enumerate(
        [("cuda", 1000, 10.0, {"a": 3, "b": 0}), ("cuda", 800, 8.0, {"a": 0, "b": 1}), ("cpu", 300, 3.0, {"a": 1, "b": 0})]
    ):
        path = tmp_path / f"s{n}.json"
        path.write_text(json.dumps(_summary(device, examples, rate, 100.0, hit)))
        paths.append(str(path))
    assert ct.main(["--table", *paths, "--markdown"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| emulated")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in rows]
    assert [c[:6] for c in cells] == [
        ["emulated", "cuda", "2", "100", "1800", "18.00"],  # two processes merged: rates summed, any process's hit counts
        ["emulated", "cpu", "1", "100", "300", "3.00"],
    ]
    assert cells[0][-1] == "2/2" and cells[1][-1] == "1/2"
    assert cells[0][-3] == "9.00"  # examples per CPU second: 1800 / 200


def test_unreadable_summaries_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    other = tmp_path / "other.json"
    other.write_text("[1]")
    assert ct.main(["--table", str(bad), str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: unreadable" in err and f"{other}: not a fuzz summary" in err


def test_a_campaign_of_two_processes_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    assert ct.main(["--device", "cpu", "--procs", "2", "--seconds", "3", "--hypothesis-profile", "ci", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    env = json.loads((out / "campaign-env.json").read_text())
    assert env["processes"] == {"emulated-1": "cpu", "emulated-2": "cpu"} and env["mps"] == "off: not requested"
    summaries = [json.loads((out / f"fuzz-emulated-{n}.json").read_text()) for n in (1, 2)]
    assert all(s["kernel"] == "emulated" and s["device"] == "cpu" for s in summaries)
    (merged,) = json.loads((out / "campaigns.json").read_text())
    assert merged["processes"] == 2 and merged["examples"] == sum(s["examples"] for s in summaries) > 0
    assert merged["examples_per_s"] == pytest.approx(sum(s["examples_per_s"] for s in summaries))
    row = next(line for line in text.splitlines() if line.startswith("emulated  cpu"))
    assert row.split()[2] == "2" and (out / "campaigns.md").read_text().startswith("| kernel | device | procs")


def test_the_time_limit_interrupts_then_kills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ct, "KILL_S", 0.5)
    # started as launch() starts them (SIGINT's default action, whatever this process inherited)
    polite = ct.Process("a", "a", "cpu", tmp_path, subprocess.Popen(["sleep", "30"], preexec_fn=ct.default_sigint))
    stubborn = ct.Process(
        "b", "b", "cpu", tmp_path, subprocess.Popen(["bash", "-c", 'trap "" INT; sleep 30'], preexec_fn=ct.default_sigint)
    )
    ct.wait_all([polite, stubborn], 0.5)
    assert polite.popen is not None and polite.popen.returncode == -2  # SIGINT
    assert stubborn.popen is not None and stubborn.popen.returncode == -9  # SIGKILL after KILL_S


def test_a_fuzz_process_gets_the_default_sigint_where_the_caller_ignores_it(tmp_path: Path) -> None:
    script = (
        "import signal, subprocess, sys; from benchmarks import campaign as ct; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "child = subprocess.Popen(['sleep', '30'], preexec_fn=ct.default_sigint); child.send_signal(signal.SIGINT); "
        "sys.exit(0 if child.wait(timeout=20) == -signal.SIGINT else 1)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_processes_go_round_robin_over_the_gpus(tmp_path: Path) -> None:
    args = ct.parser().parse_args(["--kernels", "emulated,flashmla", "--procs", "2", "--procs-of", "flashmla=3", "--cpu-procs", "1"])
    args.procs_of, args.out = dict(args.procs_of), tmp_path
    procs = ct.plan(args, ["0", "1"], args.procs[0])
    assert [(p.label, p.device) for p in procs] == [
        ("emulated-1", "0"),
        ("emulated-2", "1"),
        ("flashmla-1", "0"),
        ("flashmla-2", "1"),
        ("flashmla-3", "0"),
        ("emulated-cpu-1", "cpu"),
    ]


def test_several_process_counts_run_in_turn_with_a_scaling_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--procs 1,2: one campaign per count in DIR/procs-N, each with its utilisation, then the
    scaling rows (the processes stand in for fuzz: each writes a summary of 10 examples/s where
    fuzz writes its own; a real campaign's processes are the test above)."""

    def launch(proc: ct.Process, args: Any, extra_env: dict[str, str], folder: Path | None = None) -> None:
        summary = proc.state / "runs" / "r" / "fuzz-summary.json"
        summary.parent.mkdir(parents=True)
        summary.write_text(json.dumps(_summary("cpu", 20, 10.0, 2.0, {"a": 1})))
        proc.popen = subprocess.Popen(["true"])

    monkeypatch.setattr(ct, "launch", launch)
    out = tmp_path / "results"
    assert ct.main(["--device", "cpu", "--procs", "1,2", "--seconds", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for count in (1, 2):
        folder = out / f"procs-{count}"
        env = json.loads((folder / "campaign-env.json").read_text())
        assert len(env["processes"]) == count
        usage = env["utilisation"]
        assert usage["host_busy"] is None or 0.0 <= usage["host_busy"] <= 1.0
        assert usage["gpu_busy_percent"] == {}
        (merged,) = json.loads((folder / "campaigns.json").read_text())
        assert merged["processes"] == count and merged["examples"] == 20 * count
        assert "utilisation over" in (folder / "campaigns.txt").read_text()
    scaling = json.loads((out / "scaling.json").read_text())
    assert [(r["procs"], r["examples_per_s"], r["per_process"]) for r in scaling] == [(1, 10.0, 10.0), (2, 20.0, 10.0)]
    lines = (out / "scaling.txt").read_text().splitlines()
    assert lines[0].startswith("procs  examples/s  per process") and [line.split()[:3] for line in lines[1:]] == [
        ["1", "10.00", "10.00"],
        ["2", "20.00", "10.00"],
    ]
    assert "procs  examples/s" in text and not (out / "campaigns.json").exists()


def test_several_process_counts_are_not_taken_with_procs_of(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ct.main(["--device", "cpu", "--procs", "1,2", "--procs-of", "emulated=3", "--out", str(tmp_path)]) == 2
    assert "--procs-of is not taken with it" in capsys.readouterr().err
    assert ct.main(["--device", "cpu", "--procs", "2,1,2", "--out", str(tmp_path)]) == 2
    assert "--procs lists 2 more than once" in capsys.readouterr().err


def _split(command: list[str]) -> tuple[list[str], list[str]]:
    """A launched command's runner (what comes before the fuzz arguments) and its fuzz arguments."""
    at = command.index("--kernel")
    return command[1:at], command[at:]


def test_stages_puts_each_kernels_first_process_under_the_stage_timers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--stages: the first process of each kernel runs `benchmarks campaign_stages --timers --` with
    the very arguments its fuzz command would have; the others, and every process without the
    option, run `conformance fuzz`."""
    started: list[list[str]] = []
    monkeypatch.setattr(ct.subprocess, "Popen", lambda command, **kwargs: started.append(command))
    fuzz = ["-m", "conformance", "fuzz"]
    for option in ([], ["--stages"]):
        started.clear()
        args = ct.parser().parse_args(["--kernels", "emulated,flashmla", "--procs", "2", "--out", str(tmp_path), *option])
        args.procs_of = {}
        for proc in ct.plan(args, ["0"], 2):
            ct.launch(proc, args, {})
        runners, fuzz_args = zip(*map(_split, started), strict=True)
        assert [a[:2] for a in fuzz_args] == [["--kernel", "emulated"]] * 2 + [["--kernel", "flashmla"]] * 2
        assert fuzz_args[0][2:] == fuzz_args[1][2:] == fuzz_args[2][2:] == fuzz_args[3][2:]
        if option:
            timed = ["-m", "benchmarks", "campaign_stages", "--out"]
            assert runners[0] == [*timed, str(tmp_path / "stages-emulated-1"), "--timers", "--"]
            assert runners[2] == [*timed, str(tmp_path / "stages-flashmla-1"), "--timers", "--"]
            assert runners[1] == runners[3] == fuzz
        else:
            assert all(runner == fuzz for runner in runners)
