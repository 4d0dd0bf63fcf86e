"""kernel.peers.bf16_key_decode: the fused gather-and-decode gives the torch path's bf16 keys
(run by Triton's CPU interpreter where Triton is installed, on the device where CUDA is), and the
switch and the device gate keep the torch path elsewhere (the torch-sdpa adapter's bits through
either path: tests/kernel/peers/test_dequant_cache.py).

Under the interpreter NaN results carry numpy's payloads, not the GPU's: keys are compared bit
for bit except that NaN only has to meet NaN (on CUDA self_check requires every bit before the
kernel is used, and the CUDA tests below compare every bit).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kernel import fastpath
from kernel.peers import bf16_key_decode as bkd
from kernel.peers.keys import dequantise_bf16

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def same_or_both_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0).view(torch.int16), b.masked_fill(nan, 0).view(torch.int16))


def test_torch_decode_is_the_gathered_dequantisation_with_masked_slots_zero() -> None:
    flat, slots = fastpath.check_records(torch.device("cpu"))
    got = bkd.torch_decode(flat, slots)
    live = slots >= 0
    assert torch.equal(got[live].view(torch.int16), dequantise_bf16(flat[slots[live]]).view(torch.int16))
    assert torch.equal(got[~live].view(torch.int16), torch.zeros(int((~live).sum()), 576, dtype=torch.int16))


def test_gates_off_cuda_and_by_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fastpath.SETTING, raising=False)
    assert fastpath.choose(bkd.FAST_PATH, torch.device("cpu")) is None
    assert bkd.FAST_PATH == "peers.bf16-keys" and fastpath.registered()[bkd.FAST_PATH].variants == bkd.VARIANTS
    monkeypatch.setenv(fastpath.SETTING, "peers.bf16-keys=off")
    assert fastpath.choose(bkd.FAST_PATH, torch.device("cuda")) is None


def test_usable_names_the_layouts_it_decodes() -> None:
    flat = torch.zeros(4, 656, dtype=torch.uint8)
    assert bkd.usable(flat)
    assert not bkd.usable(flat[:0])  # no rows: the torch path's zero record
    assert not bkd.usable(flat[:, :655])
    assert not bkd.usable(torch.zeros(4 * 656 + 1, dtype=torch.uint8)[1:].view(4, 656))  # 1 byte off 16
    assert not bkd.usable(flat.view(torch.int16))


def test_launch_rejects_an_unknown_variant() -> None:
    flat, slots = fastpath.check_records(torch.device("cpu"))
    with pytest.raises(ValueError, match="variant"):
        bkd.launch(flat, slots, torch.empty(slots.numel(), 576, dtype=torch.bfloat16), "table")


@needs_triton
@pytest.mark.parametrize("variant", bkd.VARIANTS)
def test_kernel_gives_the_torch_decode_on_the_probe(monkeypatch: pytest.MonkeyPatch, variant: str) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    flat, slots = fastpath.check_records(torch.device("cpu"))
    want = bkd.torch_decode(flat, slots)
    got = torch.full_like(want, 1.0)
    bkd.launch(flat, slots, got, variant)
    if variant == "cvt":
        # the interpreter widens the NaN codes 0x7F / 0xFF to finite values (a GPU's conversion
        # gives NaN: self_check there): held to the torch path everywhere else
        codes = flat[slots.clamp_min(0), :512]
        nan_code = torch.zeros_like(got, dtype=torch.bool)
        nan_code[:, :512] = ((codes & 0x7F) == 0x7F) & (slots >= 0).view(-1, 1)
        assert 0 < int(nan_code.sum()) < nan_code.numel() // 100
        got, want = got.masked_fill(nan_code, 0), want.masked_fill(nan_code, 0)
    assert same_or_both_nan(got, want)
    masked = got[slots < 0]
    assert torch.equal(masked.view(torch.int16), torch.zeros_like(masked.view(torch.int16)))  # +0


@needs_cuda
@needs_triton
@pytest.mark.parametrize("variant", bkd.VARIANTS)
def test_self_check_on_the_device(variant: str) -> None:
    """Every bit of the probe on this GPU, per variant (where one fails, available() skips it)."""
    assert bkd.self_check(torch.device("cuda"), variant)
