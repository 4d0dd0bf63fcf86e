"""What the peer adapters share: index layouts, head padding, output mapping, kept state.

- CSR -> fixed-width rows (`csr_to_padded`): row q's entries indices[indptr[q] : indptr[q+1]]
  (a negative length is empty) left-aligned in a row of width W and padded with -1. W is found
  without a host sync when the stream is short (`sync_free_width`: no row of a well-formed stream
  holds more entries than the stream, so W = round_up(len(indices)) when that is at most
  SYNC_FREE_TOPK = 4096 keys); otherwise W is the longest row rounded up, one host sync.
- Kept between calls, as a serving engine keeps them: index layouts per index tensors
  (`LayoutCache`, `kept_index`), the zero-padded q buffer per call shape (`PaddedQ`, `kept_padded_q`).
- Heads (`pad_heads`, `PaddedQ`): q copied into a zero buffer of the heads a kernel takes.
- softmax_scale <= 0 for kernels that need a positive one (`effective_scale`), lse +inf -> -inf
  (`map_lse`).
- Launches whose element offsets stay below 2^31 (`int32_row_chunks`).
- The output's tail: a copy into the caller's `out=` (`copy_out`); H = 1 run as 2 heads for the
  kernels that need two (`pad_single_head`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from kernel.engines import int32_chunks
from kernel.record import HEAD_DIM, LATENT_DIM

KEY_BLOCK = 64  # the default row multiple of csr_to_padded (FlashMLA's key block)
MASKED = -1  # the only index value FlashMLA masks
SYNC_FREE_TOPK = 4096  # streams up to this many entries are padded without reading row lengths
LAYOUTS_KEPT = 8  # index layouts a backend keeps (two entries per index tensors: slots, kernel indices)
T = TypeVar("T")


@dataclass(frozen=True)
class PaddedRows:
    """Fixed-width index rows for FlashMLA.

    indices: int32 [n_q, width] contiguous; row q holds its CSR entries left-aligned, then -1;
    lengths: int64 [n_q] the CSR row lengths (negative clamped to 0);
    width: keys per row, a positive multiple of `multiple`.
    """

    indices: torch.Tensor
    lengths: torch.Tensor
    width: int


def round_up(value: int, multiple: int) -> int:
    """The smallest positive multiple of `multiple` that is >= value (at least `multiple`)."""
    return max(multiple, -(-value // multiple) * multiple)


def sync_free_width(n_indices: int, multiple: int, limit: int = SYNC_FREE_TOPK) -> int | None:
    """A padded width known without reading device data, or None when the stream is too long.

    No row of a well-formed stream holds more than n_indices entries (a row reaching past the
    stream is broken, and csr_to_padded masks positions outside the buffer anyway), so
    round_up(n_indices, multiple) covers every row. Used only while it is <= `limit` keys,
    beyond which padding every row to the stream length would cost more than one host sync.
    """
    width = round_up(n_indices, multiple)
    return width if width <= max(limit, multiple) else None


def csr_to_padded(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    *,
    has_invalid: bool,
    multiple: int = KEY_BLOCK,
    width: int | None = None,
) -> PaddedRows:
    """The CSR stream as fixed-width rows padded with -1 (vectorised).

    indices: int32 1-D; indptr: int [n_q + 1]. Row q takes indices[indptr[q] : indptr[q + 1]]
    (negative length: empty). Width: `width` when given (a multiple of `multiple` that the
    caller knows covers every row, e.g. sync_free_width; entries past it are dropped), else
    max(multiple, ceil(max_len / multiple) * multiple), one host sync for max_len.
    With has_invalid every entry < 0 becomes -1; without it entries are copied unchanged.
    Positions outside the index buffer (a broken stream) become -1 rather than faulting.
    """
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    if width is not None and (width < 1 or width % multiple):
        raise ValueError(f"width must be a positive multiple of {multiple}, got {width}")
    device = indices.device
    n_idx = indices.numel()
    n_q = indptr.numel() - 1
    # int32 arithmetic unless a position could leave int32 (host-known from the sizes).
    wide = n_idx + (width or 0) >= 2**31 - 1 or width is None
    ptr = indptr.to(device=device, dtype=torch.int64 if wide else torch.int32)
    start, end = ptr[:-1], ptr[1:]
    lengths = (end - start).clamp_min(0)
    if width is None:
        max_len = int(lengths.max()) if n_q else 0
        width = round_up(max_len, multiple)
        if n_idx + width < 2**31 - 1:
            start, end = start.to(torch.int32), end.to(torch.int32)
    positions = start.unsqueeze(1) + torch.arange(width, device=device, dtype=start.dtype)
    clamped = positions.clamp(0, max(n_idx - 1, 0))
    inside = (clamped == positions) & (positions < end.unsqueeze(1))
    if n_idx:
        padded = torch.where(inside, indices.reshape(-1)[clamped], MASKED)
    else:
        padded = torch.full(positions.shape, MASKED, dtype=torch.int32, device=device)
    if has_invalid:
        padded.clamp_min_(MASKED)  # every entry < 0 becomes -1 (entries are integers)
    return PaddedRows(indices=padded.to(torch.int32).contiguous(), lengths=lengths.to(torch.int64), width=width)


class LayoutCache:
    """Index layouts (padded rows and what is derived from them) kept while a caller passes the
    same index tensors again, as a serving engine calls every layer of a decoding step with one
    batch's indices: the layout is a function of the index stream alone, so it is built once.

    A hit needs the very tensor objects `indices` and `indptr` (held here, so their memory cannot
    be reused by another tensor while cached), unchanged since (torch's version counter, which
    every in-place write through the tensor or a view of it bumps), and the same parameters. At
    most `capacity` layouts are kept (oldest dropped first). Fresh tensors (every fuzz example)
    always build a new layout."""

    def __init__(self, capacity: int = 4) -> None:
        self.capacity = capacity
        self._entries: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor, Any]] = {}

    def get(self, indices: torch.Tensor, indptr: torch.Tensor, params: tuple[Any, ...], build: Any) -> Any:
        """The cached layout for (indices, indptr, params), else build() (then cached)."""
        key = (id(indices), indices._version, id(indptr), indptr._version, params)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is indices and hit[1] is indptr:
            return hit[2]
        value = build()
        if len(self._entries) >= self.capacity:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (indices, indptr, value)
        return value


def pad_heads(q: torch.Tensor, heads_to: int, *, sign: float = 1.0) -> torch.Tensor:
    """q bf16 [n_q, H, 576] (any row/head strides) -> contiguous bf16 [n_q, 1, heads_to, 576].

    Heads H.. are zero. sign -1 negates q (exact in bf16), 0 leaves the whole buffer zero.
    """
    n_q, heads, width = q.shape
    if heads > heads_to:
        raise ValueError(f"cannot pad {heads} heads to {heads_to}")
    buf = torch.zeros(n_q, 1, heads_to, width, dtype=q.dtype, device=q.device)
    if sign != 0:
        _write_heads(buf[:, 0, :heads], q, sign)
    return buf


def _write_heads(dst: torch.Tensor, q: torch.Tensor, sign: float) -> None:
    """dst := q, -q (sign < 0) or 0 (sign 0), in place; negation is exact in bf16."""
    if sign > 0:
        dst.copy_(q)
    elif sign < 0:
        dst.copy_(q).neg_()
    else:
        dst.zero_()


class PaddedQ:
    """One kept zero-padded q buffer, bf16 [n_q, 1, H_pad, 576], reused while calls come with the
    same (n_q, H, H_pad, device, dtype): heads H.. are zeroed when it is made and never written,
    heads < H take each call's q (negated for a negative scale, zero for scale 0) in one copy.
    The previous call's kernel has read the buffer before the next copy runs (one stream, in
    order); a padded head cannot change a kept head's output anyway (each head attends with its
    own q row only). Not for calls on several streams at once (they would share the buffer)."""

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._buffer: torch.Tensor | None = None
        self._kept: torch.Tensor | None = None

    def get(self, q: torch.Tensor, heads_to: int, sign: float) -> torch.Tensor:
        """q padded to `heads_to` heads as pad_heads(q, heads_to, sign=sign) gives it (the same bits)."""
        n_q, heads, width = q.shape
        key = (n_q, heads, heads_to, width, q.device, q.dtype)
        if self._buffer is None or self._kept is None or self._key != key:
            self._buffer = self._kept = None  # the old buffer freed before the new one is made
            self._buffer = pad_heads(q, heads_to, sign=sign)
            self._kept, self._key = self._buffer[:, 0, :heads], key
            return self._buffer
        _write_heads(self._kept, q, sign)
        return self._buffer


def kept_padded_q(padded_q: PaddedQ | None, q: torch.Tensor, heads_to: int, sign: float) -> torch.Tensor:
    """q padded to `heads_to` heads, bf16 [n_q, 1, heads_to, 576]: in the kept buffer `padded_q`
    (PaddedQ.get), None: a fresh one (pad_heads); the same bits either way."""
    return pad_heads(q, heads_to, sign=sign) if padded_q is None else padded_q.get(q, heads_to, sign)


def map_lse(lse_raw: torch.Tensor, n_q: int, heads: int) -> torch.Tensor:
    """FlashMLA's lse ([n_q, 1, H_pad] or [n_q, H_pad, 1]) -> a new contiguous f32 [n_q, heads],
    +inf -> -inf, every other value (NaN and -inf included) unchanged: one elementwise op."""
    lse = lse_raw.reshape(n_q, -1)[:, :heads].to(torch.float32)
    return torch.nan_to_num(lse, nan=float("nan"), posinf=float("-inf"), neginf=float("-inf"))


def effective_scale(softmax_scale: float) -> tuple[float, float]:
    """(sign applied to q, scale passed to FlashMLA > 0) giving the same scores exactly."""
    scale = float(softmax_scale)
    if scale > 0:
        return 1.0, scale
    if scale < 0:
        return -1.0, -scale
    return 0.0, 1.0


def kept_index(
    layouts: LayoutCache | None, indices: torch.Tensor, indptr: torch.Tensor, params: tuple[Any, ...], build: Callable[[], T]
) -> T:
    """build(), a function of (indices, indptr, params) alone, kept in `layouts` per index
    tensors (kernel.peers.plumbing.LayoutCache: the same tensors, unchanged); None: built."""
    return build() if layouts is None else layouts.get(indices, indptr, params, build)


def int32_row_chunks(n_q: int, width: int, row_elements: int = HEAD_DIM) -> list[tuple[int, int]]:
    """Query-row ranges [start, stop) whose slot buffer keeps every element offset below 2^31:
    the Triton kernels form (slot * 576 + d) in int32, so one launch addresses fewer than
    2^31 / 576 = 3,728,270 key rows (host-known sizes, no sync)."""
    return int32_chunks(n_q, width * row_elements)


def copy_out(got: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The call's output: `got` copied into the caller's `out=` (any strides), which is returned,
    or, without one, `got` itself when contiguous, else a contiguous copy."""
    if out is not None:
        out.copy_(got)
        return out
    return got.contiguous()


def pad_single_head(q: torch.Tensor, out: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_run, o) for a kernel that needs at least 2 query heads (grouped MLA kernels dispatch
    another kernel for one head): H = 1 runs as 2 heads with a zero second head, whose output
    row of o is sliced off later; o bf16 [n_q, max(H, 2), 512] is `out` itself when given and
    no head was added, else a new buffer."""
    n_q, heads = q.shape[0], q.shape[1]
    run_heads = max(heads, 2)
    q_run = q if run_heads == heads else torch.cat([q, torch.zeros_like(q)], dim=1)
    if out is not None and run_heads == heads:
        o = out
    else:
        o = torch.empty(n_q, run_heads, LATENT_DIM, dtype=torch.bfloat16, device=q.device)
    return q_run, o


__all__ = [
    "KEY_BLOCK",
    "LAYOUTS_KEPT",
    "MASKED",
    "SYNC_FREE_TOPK",
    "LayoutCache",
    "PaddedQ",
    "PaddedRows",
    "copy_out",
    "csr_to_padded",
    "effective_scale",
    "int32_row_chunks",
    "kept_index",
    "kept_padded_q",
    "map_lse",
    "pad_heads",
    "pad_single_head",
    "round_up",
    "sync_free_width",
]
