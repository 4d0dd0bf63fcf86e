"""Memory layouts of q and out beyond padded row-major, and garbage for unconsumed index entries.

The contract (docs/reference/contract.md) leaves q's row and head strides free (last dim
contiguous) and out's row and head strides free as long as its elements do not overlap. A
recipe's `q_layout` / `out_layout` name the layout, its `q_pad` / `out_pad` the padding added to
each stride beyond its packed value (elements; `width` is 576 for q, 512 for out):

    rows               row-major: head stride width + head pad, row stride H * head stride + row pad
    heads              head-major: row stride width + row pad, head stride n_q * row stride + head pad
    shared_rows        (q only) row stride 0: every row reads the same memory; head stride width + head pad
    shared_heads       (q only) head stride 0: every head of a row reads the same memory; row stride
                       width + row pad
    overlapping_heads  (q only) head stride 64 + head pad (< width): consecutive heads share most of
                       their elements; row stride (H - 1) * head stride + width + row pad

Where elements overlap, the value an element holds is that of the last (row, head) in row-major
order writing it (so every (row, head) reads a full vector drawn from the recipe's q
distribution, except that overlapping heads mix their neighbours' tails). Gaps hold NaN.

`unconsumed` "garbage": every index entry no row consumes (before indptr's first slice, between
slices where the pointer steps back, after the last one) holds, by a hash of its position, one of
-1, -2^31, kv rows, 2^31 - 1 or kv rows + (0..999): values the kernel would fault on or mask if
it read them, and must not read.
"""

from __future__ import annotations

import numpy as np
import torch

from strategies import rng

Q_LAYOUTS = ("rows", "heads", "shared_rows", "shared_heads", "overlapping_heads")
OUT_LAYOUTS = ("rows", "heads")
OVERLAP_HEAD_STRIDE = 64  # overlapping_heads: the head stride before its pad (elements)
UNCONSUMED = ("valid", "garbage")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def strides(layout: str, n_q: int, heads: int, width: int, pad: tuple[int, int]) -> tuple[int, int]:
    """(row stride, head stride) in elements of `layout` (module docstring); ValueError for an
    unknown layout."""
    row_pad, head_pad = pad
    if layout == "rows":
        head = width + head_pad
        return heads * head + row_pad, head
    if layout == "heads":
        row = width + row_pad
        return row, n_q * row + head_pad
    if layout == "shared_rows":
        return 0, width + head_pad
    if layout == "shared_heads":
        return width + row_pad, 0
    if layout == "overlapping_heads":
        head = OVERLAP_HEAD_STRIDE + head_pad
        return (heads - 1) * head + width + row_pad, head
    raise ValueError(f"unknown layout {layout!r}; known: {', '.join(Q_LAYOUTS)}")


def place(values: torch.Tensor, row_stride: int, head_stride: int, fill: float, device: torch.device) -> torch.Tensor:
    """values [n, H, D] stored in a `fill`-filled buffer as a view of strides (row_stride,
    head_stride, 1); where views overlap, the last (row, head) in row-major order wins."""
    n, heads, width = values.shape
    if n * heads * width == 0:
        return torch.full((1,), fill, dtype=values.dtype, device=device).as_strided((n, heads, width), (row_stride, head_stride, 1))
    offsets = (
        torch.arange(n, device=device).view(n, 1, 1) * row_stride
        + torch.arange(heads, device=device).view(1, heads, 1) * head_stride
        + torch.arange(width, device=device).view(1, 1, width)
    ).reshape(-1)
    size = (n - 1) * row_stride + (heads - 1) * head_stride + width  # strides >= 0: the last offset + 1 (no device read)
    # the writer of each element: the largest flat (row, head, d) index mapping to it
    writer = torch.full((size,), -1, dtype=torch.int64, device=device)
    writer.scatter_reduce_(0, offsets, torch.arange(offsets.numel(), device=device), reduce="amax")
    storage = torch.where(writer >= 0, values.reshape(-1)[writer.clamp_min(0)], torch.full((), fill, dtype=values.dtype, device=device))
    return storage.as_strided((n, heads, width), (row_stride, head_stride, 1))


def garbage(seed: int, positions: np.ndarray, kv_rows: int) -> np.ndarray:
    """int64 garbage for the unconsumed index entries at `positions` (int64 numpy, as the index
    side strategies.materialize builds on the host; module docstring): by a draw in 0..4 per
    position, -1, -2^31, kv_rows, 2^31 - 1 or min(kv_rows + a draw in 0..999, 2^31 - 1)."""
    kind, near = rng.host_integers_many(seed, [("garbage", positions, 5), ("garbage_near", positions, 1000)])
    fixed = np.array([-1, INT32_MIN, kv_rows, INT32_MAX], dtype=np.int64)
    return np.where(kind == 4, np.minimum(kv_rows + near, INT32_MAX), fixed[np.minimum(kind, 3)])
