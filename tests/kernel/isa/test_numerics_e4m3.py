"""f32 -> E4M3 (OCP) rounding of kernel.isa.numerics.f32_to_e4m3 against a brute-force nearest
grid value (ties to the even code), independent of its bit arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from kernel.isa.numerics import E4M3_VALUES, f32_to_e4m3, f32_to_e4m3_arith

GRID = E4M3_VALUES[:0x7F]  # the 127 finite non-negative values, codes 0..0x7E, increasing


def _reference(x: np.ndarray, saturate: bool) -> np.ndarray:
    ax = np.abs(x.astype(np.float64))
    d = np.abs(ax[:, None] - GRID[None, :])
    best = d.min(axis=1, keepdims=True)
    ties = d == best
    code = np.where(ties.sum(axis=1) > 1, np.argmax(ties & (np.arange(127) % 2 == 0), axis=1), np.argmin(d, axis=1))
    over = ax > 464.0  # beyond the midpoint of 448 and the next (NaN) code 480
    code = np.where(over, 0x7E if saturate else 0x7F, code)
    code = np.where(np.isnan(x), 0x7F, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


@pytest.mark.parametrize("saturate", [False, True])
def test_f32_to_e4m3_matches_nearest_even(saturate: bool) -> None:
    rng = np.random.default_rng(1)
    mant = rng.integers(0, 1 << 23, 4000, dtype=np.int64)
    exps = rng.integers(110, 137, 4000, dtype=np.int64)  # 2^-17 .. 2^9: subnormals to overflow
    bits = (rng.integers(0, 2, 4000) << 31) | (exps << 23) | mant
    x = bits.astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, 448, 449, 464, 464.00003, 480, 2**-6, 2**-7, 2**-9, 2**-10, 3 * 2**-11, 1e-30, np.nan], dtype=np.float32)
    x = np.concatenate([x, edges, -edges])
    assert (f32_to_e4m3(x, saturate) == _reference(x, saturate)).all()


def test_f32_to_e4m3_infinities() -> None:
    x = np.array([np.inf, -np.inf], dtype=np.float32)
    assert f32_to_e4m3(x).tolist() == [0x7F, 0xFF]
    assert f32_to_e4m3(x, saturate=True).tolist() == [0x7E, 0xFE]


@pytest.mark.parametrize("saturate", [False, True])
def test_class_table_equals_the_arithmetic_rounding(saturate: bool) -> None:
    """f32_to_e4m3 (one lookup of bits 31..19 and the OR of bits 18..0) gives f32_to_e4m3_arith's
    code for every class with several low-bit patterns (bit 18 alone, bit 0 alone, all, none)
    and for random patterns over the whole f32 range."""
    top = np.arange(1 << 13, dtype=np.uint32) << np.uint32(19)
    low = np.array([0, 1, 0x40000, 0x3FFFF, 0x7FFFF, 0x2A5A5], dtype=np.uint32)
    rng = np.random.default_rng(5)
    bits = np.concatenate([(top[:, None] | low[None, :]).reshape(-1), rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)])
    x = bits.view(np.float32)
    assert (f32_to_e4m3(x, saturate) == f32_to_e4m3_arith(x, saturate)).all()
