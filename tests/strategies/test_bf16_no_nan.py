"""kernel.fp8.round_f32_to_bf16_no_nan (materialize's rounding of its finite values) against
round_f32_to_bf16, bit for bit, on every f32 without NaN at the rounding's edges."""

from __future__ import annotations

import pytest
import torch

from kernel.fp8 import round_f32_to_bf16, round_f32_to_bf16_no_nan


def _patterns_at_rounding_edges(seed: int) -> torch.Tensor:
    """Every f32 (sign, exponent, top 7 mantissa bits) with its low 16 bits at the rounding's
    edges (0, 1, just below / at / above half, all ones) and 4 random patterns; NaNs left out."""
    top = torch.arange(1 << 16, dtype=torch.int64) << 16
    edges = torch.tensor([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF], dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    low = torch.cat((edges.expand(top.numel(), -1), torch.randint(0, 1 << 16, (top.numel(), 4), generator=gen)), dim=1)
    bits = (top.unsqueeze(1) | low).flatten()
    x = torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32).view(torch.float32)
    return x[~torch.isnan(x)]


def test_no_nan_rounding_is_round_f32_to_bf16_without_nan() -> None:
    x = _patterns_at_rounding_edges(5)
    assert x.numel() > 700_000
    assert torch.isinf(x).sum() == 2  # both infinities are among the patterns
    assert torch.equal(round_f32_to_bf16_no_nan(x).view(torch.int16), round_f32_to_bf16(x).view(torch.int16))


def test_no_nan_rounding_refuses_other_dtypes() -> None:
    with pytest.raises(TypeError, match="float32"):
        round_f32_to_bf16_no_nan(torch.zeros(3, dtype=torch.float64))
