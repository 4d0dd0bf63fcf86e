"""Keys gathered per query row and dequantised to bf16: the shared input step of the adapters to
kernels that take dense or bf16 KV (FlashMLA's sparse prefill, PyTorch's SDPA).

`gather_rows` turns a contract call's CSR stream into fixed-width rows of KV slots (no host sync
for short streams, see kernel.backends.flashmla.sync_free_width) and reads only the records
that a row consumes; `dequantise_bf16` turns records into bf16 K = [latent (512), rope (64)].

Dequantisation follows FlashMLA's own V3.2 convention (legacy SM90 decode):
latent = bf16(bf16(code) * bf16(scale)). For power-of-two scales (the pow2 and pow2-floor
writers) every step is exact, so K equals the record's value; for a raw (non-power-of-two) scale
the scale is rounded to bf16 and the product to bf16 (a precondition violation the suite reports,
the same as for the `flashmla` backend).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel.backends.flashmla import MASKED, csr_to_padded, sync_free_width
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


def row_layout(indices: torch.Tensor, indptr: torch.Tensor, *, multiple: int) -> RowLayout:
    """The RowLayout of a CSR stream (width and masking as in gather_rows)."""
    rows = csr_to_padded(
        indices,
        indptr,
        has_invalid=True,
        multiple=multiple,
        width=sync_free_width(indices.numel(), multiple),
    )
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
    when that is <= kernel.backends.flashmla.SYNC_FREE_TOPK (no host sync), else the longest row
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


__all__ = ["MASKED", "GatheredRows", "RowLayout", "dequantise_bf16", "gather_rows", "row_layout"]
