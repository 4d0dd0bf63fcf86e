"""conformance.tools.bench: runs on the CPU for the emulated kernel and the oracle with tiny shapes, and
produces a table (stdout), progress (stderr) and a valid JSON report; peak-bandwidth lookup,
timing and argument handling."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch

from conformance.cli import bench as cli_bench
from conformance.cli import main as cli_main
from conformance.tools import bench
from kernel.record import RECORD_BYTES, decode_records

TINY = ["--n-q", "1,3", "--keys", "130", "--heads", "2", "--cache-rows", "300", "--iters", "2", "--warmup", "1", "--device", "cpu"]


def test_bench_cpu_emulated_and_oracle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bench.json"
    code = cli_main(["bench", "--kernel", "emulated", "--kernel", "oracle", *TINY, "--json", str(path)])
    out, err = capsys.readouterr()
    assert code == 0
    report = json.loads(path.read_text())
    assert report["tool"] == "conformance bench" and report["schema"] == bench.SCHEMA and report["exit_code"] == 0
    assert report["device"]["timer"] == "perf_counter" and report["device"]["peak_bandwidth_bytes_per_s"] is None
    assert report["config"]["cache_rows"] == 300 and report["config"]["keys"] == 130
    results = report["results"]
    assert [(r["kernel"], r["n_q"]) for r in results] == [("emulated", 1), ("oracle", 1), ("emulated", 3), ("oracle", 3)]
    for r in results:
        assert r["status"] == "ok" and r["heads"] == 2
        assert 1 <= r["iters"] <= 2 and len(r["samples_ms"]) == r["iters"] and r["warmup"] == 1
        assert r["median_ms"] > 0 and r["min_ms"] <= r["median_ms"]
        assert r["bytes_per_call"] == r["n_q"] * 130 * RECORD_BYTES
        assert math.isclose(r["gbps"], r["bytes_per_call"] / (r["median_ms"] * 1e-3) / 1e9, rel_tol=1e-9)
        assert r["pct_peak"] is None
        assert r["flops_per_call"] == 2 * 2 * r["n_q"] * 130 * 1088 and math.isclose(
            r["tflops"], r["flops_per_call"] / (r["median_ms"] * 1e-3) / 1e12, rel_tol=1e-9
        )
    # the table on stdout: header, one line per case, the CPU timer said plainly
    assert "KERNEL" in out and "GB/s" in out and "% PEAK" in out and "TFLOP/s" in out
    assert "perf_counter" in out and "no device events" in out and "peak BW     unknown" in out
    assert sum(line.startswith("emulated") for line in out.splitlines()) == 2
    assert sum(line.startswith("oracle") for line in out.splitlines()) == 2
    # progress on stderr, not stdout
    assert "bench: " in err and "bench: " not in out


def test_bench_default_list_skips_unavailable_flashmla(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only answer")
    code = cli_main(["bench", *TINY, "--n-q", "1", "--kernel", "oracle"])
    assert code == 0
    capsys.readouterr()
    code = cli_main(["bench", *TINY, "--n-q", "1", "--quiet"])  # default list: flashmla, emulated, oracle
    out, err = capsys.readouterr()
    assert code == 0  # an unavailable kernel of the default list is reported, not a failure
    assert "skipped: flashmla: no CUDA device" in out and err == ""
    code = cli_main(["bench", *TINY, "--n-q", "1", "--quiet", "--kernel", "flashmla"])
    assert code == 1  # asked for by name: a failure


def test_bench_reports_a_kernel_that_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.json"
    code = cli_main(
        ["bench", *TINY, "--n-q", "2", "--kernel", f"{__name__}:broken_kernel", "--kernel", "oracle", "--json", str(path), "--quiet"]
    )
    assert code == 1
    results = json.loads(path.read_text())["results"]
    assert results[0]["status"].startswith("error: RuntimeError: boom") and results[0]["median_ms"] is None
    assert results[1]["status"] == "ok"


def broken_kernel(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    raise RuntimeError("boom")


broken_kernel.profile = "exact"  # type: ignore[attr-defined]


def test_cli_bench_registers_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m conformance")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_bench.register(sub)
    args = parser.parse_args(["bench", "--kernel", "oracle", *TINY, "--n-q", "2", "--quiet"])
    assert args.n_q == [2] and args.keys == 130 and args.func is cli_bench.run
    assert args.func(args) == 0
    assert "oracle (float64 reference)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [["--n-q", "0"], ["--n-q", "a,b"], ["--heads", "17"], ["--keys", "-3"], ["--max-seconds", "0"]],
)
def test_bench_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["bench", *argv]) == 2
    assert "error" in capsys.readouterr().err


def test_peak_for_name() -> None:
    assert bench.peak_for_name("NVIDIA H200") == 4.8e12
    assert bench.peak_for_name("NVIDIA H200 NVL") == 4.8e12
    assert bench.peak_for_name("NVIDIA H20") == 4.0e12
    assert bench.peak_for_name("NVIDIA H100 80GB HBM3") == 3.35e12
    assert bench.peak_for_name("NVIDIA H100 PCIe") == 2.0e12
    assert bench.peak_for_name("AMD Instinct MI355X") == 8.0e12
    assert bench.peak_for_name("NVIDIA GeForce RTX 4090") is None


def test_time_calls_budget_and_counts() -> None:
    calls = []
    timing = bench.time_calls(lambda: calls.append(1), torch.device("cpu"), warmup=2, iters=5, max_seconds=10)
    assert len(calls) == 7 and len(timing.samples_ms) == 5 and timing.warmup == 2 and timing.timer == "perf_counter"
    slow = bench.time_calls(lambda: __import__("time").sleep(0.03), torch.device("cpu"), warmup=0, iters=50, max_seconds=0.05)
    assert 1 <= len(slow.samples_ms) < 50  # the per-case budget stops it early, after >= 1 call


def test_build_inputs_shapes_and_records() -> None:
    cache = bench.build_cache(70, "cpu", seed=3, chunk_rows=32)
    assert cache.shape == (70, RECORD_BYTES) and cache.dtype == torch.uint8
    scales = decode_records(cache).scales
    assert bool((scales > 0).all())
    bits = scales.view(torch.int32)
    assert bool(((bits & 0x7FFFFF) == 0).all())  # pow2 writer
    inputs = bench.build_inputs(cache, 4, 9, 3, seed=1)
    assert inputs.q.shape == (4, 3, 576) and inputs.q.dtype == torch.bfloat16
    assert inputs.indices.dtype == torch.int32 and inputs.indices.numel() == 36
    assert int(inputs.indices.min()) >= 0 and int(inputs.indices.max()) < 70
    assert inputs.indptr.tolist() == [0, 9, 18, 27, 36] and inputs.n_q == 4 and inputs.keys == 9
