"""`python -m benchmarks ROUTINE`: the driver lists and runs every registered routine (each answers
--help); the routines measured on small CPU problems, their comparisons failing where the
implementations disagree, their usage errors one line."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import __main__ as driver
from benchmarks import preconditions

ROOT = Path(__file__).resolve().parents[2]


def test_the_driver_lists_every_routine_and_each_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert driver.main([]) == 0
    listing = capsys.readouterr().out
    for name in driver.ROUTINES:
        assert f"  {name} " in listing
        module = importlib.import_module(f"benchmarks.{name}")
        assert module.__doc__ and callable(module.main)
        try:
            code = driver.main([name, "--help"])
        except SystemExit as done:  # a routine may let argparse exit
            code = int(done.code or 0)
        assert code == 0 and capsys.readouterr().out.startswith("usage: ")
    assert driver.main(["no-such-routine"]) == 2
    assert "unknown routine 'no-such-routine'" in capsys.readouterr().err


def test_the_driver_runs_from_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "routines:" in done.stdout


def test_preconditions_cost_against_a_revision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cost.json"
    args = ["--device", "cpu", "--examples", "2", "--iters", "1", "--against", "HEAD", "--json", str(path)]
    assert preconditions.main(args) == 0
    data = json.loads(path.read_text())
    assert data["identical"] and set(data["summary"]) == {"old", "new"}
    assert len(data["rows"]["new"]) == 3 and all(r["ops"] > 0 for r in data["rows"]["new"])
    assert "identical findings" in capsys.readouterr().out


def test_preconditions_cost_fails_where_the_findings_differ(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    silent = SimpleNamespace(check_call=lambda *a, **k: [])
    monkeypatch.setattr(preconditions, "module_at", lambda rev, path, name: silent)
    assert preconditions.main(["--device", "cpu", "--examples", "2", "--iters", "1", "--against", "X"]) == 1
    captured = capsys.readouterr()
    assert "FINDINGS DIFFER" in captured.out and "findings differ between implementations" in captured.err


def test_a_revision_that_is_not_there_times_this_tree_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert preconditions.main(["--device", "cpu", "--examples", "1", "--iters", "1", "--against", "no-such-revision"]) == 0
    captured = capsys.readouterr()
    assert "--against no-such-revision: not available here" in captured.err and captured.out.startswith("new ")


def test_a_device_that_is_not_there_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert preconditions.main(["--device", "nodevice"]) == 2
    assert "'nodevice' is not usable here" in capsys.readouterr().err


def test_isa_speed_of_one_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import isa

    path = tmp_path / "isa.json"
    assert isa.main(["--only", "4", "--repeat", "1", "--ops", "2", "--json", str(path)]) == 0
    (result,) = json.loads(path.read_text())
    assert result["heads"] == 1 and result["rows"] == [128] and result["instructions"] > 1000 and result["cpu_s"] > 0
    assert len(result["opcodes_cpu_s"]) == 2
    assert "instructions/CPU-s" in capsys.readouterr().out
    assert isa.main(["--only", "9"]) == 2
    assert "problem numbers are 0..5" in capsys.readouterr().err


def test_gather_ways_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import gather

    path = tmp_path / "gather.json"
    args = ["--device", "cpu", "--n-q", "2,4", "--keys", "32", "--cache-rows", "1024", "--iters", "2", "--json", str(path)]
    assert gather.main(args) == 0
    data = json.loads(path.read_text())
    assert [(r["way"], r["n_q"]) for r in data["results"]] == [(w, n) for n in (2, 4) for w in ("bf16", "int32", "int64")]
    assert all(r["same_bits"] and r["median_ms"] > 0 for r in data["results"])
    assert data["results"][0]["bytes_moved"] == 2 * 2 * 32 * 576 * 2
    capsys.readouterr()


def test_gather_names_a_way_whose_bits_differ(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import gather

    monkeypatch.setattr(gather.fastpath, "choose", lambda name, device: "broken")
    monkeypatch.setattr(gather.bf16_key_decode, "launch", lambda cache, idx, keys, variant: keys.zero_())
    assert gather.main(["--device", "cpu", "--n-q", "2", "--keys", "16", "--cache-rows", "256", "--iters", "1"]) == 1
    fused = [line for line in capsys.readouterr().out.splitlines() if line.split()[:2] == ["fused", "2"]]
    assert len(fused) == 1 and fused[0].endswith("False")


SMALL = ["--device", "cpu", "--n-q", "2", "--keys", "32", "--heads", "2", "--cache-rows", "512", "--iters", "1"]


def test_per_call_rows_against_a_revision_with_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import per_call

    path, traces = tmp_path / "per_call.json", tmp_path / "traces"
    args = [*SMALL, "--kernels", "oracle,emulated", "--against", "HEAD", "--profile", "--calls", "1", "--top", "3"]
    assert per_call.main([*args, "--trace-dir", str(traces), "--json", str(path)]) == 0
    rows = {r["kernel"]: r for r in json.loads(path.read_text())["results"]}
    assert set(rows) == {"oracle", "emulated", "emulated@HEAD"}
    assert rows["emulated@HEAD"]["bits"] == "same bits" and rows["emulated"]["ops"] == rows["emulated@HEAD"]["ops"] > 0
    assert rows["oracle"]["syncs"] and any("top by self host time" in line for line in rows["oracle"]["profile"])
    assert sorted(p.name for p in traces.iterdir()) == ["emulated_2.json", "emulated_at_HEAD_2.json", "oracle_2.json"]
    capsys.readouterr()


def test_per_call_peer_rows_through_the_adapter(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """torch-sdpa's adapter runs on the CPU for tests: its bare kernel on a kept state, the
    contract call and a fresh cache, with the ratio to the bare kernel."""
    from benchmarks import per_call

    monkeypatch.setattr(per_call, "runs_on", lambda backend, device: True)
    assert per_call.main([*SMALL, "--kernels", "torch-sdpa"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines()[2:]]
    assert names == ["torch-sdpa:bare-kept", "torch-sdpa", "torch-sdpa:new-cache"]
    adapter_row = next(line for line in out.splitlines() if line.startswith("torch-sdpa "))
    assert float(adapter_row.split()[5]) > 0  # x bare


def test_per_call_names_a_revision_that_differs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from benchmarks import per_call
    from kernel.emulated import gfx950

    def off_by_one(*args: object, **kwargs: object) -> object:
        out, lse = gfx950.run_emulated(*args, **kwargs)  # type: ignore[arg-type]
        return out, torch.nextafter(lse, torch.full_like(lse, float("inf")))

    monkeypatch.setattr(per_call, "module_at", lambda rev, path, name: SimpleNamespace(run_emulated=off_by_one))
    assert per_call.main([*SMALL, "--kernels", "emulated", "--against", "X"]) == 1
    assert "DIFFERS in ['lse']" in capsys.readouterr().out
    monkeypatch.undo()
    assert per_call.main([*SMALL, "--kernels", "emulated", "--against", "no-such-revision"]) == 2
    assert "cannot be loaded" in capsys.readouterr().err


def test_host_work_of_every_adapter_around_stand_ins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every peer through the adapter protocol: a repeated call launches fewer ops than a new batch
    (its index layout kept), no adapter reads device data back."""
    from benchmarks import host_work

    path = tmp_path / "host.json"
    assert host_work.main(["--n-q", "2", "--keys", "64", "--heads", "4", "--cache-rows", "512", "--calls", "2", "--json", str(path)]) == 0
    results = json.loads(path.read_text())
    assert [r["adapter"] for r in results] == list(host_work.ADAPTERS)
    for r in results:
        assert 0 < r["repeated"]["ops"] < r["new-index"]["ops"], r["adapter"]
        assert r["repeated"]["syncs"] == {} and r["repeated"]["host_us"] > 0, r["adapter"]
    capsys.readouterr()
    assert host_work.main(["--adapters", "flashmla,nope"]) == 2
    assert "unknown adapter(s) ['nope']" in capsys.readouterr().err


FAST = ["--device", "cpu", "--n-q", "2", "--keys", "32", "--heads", "2", "--cache-rows", "256", "--iters", "1"]


def test_fast_paths_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a CPU without Triton no variant runs: each is named with why, on = off, the same bits."""
    from benchmarks import fast_paths

    path = tmp_path / "fast.json"
    assert fast_paths.main([*FAST, "--path", "emulated.pv", "--json", str(path)]) == 0
    entry = json.loads(path.read_text())["paths"]["emulated.pv"]
    assert entry["variant"] is None and {c["variant"] for c in entry["self_checks"]} == {"cuda", "dot", "sum"}
    assert all(not c["runs_here"] and c["why"] for c in entry["self_checks"])
    assert [r["bits"] for r in entry["rows"]] == ["same bits"]
    assert "ALL AGREE" in capsys.readouterr().out


def test_fast_paths_names_outputs_that_differ(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A path whose code gives other bits when it is switched off fails the routine (exit 1); the
    oracle's products, checked within rounding, are reported and not failed."""
    import os

    import torch

    from benchmarks import fast_paths

    def flips(name: str):  # type: ignore[no-untyped-def]
        def run(args: tuple[object, ...], hi: bool) -> tuple[torch.Tensor, ...]:
            off = f"{name}=off" in os.environ.get(fast_paths.fastpath.SETTING, "")
            return (torch.full((2,), 1.0 + off),)

        return run

    monkeypatch.setattr(fast_paths, "consumer", flips)
    assert fast_paths.main([*FAST, "--path", "emulated.qk"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS: max |on - off| out 1" in out and "SOME DIFFER" in out
    assert fast_paths.main([*FAST, "--path", "oracle.products"]) == 0
    assert fast_paths.main([*FAST, "--path", "nope"]) == 2
    assert "unknown fast path(s) ['nope']" in capsys.readouterr().err
