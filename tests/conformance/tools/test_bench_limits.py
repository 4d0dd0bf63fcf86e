"""conformance.tools.bench: the machine limits printed beside each measured time, and the peer rows."""

from __future__ import annotations

import math

import torch

from conformance.tools import bench
from kernel import registry


def test_fp64_peak_and_limits_for_an_h200() -> None:
    assert bench.fp64_peak_for_name("NVIDIA H200") == 67e12
    assert bench.fp64_peak_for_name("NVIDIA H100 PCIe") == 51e12
    assert bench.fp64_peak_for_name("cpu") is None
    gather, arith = bench.limits_ms(1024, 2048, 16, 4.8e12, 67e12)
    assert gather is not None and arith is not None
    assert math.isclose(gather, 1024 * 2048 * 656 / 4.8e12 * 1e3)  # 0.287 ms ("about 0.3 ms")
    assert math.isclose(arith, 2 * 16 * 1024 * 2048 * 1088 / 67e12 * 1e3)  # 1.09 ms ("about 1.1 ms")
    assert bench.limits_ms(1, 1, 1, None, None) == (None, None)


def test_default_list_comes_from_the_catalogue_and_every_peer_declares_a_bare_row() -> None:
    assert bench.DEFAULT_KERNELS == ("flashmla", "flashmla-prefill", "torch-sdpa", "emulated", "oracle")
    peers = [name for name in registry.BUILTIN_NAMES if registry.adapter(name) is not None]
    assert peers == ["flashmla", "flashmla-prefill", "torch-sdpa", "sglang-decode", "vllm-decode", "vllm-sparse"]
    ids = {}
    for name in peers:
        bare = registry.adapter(name).declaration.bare  # type: ignore[union-attr]
        assert bare is not None and bare.suffix.startswith(":") and bare.label and bare.note, name
        ids[name] = name + bare.suffix
    assert ids["flashmla"] == "flashmla:h64-kernel" and ids["flashmla-prefill"] == "flashmla-prefill:h64-kernel"
    assert ids["torch-sdpa"] == "torch-sdpa:bare-kernel"


def test_cpu_report_has_limit_fields() -> None:
    if torch.cuda.is_available():
        return
    report = bench.run_bench(["emulated", "oracle"], [1], keys=70, heads=2, iters=1, warmup=0, cache_rows=100, device="cpu")
    assert report["exit_code"] == 0 and report["device"]["peak_fp64_flops_per_s"] is None
    kernels = [r["kernel"] for r in report["results"]]
    assert kernels == ["emulated", "oracle"]
    for r in report["results"]:
        assert r["gather_limit_ms"] is None and r["fp64_limit_ms"] is None and r["x_limit"] is None
    assert "x LIMIT" in bench.render_table(report) and "peak fp64   unknown" in bench.render_table(report)
