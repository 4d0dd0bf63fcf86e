"""Exact powers of two as float64 tensors, built from their bits.

`torch.pow(2.0, k)` is not exact on every device: CUDA's double pow returned 2^k off by one ulp
(seen on an H200 with torch 2.11: a bf16 rounding built on it gave 0.41601562499999994 for
0.416015625), which breaks every step that must be exact (Q's hi + lo split, bf16 roundings).
"""

from __future__ import annotations

from kernel.fp8 import pow2

__all__ = ["pow2"]
