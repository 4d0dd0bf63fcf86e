"""CSR rows in padded chunks: the shared gathering step of the reference and the error bound.

Rows are sorted by length (longest first) and cut into chunks whose padded size
(rows x longest row) stays under a budget of key slots, so memory is bounded and padding small.
Within a chunk, keys are gathered as a dense [R, L] block with a validity mask; masked slots
carry zeros, never the bytes of whatever row they would have read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from kernel.fp8 import decode_e4m3, pow2
from kernel.record import RECORD_BYTES, decode_records

DEFAULT_KEY_BUDGET = 1 << 15  # key slots (rows x padded length) per chunk
# The reference's own chunk size per device type (key slots): a GPU holds 2^21 slots of f64 keys
# (9.7 GB) easily and launches per chunk then cost nothing beside the arithmetic.
REFERENCE_KEY_BUDGET = {"cpu": 1 << 15, "cuda": 1 << 21}
SCALE_MODELS = ("stored", "gfx950")
_SCALE_CAP_BITS = 0x43000000  # f32 bits of 2^7


class PreconditionError(ValueError):
    """The inputs break a precondition under which the reference has no defined value."""


@dataclass(frozen=True)
class KeyChunk:
    """One chunk of rows with their keys gathered.

    rows:   int64 [R]            query rows of this chunk
    valid:  bool [R, L]          slot holds a key (position < length, and entry >= 0 with has_invalid)
    slots:  int64 [R, L]         KV row of each slot (0 where not valid)
    latent: f64 [R, L, 512]      dequantised latent as V (0 where not valid)
    k_latent: f64 [R, L, 512]    dequantised latent as QK sees it (the same tensor under the
                                 "stored" scale model)
    rope:   f64 [R, L, 64]       rope values (0 where not valid)
    codes:  uint8 [R, L, 512]    raw e4m3 codes (0 where not valid)
    scales: f32 [R, L, 4]        stored scales (0 where not valid)
    """

    rows: torch.Tensor
    valid: torch.Tensor
    slots: torch.Tensor
    latent: torch.Tensor
    k_latent: torch.Tensor
    rope: torch.Tensor
    codes: torch.Tensor
    scales: torch.Tensor


def row_bounds(indptr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(start, length) per row as int64; a negative length counts as empty (length 0)."""
    ptr = indptr.to(torch.int64)
    start = ptr[:-1]
    length = (ptr[1:] - start).clamp_min(0)
    return start, length


def check_stream(indices: torch.Tensor, indptr: torch.Tensor, kv_rows: int, *, has_invalid: bool) -> None:
    """Raise PreconditionError when a consumed position or index is out of range (vectorised)."""
    start, length = row_bounds(indptr)
    used = length > 0
    if bool((used & ((start < 0) | (start + length > indices.numel()))).any()):
        bad = int(torch.nonzero(used & ((start < 0) | (start + length > indices.numel())))[0, 0])
        raise PreconditionError(
            f"row {bad} reads indices[{int(start[bad])}:{int(start[bad] + length[bad])}] beyond the "
            f"index stream of {indices.numel()} entries"
        )
    if indices.numel() == 0 or not bool(used.any()):
        return
    # Positions consumed by some row: mark coverage with a difference array (rows may overlap).
    cover = torch.zeros(indices.numel() + 1, dtype=torch.int64, device=indices.device)
    cover.index_add_(0, start[used], torch.ones_like(start[used]))
    cover.index_add_(0, (start + length)[used], -torch.ones_like(start[used]))
    consumed = cover.cumsum(0)[:-1] > 0
    values = indices.to(torch.int64)
    bad_high = consumed & (values >= kv_rows)
    bad_low = consumed & (values < 0) & (not has_invalid)
    if bool((bad_high | bad_low).any()):
        pos = int(torch.nonzero(bad_high | bad_low)[0, 0])
        raise PreconditionError(
            f"indices[{pos}] = {int(values[pos])} is consumed but outside [0, {kv_rows})"
            + ("" if has_invalid else " (negative entries need has_invalid)")
        )


def chunk_plan(length: torch.Tensor, key_budget: int = DEFAULT_KEY_BUDGET) -> list[torch.Tensor]:
    """Row ids grouped into chunks, longest rows first; each chunk's R * max(L) <= budget (or R == 1).

    Rows of length 0 are left out (their result is fixed: out 0, lse -inf).
    """
    order = torch.argsort(length, descending=True, stable=True)
    sorted_len = length[order].tolist()
    chunks: list[torch.Tensor] = []
    begin = 0
    total = len(sorted_len)
    while begin < total and sorted_len[begin] > 0:
        rows_fit = max(1, key_budget // sorted_len[begin])
        end = min(total, begin + rows_fit)
        while end > begin and sorted_len[end - 1] == 0:
            end -= 1
        chunks.append(order[begin:end])
        begin = end
    return chunks


def gather_chunk(
    rows: torch.Tensor,
    start: torch.Tensor,
    length: torch.Tensor,
    indices: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    scale_model: str = "stored",
) -> KeyChunk:
    """Gather and decode the keys of `rows` into a dense padded block (see KeyChunk).

    scale_model "stored": K and V use the stored scale (the contract's record semantics).
    "gfx950": the gfx950 kernel's documented behaviour on any scale: QK uses 2^(exponent field
    - 127) (mantissa dropped; a zero scale gives 2^-127), PV uses the scale's bits clamped to
    [1, bits(2^7)] (a scale above 2^7 acts as 2^7, a zero or negative one as 2^-149).
    """
    row_len = length[rows]
    width = int(row_len.max())
    offsets = torch.arange(width, device=rows.device, dtype=torch.int64)
    in_row = offsets.unsqueeze(0) < row_len.unsqueeze(1)
    positions = torch.where(in_row, start[rows].unsqueeze(1) + offsets.unsqueeze(0), 0)
    entries = indices.to(torch.int64)[positions]
    valid = in_row & (entries >= 0) if has_invalid else in_row
    slots = torch.where(valid, entries, 0)
    flat = kv_cache.reshape(-1, RECORD_BYTES)
    decoded = decode_records(flat[slots])
    mask = valid.unsqueeze(-1)
    zero = torch.zeros((), dtype=torch.float64, device=rows.device)
    latent = torch.where(mask, decoded.latent, zero)
    k_latent = latent
    if scale_model == "gfx950":
        lead = decoded.codes.shape[:-1]
        codes = decode_e4m3(decoded.codes).reshape(*lead, 4, 128)
        bits = decoded.scales.contiguous().view(torch.int32)
        exponent = (bits.to(torch.int64) >> 23) & 0xFF
        k_scale = pow2(exponent - 127)
        v_scale = bits.clamp(1, _SCALE_CAP_BITS).view(torch.float32).to(torch.float64)
        k_latent = torch.where(mask, (codes * k_scale.unsqueeze(-1)).reshape(*lead, 512), zero)
        latent = torch.where(mask, (codes * v_scale.unsqueeze(-1)).reshape(*lead, 512), zero)
    elif scale_model != "stored":
        raise ValueError(f"unknown scale model {scale_model!r}; expected one of {SCALE_MODELS}")
    return KeyChunk(
        rows=rows,
        valid=valid,
        slots=slots,
        latent=latent,
        k_latent=k_latent,
        rope=torch.where(mask, decoded.rope, zero),
        codes=torch.where(mask, decoded.codes, torch.zeros((), dtype=torch.uint8, device=rows.device)),
        scales=torch.where(mask, decoded.scales, torch.zeros((), dtype=torch.float32, device=rows.device)),
    )


@dataclass(frozen=True)
class KeyBlock:
    """The keys of a chunk of rows as the reference needs them (one f64 tensor, built in one pass).

    rows:  int64 [R]           query rows of this chunk
    valid: bool [R, L]         slot holds a key
    keys:  f64 [R, L, 576]     [code * stored scale (512), rope (64)], exactly 0 at masked slots
                               (V = keys[..., :512])
    """

    rows: torch.Tensor
    valid: torch.Tensor
    keys: torch.Tensor


def gather_keys(
    rows: torch.Tensor,
    start: torch.Tensor,
    length: torch.Tensor,
    indices: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
) -> KeyBlock:
    """Gather and decode the keys of `rows` under the "stored" scale model (the contract).

    Same values as gather_chunk's k_latent / rope (code * scale and rope are exact in f64), with
    fewer passes over memory: masked slots gather an all-zero record (so whatever row 0 holds,
    NaN codes included, never reaches them), codes go e4m3 -> f32 (exact) and are multiplied by
    the f64 scale straight into the key tensor.
    """
    row_len = length[rows]
    width = int(row_len.max())
    offsets = torch.arange(width, device=rows.device, dtype=torch.int64)
    in_row = offsets.unsqueeze(0) < row_len.unsqueeze(1)
    positions = torch.where(in_row, start[rows].unsqueeze(1) + offsets.unsqueeze(0), 0)
    entries = indices[positions]
    valid = in_row & (entries >= 0) if has_invalid else in_row
    flat = kv_cache.reshape(-1, RECORD_BYTES)
    records = flat[torch.where(valid, entries, 0)]
    records.masked_fill_(~valid.unsqueeze(-1), 0)
    n_rows = rows.numel()
    keys = torch.empty(n_rows, width, 576, dtype=torch.float64, device=rows.device)
    codes = records[..., :512].view(torch.float8_e4m3fn).to(torch.float32).view(n_rows, width, 4, 128)
    scales = records[..., 512:528].view(torch.float32).to(torch.float64).unsqueeze(-1)
    torch.mul(codes, scales, out=keys[..., :512].view(n_rows, width, 4, 128))
    keys[..., 512:] = records[..., 528:].view(torch.bfloat16)
    return KeyBlock(rows=rows, valid=valid, keys=keys)


def iter_key_blocks(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    key_budget: int,
) -> Iterator[KeyBlock]:
    """All non-empty rows' keys as KeyBlocks (after checking the stream's preconditions)."""
    kv_rows = kv_cache.numel() // RECORD_BYTES
    check_stream(indices, indptr, kv_rows, has_invalid=has_invalid)
    start, length = row_bounds(indptr)
    for rows in chunk_plan(length, key_budget):
        yield gather_keys(rows, start, length, indices, kv_cache, has_invalid=has_invalid)


def iter_chunks(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    key_budget: int = DEFAULT_KEY_BUDGET,
    scale_model: str = "stored",
) -> Iterator[KeyChunk]:
    """All non-empty rows' keys, chunk by chunk (after checking the stream's preconditions)."""
    kv_rows = kv_cache.numel() // RECORD_BYTES
    check_stream(indices, indptr, kv_rows, has_invalid=has_invalid)
    start, length = row_bounds(indptr)
    for rows in chunk_plan(length, key_budget):
        yield gather_chunk(rows, start, length, indices, kv_cache, has_invalid=has_invalid, scale_model=scale_model)
