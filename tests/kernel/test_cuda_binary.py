"""kernel.cuda_binary: nvcc found or named clearly missing, compile errors reported with nvcc's
words, cubins cached by content, the project's CUDA sources build for every architecture their
gates admit (run where nvcc exists; CPU machines cannot launch them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from kernel import cuda_binary
from kernel.emulated import pv_cuda as emulated_pv_cuda
from kernel.emulated import qk_cuda as emulated_qk_cuda
from oracle import dmma_products

# every CUDA source of the project: (module, its kernels)
SOURCES = {
    "oracle.dmma_products": (dmma_products.SOURCE, (b"oracle_scores", b"oracle_weighted")),
    "kernel.emulated.qk_cuda": (emulated_qk_cuda.SOURCE, (b"emulated_qk_scores",)),
    "kernel.emulated.pv_cuda": (emulated_pv_cuda.SOURCE, (b"emulated_pv_advance",)),
}

needs_nvcc = pytest.mark.skipif(cuda_binary.nvcc_path() is None, reason="no nvcc on this machine")


def test_no_nvcc_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NVCC", str(tmp_path / "missing-nvcc"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cuda_binary.nvcc_path() is None
    with pytest.raises(cuda_binary.CudaBuildError, match="no nvcc"):
        cuda_binary.compile_cubin('extern "C" __global__ void k() {}', "sm_90")
    assert not dmma_products.supported(torch.device("cpu"))


def test_a_cpu_device_is_refused() -> None:
    with pytest.raises(cuda_binary.CudaBuildError, match="need a CUDA device"):
        cuda_binary.load(dmma_products.SOURCE, torch.device("cpu"))


@needs_nvcc
def test_compile_error_carries_nvccs_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CONFORMANCE_CUDA_CACHE", str(tmp_path))
    with pytest.raises(cuda_binary.CudaBuildError, match=r"nvcc exited \d+ for sm_90: .*undefined_name"):
        cuda_binary.compile_cubin('extern "C" __global__ void k(int* x) { x[0] = undefined_name; }', "sm_90")
    assert list(tmp_path.iterdir()) == []  # nothing cached from a failed build


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("module", sorted(SOURCES))
def test_the_kernels_build_and_are_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, arch: str, module: str) -> None:
    source, names = SOURCES[module]
    monkeypatch.setenv("CONFORMANCE_CUDA_CACHE", str(tmp_path))
    image = cuda_binary.compile_cubin(source, arch)
    assert image[:4] == b"\x7fELF"
    (kept,) = tmp_path.glob("*.cubin")
    assert kept.read_bytes() == image
    stamp = os.stat(kept).st_mtime_ns
    assert cuda_binary.compile_cubin(source, arch) == image  # from the cache
    assert os.stat(kept).st_mtime_ns == stamp
    for name in names:
        assert name in image


@needs_nvcc
def test_an_unwritable_cache_only_costs_a_rebuild(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CONFORMANCE_CUDA_CACHE", str(blocker / "cubin"))
    assert cuda_binary.compile_cubin(dmma_products.SOURCE, "sm_90")[:4] == b"\x7fELF"
