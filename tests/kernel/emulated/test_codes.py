"""The emulated kernel's fast Q fp8 codes (emulated.e4m3_codes) against kernel.fp8.encode_e4m3
(saturate=False), the rule written with integer operations: every exponent and sign, each
rounding boundary of the e4m3 grid (normal and subnormal), and random f32 bit patterns."""

from __future__ import annotations

import torch

from kernel.emulated.gfx950 import e4m3_codes
from kernel.fp8 import encode_e4m3


def _f32(bits: torch.Tensor) -> torch.Tensor:
    return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)


def boundary_patterns() -> torch.Tensor:
    """f32 bit patterns (int64) of every exponent field and sign with mantissas at and around
    every power-of-two step of the low bits (where a round to 3 bits, or to a subnormal's fewer,
    can tie or carry), under each of the 8 top-3-bit mantissas."""
    steps = [0, 1, 2]
    for k in range(1, 23):
        steps += [(1 << k) - 1, 1 << k, (1 << k) + 1, 3 << (k - 1)]
    low = torch.tensor(steps, dtype=torch.int64)
    mantissas = ((torch.arange(8, dtype=torch.int64) << 20)[:, None] + low[None, :]).flatten() & 0x7FFFFF
    bits = ((torch.arange(256, dtype=torch.int64) << 23)[:, None] | mantissas[None, :]).flatten()
    return torch.cat([bits, bits | (1 << 31)])


def test_codes_at_every_rounding_boundary() -> None:
    x = _f32(boundary_patterns())
    assert torch.equal(e4m3_codes(x), encode_e4m3(x, saturate=False))


def test_codes_of_random_bit_patterns_and_specials() -> None:
    g = torch.Generator().manual_seed(21)
    bits = torch.randint(0, 2**32, (1 << 20,), generator=g, dtype=torch.int64)
    specials = torch.tensor([float("inf"), -float("inf"), float("nan"), -float("nan"), 448.0, 464.0, 464.0001, -465.0, 0.0, -0.0, 2.0**-10])
    x = torch.cat([_f32(bits), specials])
    assert torch.equal(e4m3_codes(x), encode_e4m3(x, saturate=False))
