"""kernel.bits: bit-for-bit comparison of tensors (zero signs, NaN payloads, dtypes)."""

import torch

from conformance.tools.bench import call_ms
from kernel.bits import bit_view, same_bits


def test_same_bits_sees_zero_signs_and_nan_payloads() -> None:
    a = torch.tensor([0.0, float("nan"), 1.0], dtype=torch.float64)
    assert same_bits(a, a.clone())
    assert not same_bits(a, torch.tensor([-0.0, float("nan"), 1.0], dtype=torch.float64))
    other_nan = a.clone()
    other_nan.view(torch.int64)[1] ^= 1  # another NaN payload
    assert torch.isnan(other_nan[1]) and not same_bits(a, other_nan)


def test_same_bits_needs_dtype_and_shape() -> None:
    x = torch.zeros(4, dtype=torch.float32)
    assert not same_bits(x, torch.zeros(4, dtype=torch.int32))  # same bytes, other dtype
    assert not same_bits(x, torch.zeros(2, 2, dtype=torch.float32))
    assert same_bits(torch.tensor([True, False]), torch.tensor([True, False]))
    assert bit_view(torch.ones(3, 2, dtype=torch.bfloat16).t()).dtype == torch.int16


def test_call_ms_calls_once_and_is_not_negative() -> None:
    calls = []
    ms = call_ms(lambda: calls.append(1), torch.device("cpu"))
    assert calls == [1] and ms >= 0.0
