"""Exact powers of two as float64 tensors, built from their bits; finiteness in two ops.

`torch.pow(2.0, k)` is not exact on every device: CUDA's double pow returned 2^k off by one ulp
(seen on an H200 with torch 2.11: a bf16 rounding built on it gave 0.41601562499999994 for
0.416015625), which breaks every step that must be exact (Q's hi + lo split, bf16 roundings).
"""

from __future__ import annotations

import torch

from kernel.fp8 import pow2

__all__ = ["finite", "not_finite", "pow2"]


def finite(x: torch.Tensor) -> torch.Tensor:
    """torch.isfinite(x) (bool) for a floating x in 2 ops, not 4: x - x is +0 for a finite x, NaN
    for infinities and NaN."""
    return torch.sub(x, x) == 0


def not_finite(x: torch.Tensor) -> torch.Tensor:
    """~torch.isfinite(x) (bool) for a floating x in 2 ops, not 5 (finite's rule)."""
    return torch.sub(x, x) != 0
