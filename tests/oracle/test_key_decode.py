"""oracle.key_decode: the probe covers the decode's inputs; the fused kernel's logic (run by
Triton's CPU interpreter where Triton is installed) gives the torch decode's values; the setting
and the device gate keep the torch decode elsewhere.

Under the interpreter NaN products carry numpy's payloads, not the GPU's: values are compared
bit for bit except that NaN only has to meet NaN (on CUDA, self_check requires every bit, NaN
payloads included, before the kernel is used).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kernel import fastpath
from oracle import key_decode, rows
from oracle.reference import reference
from strategies.materialize import materialize
from strategies.recipe import Recipe
from tests.recipes import RAGGED_OFFSET, SCATTERED_INVALID

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


def same_or_both_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0).view(torch.int64), b.masked_fill(nan, 0).view(torch.int64))


def test_probe_covers_every_code_scale_class_and_rope_pattern() -> None:
    flat, slots = fastpath.check_records(torch.device("cpu"))
    codes = flat[:, :512].reshape(-1, 4, 128)
    for g in range(4):
        assert torch.unique(codes[:, g]).numel() == 256
    scales = flat[:, 512:528].contiguous().view(torch.float32)
    for g in range(4):
        column = scales[:, g]
        seen = {(bool(torch.isnan(v)), v.view(torch.int32).item()) for v in column}
        assert len(seen) == len(fastpath.CHECK_SCALES)  # every class in every block
    rope = flat[:, 528:].contiguous().view(torch.int16)
    assert torch.unique(rope).numel() == 1 << 16
    assert bool((slots < 0).any()) and torch.equal(torch.sort(slots[slots >= 0]).values, torch.arange(flat.shape[0]))


def test_torch_path_off_cuda_and_by_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fastpath.SETTING, raising=False)
    assert fastpath.choose(key_decode.FAST_PATH, torch.device("cpu")) is None
    assert fastpath.registered()[key_decode.FAST_PATH].variants == key_decode.VARIANTS  # registered by oracle.rows
    monkeypatch.setenv(fastpath.SETTING, "oracle.key-decode=off")
    assert fastpath.choose(key_decode.FAST_PATH, torch.device("cuda")) is None


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@needs_triton
@pytest.mark.parametrize("variant", ["arith", "table"])
def test_kernel_gives_the_torch_decode_on_the_probe(interpreter: None, variant: str) -> None:
    flat, slots = fastpath.check_records(torch.device("cpu"))
    want = rows._probe_decode(flat, slots)
    got = torch.full_like(want, 1.0)
    key_decode.launch(flat, slots, got, key_decode.Decoder(key_decode.code_table(torch.device("cpu")), variant))
    assert same_or_both_nan(got, want)
    assert torch.equal(got[slots < 0].view(torch.int64), torch.zeros_like(got[slots < 0]).view(torch.int64))  # +0


@needs_triton
@pytest.mark.parametrize(
    "recipe",
    [
        RAGGED_OFFSET,
        SCATTERED_INVALID,
    ],
)
@pytest.mark.parametrize("variant", ["arith", "table"])
def test_reference_through_the_kernel(interpreter: None, monkeypatch: pytest.MonkeyPatch, recipe: Recipe, variant: str) -> None:
    """reference() with the kernel in gather_keys (several chunks) gives the torch decode's results."""
    p = materialize(recipe, "cpu")
    args = p.args
    want = reference(*args, has_invalid=p.has_invalid, key_budget=100)
    choose = fastpath.choose
    monkeypatch.setattr(fastpath, "choose", lambda name, device: variant if name == key_decode.FAST_PATH else choose(name, device))
    got = reference(*args, has_invalid=p.has_invalid, key_budget=100)
    assert same_or_both_nan(got.out, want.out) and same_or_both_nan(got.lse, want.lse)
