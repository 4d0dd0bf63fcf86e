"""Bit-for-bit tensor comparison: floats compared through their integer views, so NaN payloads
and signed zeros count and NaN == NaN where the bits agree (torch.equal alone treats NaN as
unequal and -0.0 as +0.0)."""

from __future__ import annotations

import torch

_INT_OF_SIZE = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def bit_view(t: torch.Tensor) -> torch.Tensor:
    """t's elements as the signed integers (unsigned for 1-byte types) of their width, contiguous."""
    return t.contiguous().view(_INT_OF_SIZE[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bits (NaN payloads and zero signs included). Reads both on the host."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bit_view(a), bit_view(b))
