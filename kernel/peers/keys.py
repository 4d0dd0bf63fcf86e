"""bf16 keys from the records: the shared input step of the adapters to kernels that take dense
or bf16 KV (FlashMLA's sparse prefill, PyTorch's SDPA, sglang's and vLLM's Triton kernels).

`gather_rows` turns a contract call's CSR stream into fixed-width rows of KV slots (no host sync
for short streams, see kernel.peers.plumbing.sync_free_width) and reads only the records
that a row consumes; `dequantise_bf16` turns records into bf16 K = [latent (512), rope (64)].

Dequantisation follows FlashMLA's own V3.2 convention (legacy SM90 decode):
latent = bf16(bf16(code) * bf16(scale)). For power-of-two scales (the pow2 and pow2-floor
writers) every step is exact, so K equals the record's value; for a raw (non-power-of-two) scale
the scale is rounded to bf16 and the product to bf16 (a precondition violation the suite reports,
the same as for the `flashmla` backend).

Keys by slot table (slot_keys, for the Triton peers): the kernels address a bf16 buffer of keys
through a slot table. Kept: the whole cache dequantised once and kept while the same cache tensor
comes back unchanged (kernel.peers.dequant_cache, with the engine's own reader where it has one),
addressed by the rows' own cache rows, as a serving engine's bf16 cache is. Per slot (the cache
not kept, or too large for the kernels' int32 offsets): each row's slots gathered from the
records and dequantised to bf16 [n_q * W, 576] (W: the padded row width), as the engines' own
gather / upconvert steps do before their bf16 kernels (sglang's dequantize_k_cache_paged, vLLM's
cp_gather_and_upconvert_fp8_kv_cache). Either way an attended slot reads the same bf16 key.
A slot's key is valid when its entry is >= 0 and < the cache's rows; other slots point at a
+0 key and are never attended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import torch

from kernel.contract import INT32_MAX
from kernel.peers.plumbing import LayoutCache, PaddedRows, csr_to_padded, int32_row_chunks, kept_index, sync_free_width
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET, index_records, record_words

SCALE_BLOCK = 128


@dataclass(frozen=True)
class GatheredRows:
    """Fixed-width rows of keys for n_q query rows.

    keys: bf16 [n_q, width, 576] dequantised K (V = keys[..., :512]); a slot that holds no key is
        exactly 0 (whatever cache row 0 holds: NaN codes there cannot leak through a 0 weight),
        or unspecified when gathered with zero_masked=False;
    valid: bool [n_q, width], slot holds a key (inside the row, entry >= 0);
    lengths: int64 [n_q] CSR row lengths (negative clamped to 0);
    width: slots per row, a positive multiple of the `multiple` asked for.
    """

    keys: torch.Tensor
    valid: torch.Tensor
    lengths: torch.Tensor
    width: int


def dequantise_bf16(records: torch.Tensor) -> torch.Tensor:
    """Records uint8 [N, 656] (contiguous) -> bf16 [N, 576]: [bf16(bf16(code) * bf16(scale)), rope].

    Exact for power-of-two scales within bf16's range (module docstring). e4m3fn NaN codes decode
    to NaN. Four elementwise launches, no host sync.
    """
    n = records.shape[0]
    out = torch.empty(n, HEAD_DIM, dtype=torch.bfloat16, device=records.device)
    if n == 0:
        return out
    latent = out[:, :LATENT_DIM]
    latent.copy_(records[:, :SCALE_OFFSET].view(torch.float8_e4m3fn))  # bf16(code), exact
    scales = records[:, SCALE_OFFSET:ROPE_OFFSET].view(torch.float32).to(torch.bfloat16)
    latent.view(n, LATENT_DIM // SCALE_BLOCK, SCALE_BLOCK).mul_(scales.unsqueeze(-1))
    out[:, LATENT_DIM:] = records[:, ROPE_OFFSET:].view(torch.bfloat16)
    return out


@dataclass(frozen=True)
class RowLayout:
    """Where each slot of the fixed-width rows reads: the index-only part of gather_rows (a
    function of indices and indptr alone, so a caller may keep it while they do not change).

    slots: int32 [n_q * width] KV row of each slot (0 where the slot holds no key);
    valid: bool [n_q, width] slot holds a key; lengths: int64 [n_q]; width: slots per row."""

    slots: torch.Tensor
    valid: torch.Tensor
    lengths: torch.Tensor
    width: int


def masked_rows(indices: torch.Tensor, indptr: torch.Tensor, multiple: int) -> PaddedRows:
    """The CSR stream as fixed-width rows (csr_to_padded) with every entry < 0 as -1, the width
    sync-free for short streams (sync_free_width): the slots of the bf16-key adapters."""
    return csr_to_padded(indices, indptr, has_invalid=True, multiple=multiple, width=sync_free_width(indices.numel(), multiple))


def row_layout(indices: torch.Tensor, indptr: torch.Tensor, *, multiple: int) -> RowLayout:
    """The RowLayout of a CSR stream (width and masking as in gather_rows)."""
    rows = masked_rows(indices, indptr, multiple)
    return RowLayout(slots=rows.indices.clamp_min(0).reshape(-1), valid=rows.indices >= 0, lengths=rows.lengths, width=rows.width)


def gather_rows(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    multiple: int,
    zero_masked: bool = True,
    layout: RowLayout | None = None,
) -> GatheredRows:
    """The keys of each CSR row as a dense [n_q, width] block (see GatheredRows).

    Every entry < 0 is masked (with has_invalid that is the contract; without it a negative entry
    breaks the contract, and masking it is this adapter's choice). Only consumed entries are read
    (an unconsumed stream position may hold anything). Width: round_up(len(indices), multiple)
    when that is <= kernel.peers.plumbing.SYNC_FREE_TOPK (no host sync), else the longest row
    rounded up (one host sync). Consumed entries >= rows are an out-of-bounds read: the caller
    declares bounded_index_reads = False. zero_masked False leaves the keys of slots that hold
    no key unspecified (a kernel that never reads them, e.g. through an index of -1, saves the
    pass that zeroes them). layout: row_layout(indices, indptr, multiple=multiple) when the
    caller has it already (only the records are gathered then).
    """
    if layout is None:
        layout = row_layout(indices, indptr, multiple=multiple)
    flat = kv_cache.reshape(-1, RECORD_BYTES)
    if flat.shape[0] == 0:
        flat = torch.zeros(1, RECORD_BYTES, dtype=torch.uint8, device=kv_cache.device)
    records = index_records(flat, layout.slots)
    if zero_masked:  # an empty slot is an all-zero record: row 0's bytes never reach it
        record_words(records).masked_fill_(~layout.valid.view(-1, 1), 0)
    keys = dequantise_bf16(records).view(layout.valid.shape[0], layout.width, HEAD_DIM)
    return GatheredRows(keys=keys, valid=layout.valid, lengths=layout.lengths, width=layout.width)


class KeptCache(Protocol):
    """The whole cache kept dequantised (kernel.peers.dequant_cache.DequantCache)."""

    def get(self, kv_cache: torch.Tensor, slots: int) -> torch.Tensor | None:
        """bf16 [rows + 1, 576] of `kv_cache` (row `rows` +0), or None: gather per slot."""
        ...


@dataclass
class KeptKeys:
    """What a bf16-key peer's backend keeps between calls (kernel.peers.protocol's state): the whole
    cache dequantised (a kernel.peers.dequant_cache.DequantCache, built by the engine's reader
    where it has one) and the index layouts per index tensors (each None: built per call)."""

    dequant: KeptCache | None = None
    layouts: LayoutCache | None = None


MAX_KEPT_ROWS = INT32_MAX // HEAD_DIM  # buffer rows the kernels address (row * 576 is int32)


@dataclass(frozen=True)
class SlotKeys:
    """The keys of n_q rows of W slots each, as one bf16 buffer the kernels address.

    keys: bf16 [n, 576] contiguous, the buffer: the kept whole cache [rows + 1, 576] (row `rows`
      +0) or, per slot, [n_q * W, 576] (slot j of row q at q * W + j, zero when not valid);
    table: int32 [n_q, W], the buffer row of slot j of row q (a +0 row when not valid);
    valid: bool [n_q, W], the slot holds a key (inside the row, entry >= 0 and < the cache's rows);
    counts: int32 [n_q] valid slots per row;
    width: W, a positive multiple of the `multiple` asked for;
    per_slot: the buffer is the per-slot block (row chunks of it may be launched apart, with
      table entries made local by subtracting start * W); False: the kept cache, addressed whole.
    """

    keys: torch.Tensor
    table: torch.Tensor
    valid: torch.Tensor
    counts: torch.Tensor
    width: int
    per_slot: bool

    def valid_first(self) -> torch.Tensor:
        """int32 [n_q, W]: each row's buffer rows of its valid slots first (in slot order), then
        the others: row q's first counts[q] entries are its keys (what a stable sort on ~valid
        gives, placed by running counts and one scatter; no host sync)."""
        valid_before = self.valid_rank()
        slot = torch.arange(self.width, device=self.valid.device, dtype=torch.int32)
        place = torch.where(self.valid, valid_before, self.counts.unsqueeze(1) + slot - valid_before)
        return torch.empty_like(self.table).scatter_(1, place.to(torch.int64), self.table)

    def valid_rank(self) -> torch.Tensor:
        """int32 [n_q, W]: the valid slots before slot j of its row (its place among them when valid)."""
        return torch.cumsum(self.valid, dim=1, dtype=torch.int32) - self.valid.to(torch.int32)

    def chunk_base(self, start: int) -> int:
        """What to subtract from table entries of a chunk starting at row `start`."""
        return start * self.width if self.per_slot else 0

    def row_chunks(self) -> list[tuple[int, int]]:
        """The row ranges [start, stop) launched apart: per slot, chunks whose buffer rows keep
        every element offset below 2^31 (kernel.peers.plumbing.int32_row_chunks); the kept cache
        (at most MAX_KEPT_ROWS rows): every row in one launch."""
        n_q = self.valid.shape[0]
        return int32_row_chunks(n_q, self.width) if self.per_slot else [(0, n_q)]

    def chunk_rows(self, buffer: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """The rows of `buffer` (`keys` viewed as a kernel takes it, one key a row) that the launch
        of rows [start, stop) addresses: its rows' slots per slot, else the whole kept cache."""
        return buffer[start * self.width : stop * self.width] if self.per_slot else buffer


@dataclass(frozen=True)
class SlotLayout:
    """The part of SlotKeys that depends on the index stream and the cache's row count alone
    (what a LayoutCache keeps per index tensors).

    rows: int32 [n_q, W], the cache row of slot j of row q, or n_rows when the slot is not valid;
    valid, counts, width: as in SlotKeys.
    """

    rows: torch.Tensor
    valid: torch.Tensor
    counts: torch.Tensor
    width: int


def slot_layout(indices: torch.Tensor, indptr: torch.Tensor, n_rows: int, *, multiple: int) -> SlotLayout:
    """Each row's slots padded to W (a multiple of `multiple`, sync-free for short streams as in
    row_layout); every entry < 0 or >= n_rows is not valid."""
    rows = masked_rows(indices, indptr, multiple)
    valid = (rows.indices >= 0) & (rows.indices < n_rows)
    return SlotLayout(
        rows=torch.where(valid, rows.indices, n_rows).to(torch.int32),
        valid=valid,
        counts=valid.sum(dim=1, dtype=torch.int32),
        width=rows.width,
    )


def slot_keys(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    multiple: int,
    dequantise: Callable[[torch.Tensor], torch.Tensor] = dequantise_bf16,
    kept: KeptCache | None = None,
    layouts: LayoutCache | None = None,
) -> SlotKeys:
    """Each row's slots and the buffer of their keys (SlotKeys). Every entry < 0 or >= the cache's
    rows is masked; W is sync-free for short streams (as in row_layout).
    dequantise(records uint8 [n, 656] contiguous) -> bf16 [n, 576] is the reader (default
    dequantise_bf16, exact for power-of-two scales). kept: the cache
    kept dequantised by the same reader (a DequantCache built by that reader);
    when it gives the whole copy (and its rows fit the kernels' int32 offsets) the table holds
    the rows' own cache rows, else only the consumed records are gathered (torch indexing, any
    cache size) and dequantised, the keys of masked slots zeroed after it. layouts: keeps
    slot_layout per index tensors (kept_index). No host sync for short streams (slot_layout),
    none at all when the layout is kept.
    """
    n_rows = kv_cache.numel() // RECORD_BYTES
    build = partial(slot_layout, indices, indptr, n_rows, multiple=multiple)
    lay = kept_index(layouts, indices, indptr, ("slot_layout", multiple, n_rows), build)
    valid, counts, width = lay.valid, lay.counts, lay.width
    n_q = valid.shape[0]
    whole = None if kept is None or n_rows + 1 > MAX_KEPT_ROWS else kept.get(kv_cache, n_q * width)
    if whole is not None:
        return SlotKeys(keys=whole, table=lay.rows, valid=valid, counts=counts, width=width, per_slot=False)
    flat = kv_cache.reshape(-1, RECORD_BYTES) if n_rows else torch.zeros(1, RECORD_BYTES, dtype=torch.uint8, device=kv_cache.device)
    records = flat[torch.where(valid, lay.rows, 0).reshape(-1)]
    keys = dequantise(records).reshape(-1, HEAD_DIM)
    keys.masked_fill_(~valid.view(-1, 1), 0)
    base = torch.arange(n_q, device=valid.device, dtype=torch.int32).unsqueeze(1) * width
    table = base + torch.arange(width, device=valid.device, dtype=torch.int32)
    return SlotKeys(keys=keys, table=table, valid=valid, counts=counts, width=width, per_slot=True)


__all__ = [
    "MAX_KEPT_ROWS",
    "GatheredRows",
    "KeptCache",
    "KeptKeys",
    "RowLayout",
    "SlotKeys",
    "SlotLayout",
    "dequantise_bf16",
    "gather_rows",
    "masked_rows",
    "row_layout",
    "slot_keys",
    "slot_layout",
]
