"""Exact powers of two as float64 tensors, built from their bits.

`torch.pow(2.0, k)` is not exact on every device: CUDA's double pow returned 2^k off by one ulp
(seen on an H200 with torch 2.11: a bf16 rounding built on it gave 0.41601562499999994 for
0.416015625), which breaks every step that must be exact (Q's hi + lo split, bf16 roundings).
"""

from __future__ import annotations

import torch


def pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k (f64, same device and shape) for integer k in [-1074, 1023], exact on every device."""
    k = k.to(torch.int64)
    normal = ((k.clamp(-1022, 1023) + 1023) << 52).view(torch.float64)
    subnormal = (torch.ones_like(k) << (k.clamp(-1074, -1023) + 1074)).view(torch.float64)
    return torch.where(k >= -1022, normal, subnormal)
