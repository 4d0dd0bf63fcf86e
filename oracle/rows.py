"""CSR rows in padded chunks: the shared gathering step of the reference and the error bound.

Rows are sorted by length (longest first) and cut into chunks whose padded size
(rows x longest row) stays under a budget of key slots, so memory is bounded and padding small.
Within a chunk, keys are gathered as a dense [R, L] block with a validity mask; masked slots
carry zeros, never the bytes of whatever row they would have read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from kernel import fastpath
from kernel.fp8 import decode_e4m3, e4m3_table, pow2
from kernel.record import LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET, decode_records, index_records, record_words
from oracle import key_decode

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


def stream_flags(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_rows: int,
    *,
    has_invalid: bool,
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """bool [2] on the device, no host read: (some row reads positions beyond the index stream,
    some consumed index lies outside [0, kv_rows) (or is negative without has_invalid)). The
    second is meaningful only where the first is False. `bounds`: row_bounds(indptr) when the
    caller has it."""
    start, length = row_bounds(indptr) if bounds is None else bounds
    used = length > 0
    total = indices.numel()
    end = start + length
    beyond = used & ((start < 0) | (end > total))
    # positions consumed by some row: coverage as a difference array (rows may overlap); unused
    # rows add 0, and ends are clamped into the stream (a row beyond it is reported first)
    weight = used.to(torch.int64)
    cover = torch.zeros(total + 1, dtype=torch.int64, device=indices.device)
    cover.index_add_(0, start.clamp(0, total), weight)
    cover.index_add_(0, end.clamp(0, total), weight, alpha=-1)
    consumed = cover.cumsum(0)[:-1] > 0
    values = indices if indices.dtype in (torch.int32, torch.int64) else indices.to(torch.int64)  # exact compares either way
    out_of_range = values >= kv_rows
    if not has_invalid:
        out_of_range = out_of_range | (values < 0)
    bad = consumed & out_of_range
    return torch.stack((beyond.any(), bad.any()))


def raise_stream(indices: torch.Tensor, indptr: torch.Tensor, kv_rows: int, *, has_invalid: bool, flags: list[bool]) -> None:
    """Raise the PreconditionError that stream_flags' host values `flags` say applies, if any
    (reads the device only then, to name the first broken row or position)."""
    any_beyond, any_bad = flags
    if not (any_beyond or any_bad):
        return
    start, length = row_bounds(indptr)
    if any_beyond:
        beyond = (length > 0) & ((start < 0) | (start + length > indices.numel()))
        bad = int(torch.nonzero(beyond)[0, 0])
        raise PreconditionError(
            f"row {bad} reads indices[{int(start[bad])}:{int(start[bad] + length[bad])}] beyond the "
            f"index stream of {indices.numel()} entries"
        )
    if any_bad:
        used = length > 0
        cover = torch.zeros(indices.numel() + 1, dtype=torch.int64, device=indices.device)
        cover.index_add_(0, start[used], torch.ones_like(start[used]))
        cover.index_add_(0, (start + length)[used], -torch.ones_like(start[used]))
        consumed = cover.cumsum(0)[:-1] > 0
        values = indices.to(torch.int64)
        pos = int(torch.nonzero(consumed & ((values >= kv_rows) | ((values < 0) & (not has_invalid))))[0, 0])
        raise PreconditionError(
            f"indices[{pos}] = {int(values[pos])} is consumed but outside [0, {kv_rows})"
            + ("" if has_invalid else " (negative entries need has_invalid)")
        )


def check_stream(indices: torch.Tensor, indptr: torch.Tensor, kv_rows: int, *, has_invalid: bool) -> None:
    """Raise PreconditionError when a consumed position or index is out of range (vectorised,
    one host read)."""
    flags = stream_flags(indices, indptr, kv_rows, has_invalid=has_invalid).tolist()
    raise_stream(indices, indptr, kv_rows, has_invalid=has_invalid, flags=flags)


def _chunk_spans(sorted_len: list[int], key_budget: int) -> list[tuple[int, int]]:
    """(begin, end) of each chunk of chunk_plan in the length order (sorted_len: the lengths,
    longest first): a chunk starts at its longest row, whose length is the chunk's width, and
    takes max(1, key_budget // width) rows, fewer at the end of the nonzero rows."""
    spans: list[tuple[int, int]] = []
    begin = 0
    total = len(sorted_len)
    while begin < total and sorted_len[begin] > 0:
        rows_fit = max(1, key_budget // sorted_len[begin])
        end = min(total, begin + rows_fit)
        while end > begin and sorted_len[end - 1] == 0:
            end -= 1
        spans.append((begin, end))
        begin = end
    return spans


def chunk_plan(length: torch.Tensor, key_budget: int = DEFAULT_KEY_BUDGET) -> list[torch.Tensor]:
    """Row ids grouped into chunks, longest rows first; each chunk's R * max(L) <= budget (or R == 1).

    Rows of length 0 are left out (their result is fixed: out 0, lse -inf).
    """
    order = torch.argsort(length, descending=True, stable=True)
    sorted_len = length[order].tolist()
    return [order[begin:end] for begin, end in _chunk_spans(sorted_len, key_budget)]


@dataclass(frozen=True)
class BatchPlan:
    """Consecutive chunks of chunk_plan that share their width, gathered as one batch.

    rows:          int64 [R]  the chunks' rows in plan order (a slice of the length order)
    width:         int        the chunks' common width (their longest row)
    segment_rows:  int        rows per chunk: row i of the batch belongs to chunk i // segment_rows
                              (every chunk but the batch's last has exactly this many)
    n_segments:    int        chunks in the batch
    full:          bool       every row's length is the width (known on the host)
    kind:          object     the value of chunk_plan_batches' `kind` shared by the chunks
    """

    rows: torch.Tensor
    width: int
    segment_rows: int
    n_segments: int
    full: bool
    kind: object = None


def chunk_plan_batches(
    length: torch.Tensor, key_budget: int, batch_budget: int, kind: Callable[[list[int]], object] | None = None
) -> list[BatchPlan]:
    """chunk_plan's chunks (same rows, same widths, same order), consecutive ones of equal width
    (and equal `kind` of their rows' lengths, when given) merged into batches of at most
    max(batch_budget, one chunk) key slots. A row's padded width, hence every per-row result
    computed over it, is its chunk's; a batch only stacks more rows into each batched op. One
    host read (the sorted lengths)."""
    order = torch.argsort(length, descending=True, stable=True)
    return _batches(order, length[order].tolist(), key_budget, batch_budget, kind)


def _batches(
    order: torch.Tensor, sorted_len: list[int], key_budget: int, batch_budget: int, kind: Callable[[list[int]], object] | None
) -> list[BatchPlan]:
    """chunk_plan_batches from the length order and the sorted lengths read back."""
    plans: list[BatchPlan] = []
    spans = _chunk_spans(sorted_len, key_budget)
    i = 0
    while i < len(spans):
        begin, end = spans[i]
        width = sorted_len[begin]
        seg = end - begin
        cls = kind(sorted_len[begin:end]) if kind is not None else None
        j = i + 1
        while j < len(spans):
            b, e = spans[j]
            if sorted_len[b] != width or spans[j - 1][1] - spans[j - 1][0] != seg or (e - begin) * width > batch_budget:
                break
            if kind is not None and kind(sorted_len[b:e]) != cls:
                break
            end = e
            j += 1
        plans.append(
            BatchPlan(
                rows=order[begin:end],
                width=width,
                segment_rows=seg,
                n_segments=j - i,
                full=sorted_len[end - 1] == width,
                kind=cls,
            )
        )
        i = j
    return plans


def _row_slots(
    rows: torch.Tensor,
    start: torch.Tensor,
    length: torch.Tensor,
    indices: torch.Tensor,
    *,
    has_invalid: bool,
    width: int | None = None,
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(width, entries int64 [R, width], valid bool [R, width]) of `rows` padded to their longest
    row (`width` when the caller knows it: no host read): slot j of a row holds
    indices[start + j] while j < its length (position 0 beyond it, so every read stays in the
    stream); valid also needs the entry >= 0 under has_invalid."""
    row_len = length[rows]
    if width is None:
        width = int(row_len.max())
    offsets = torch.arange(width, device=rows.device, dtype=torch.int64)
    in_row = offsets.unsqueeze(0) < row_len.unsqueeze(1)
    positions = (start[rows].unsqueeze(1) + offsets.unsqueeze(0)) * in_row  # position 0 beyond the row (where(in_row, ., 0))
    entries = indices[positions].to(torch.int64)
    valid = (in_row & (entries >= 0)) if has_invalid else in_row
    return width, entries, valid


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
    width, entries, valid = _row_slots(rows, start, length, indices, has_invalid=has_invalid)
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
class BoundChunk:
    """One chunk (or batch of chunks, BatchPlan) of rows with their keys and values gathered as
    the error bound needs them (oracle.bound.evaluate_modes): each record gathered and decoded
    once, into the tensors that both comparison modes and the bound's statistics share.

    rows:      int64 [R]            query rows that have a valid key
    valid:     bool [R, L]          slot holds a key (L: the longest row of the planned chunk,
                                    rows without a valid key included, as in gather_chunk)
    all_valid: bool                 every slot of every row holds a key (known on the host)
    keys:      f64 [R, L, 576]      [latent as QK sees it (512), rope (64)], contiguous, +0 at
                                    masked slots (gather_chunk's cat(k_latent, rope))
    values:    f64 [R, L, 512]      latent as V, +0 at masked slots (gather_chunk's latent): under
                                    "stored" the view keys[..., :512] (row stride 576), else its
                                    own contiguous tensor
    codes:     uint8 [R, L, 512]    raw e4m3 codes (a view of the gathered records), 0 at masked slots
    code_index: int32 [R * L * 512] the codes as table indices (flat, contiguous)
    scales:    f32 [R, L, 4]        stored scales, 0 at masked slots
    segment_rows, n_segments:       row i belongs to chunk i // segment_rows of n_segments
                                    (one chunk: segment_rows = R), or to chunk segment[i]
    segment:   int64 [R] or None    each row's chunk where rows were dropped (gather_bound_batch)
    kind:      object               BatchPlan.kind (None for a single chunk)

    Every value equals gather_chunk's for the same rows (code * scale is exact in f64, so
    decoding the gathered record of a masked slot after zeroing it gives the same +0 as masking
    the decoded value).
    """

    rows: torch.Tensor
    valid: torch.Tensor
    all_valid: bool
    keys: torch.Tensor
    values: torch.Tensor
    codes: torch.Tensor
    code_index: torch.Tensor
    scales: torch.Tensor
    segment_rows: int = 0
    n_segments: int = 1
    kind: object = None
    segment: torch.Tensor | None = None


def _decode_bound(
    rows: torch.Tensor,
    width: int,
    entries: torch.Tensor,
    valid: torch.Tensor,
    all_valid: bool,
    kv_cache: torch.Tensor,
    scale_model: str,
) -> BoundChunk:
    """The BoundChunk of `rows` from their slots' entries and validity (no host read): the
    records of masked slots are gathered from row 0 and zeroed in place (bytes of whatever row
    they read, NaN codes included, never reach a value)."""
    flat = kv_cache.reshape(-1, RECORD_BYTES)
    n_rows = rows.numel()
    slots = entries if all_valid else entries * valid  # masked slots read row 0 (where(valid, entries, 0))
    records = index_records(flat, slots.view(-1)).view(n_rows, width, RECORD_BYTES)
    if not all_valid:
        record_words(records).masked_fill_(~valid.unsqueeze(-1), 0)
    codes = records[..., :SCALE_OFFSET]
    code_index = codes.to(torch.int32).reshape(-1)  # one copy: the cast of the strided codes is contiguous
    scales = records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)  # [R, L, 4]
    # code * scale is exact in f64 (4 x 24 significant bits, no underflow): multiplying the table
    # value in place gives the bits of decode_records' latent
    code_values = e4m3_table(rows.device, torch.float64).index_select(0, code_index).view(n_rows, width, 4, 128)
    rope = records[..., ROPE_OFFSET:].contiguous().view(torch.bfloat16)
    if scale_model == "stored":
        # V is K's latent part: decoded once, straight into the keys (values: a view of them)
        keys = torch.empty(n_rows, width, LATENT_DIM + rope.shape[-1], dtype=torch.float64, device=rows.device)
        torch.mul(code_values, scales.to(torch.float64).unsqueeze(-1), out=keys[..., :LATENT_DIM].view(n_rows, width, 4, 128))
        keys[..., LATENT_DIM:] = rope
        values = keys[..., :LATENT_DIM]
    else:
        bits = scales.view(torch.int32)
        exponent = (bits.to(torch.int64) >> 23) & 0xFF
        k_latent = (code_values * pow2(exponent - 127).unsqueeze(-1)).view(n_rows, width, LATENT_DIM)
        v_scale = bits.clamp(1, _SCALE_CAP_BITS).view(torch.float32).to(torch.float64)
        values = code_values.mul_(v_scale.unsqueeze(-1)).view(n_rows, width, LATENT_DIM)
        keys = torch.cat((k_latent, rope.to(torch.float64)), dim=-1)
    return BoundChunk(
        rows=rows,
        valid=valid,
        all_valid=all_valid,
        keys=keys,
        values=values,
        codes=codes,
        code_index=code_index,
        scales=scales,
        segment_rows=n_rows,
    )


def _check_scale_model(scale_model: str) -> None:
    if scale_model not in SCALE_MODELS:
        raise ValueError(f"unknown scale model {scale_model!r}; expected one of {SCALE_MODELS}")


def gather_bound_chunk(
    rows: torch.Tensor,
    start: torch.Tensor,
    length: torch.Tensor,
    indices: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    scale_model: str = "stored",
) -> BoundChunk | None:
    """Gather and decode the keys of `rows` for the error bound (see BoundChunk); None when no
    row of the chunk has a valid key. Scale models as in gather_chunk.

    Host reads: the chunk width, and the counts of rows with a key and of valid slots; rows
    without a valid key are dropped before the records are gathered (gather_bound_batch keeps
    them and reads nothing back)."""
    _check_scale_model(scale_model)
    width, entries, valid = _row_slots(rows, start, length, indices, has_invalid=has_invalid)
    has_key = valid.any(dim=1)
    n_key_rows, n_valid = torch.stack((has_key.sum(), valid.sum())).tolist()
    if n_key_rows == 0:
        return None
    if n_key_rows < rows.numel():
        rows, valid, entries = rows[has_key], valid[has_key], entries[has_key]
    return _decode_bound(rows, width, entries, valid, n_valid == n_key_rows * width, kv_cache, scale_model)


def gather_bound_batch(
    plan: BatchPlan,
    start: torch.Tensor,
    length: torch.Tensor,
    indices: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    scale_model: str = "stored",
) -> BoundChunk | None:
    """Gather and decode the keys of a BatchPlan's rows (see BoundChunk). Without has_invalid no
    host read: the width and the validity of every slot are known from the plan. With
    has_invalid one (which rows have a valid key): rows without one are dropped before the
    records are gathered (None when no row has one), `segment` keeps each remaining row's chunk,
    and every slot counts as possibly masked (all_valid False: masking an all-valid row is the
    identity)."""
    _check_scale_model(scale_model)
    rows = plan.rows
    _, entries, valid = _row_slots(rows, start, length, indices, has_invalid=has_invalid, width=plan.width)
    segment = None
    if has_invalid:
        keyed = torch.nonzero(valid.any(dim=1)).squeeze(1)
        if keyed.numel() == 0:
            return None
        if keyed.numel() < rows.numel():
            segment = (torch.arange(rows.numel(), device=rows.device) // plan.segment_rows)[keyed]
            rows, entries, valid = rows[keyed], entries[keyed], valid[keyed]
    chunk = _decode_bound(rows, plan.width, entries, valid, plan.full and not has_invalid, kv_cache, scale_model)
    return dataclasses.replace(chunk, segment=segment, segment_rows=plan.segment_rows, n_segments=plan.n_segments, kind=plan.kind)


def checked_plan(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    key_budget: int,
    batch_budget: int,
    kind: Callable[[list[int]], object] | None = None,
    extra: torch.Tensor | None = None,
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[list[BatchPlan], list[bool]]:
    """check_stream, then chunk_plan_batches, with one host read for both (the stream's flags,
    the sorted lengths and the caller's `extra` bool flags [k], whose host values are returned).
    `bounds`: row_bounds(indptr) when the caller has it."""
    kv_rows = kv_cache.numel() // RECORD_BYTES
    bounds = row_bounds(indptr) if bounds is None else bounds
    flags = stream_flags(indices, indptr, kv_rows, has_invalid=has_invalid, bounds=bounds)
    if extra is not None:
        flags = torch.cat((flags, extra.to(torch.bool).reshape(-1)))
    length = bounds[1]
    order = torch.argsort(length, descending=True, stable=True)
    host = torch.cat((length[order], flags.to(torch.int64))).tolist()
    n = length.numel()
    sorted_len, flag_values = host[:n], [bool(x) for x in host[n:]]
    return _batches(order, sorted_len, key_budget, batch_budget, kind), flag_values


def _planned_chunks(
    indices: torch.Tensor, indptr: torch.Tensor, kv_cache: torch.Tensor, *, has_invalid: bool, key_budget: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(rows, start, length) of each chunk of chunk_plan, after checking the stream's preconditions."""
    check_stream(indices, indptr, kv_cache.numel() // RECORD_BYTES, has_invalid=has_invalid)
    start, length = row_bounds(indptr)
    for rows in chunk_plan(length, key_budget):
        yield rows, start, length


def iter_bound_chunks(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    key_budget: int = DEFAULT_KEY_BUDGET,
    scale_model: str = "stored",
) -> Iterator[BoundChunk]:
    """The chunks of iter_chunks (same plan) that have a valid key, as BoundChunks (after
    checking the stream's preconditions)."""
    for rows, start, length in _planned_chunks(indices, indptr, kv_cache, has_invalid=has_invalid, key_budget=key_budget):
        chunk = gather_bound_chunk(rows, start, length, indices, kv_cache, has_invalid=has_invalid, scale_model=scale_model)
        if chunk is not None:
            yield chunk


def iter_bound_batches(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    key_budget: int = DEFAULT_KEY_BUDGET,
    batch_budget: int = DEFAULT_KEY_BUDGET,
    scale_model: str = "stored",
    kind: Callable[[list[int]], object] | None = None,
) -> Iterator[BoundChunk]:
    """iter_chunks' chunks merged into batches (chunk_plan_batches), those with a valid key as
    BoundChunks (gather_bound_batch), after checking the stream's preconditions."""
    _check_scale_model(scale_model)
    plans, flags = checked_plan(
        indices, indptr, kv_cache, has_invalid=has_invalid, key_budget=key_budget, batch_budget=batch_budget, kind=kind
    )
    raise_stream(indices, indptr, kv_cache.numel() // RECORD_BYTES, has_invalid=has_invalid, flags=flags)
    start, length = row_bounds(indptr)
    for plan in plans:
        chunk = gather_bound_batch(plan, start, length, indices, kv_cache, has_invalid=has_invalid, scale_model=scale_model)
        if chunk is not None:
            yield chunk


@dataclass(frozen=True)
class KeyBlock:
    """The keys of a chunk of rows as the reference needs them (one f64 tensor, built in one pass).

    rows:  int64 [R]           query rows of this chunk
    valid: bool [R, L]         slot holds a key
    keys:  f64 [R, L, 576]     [code * stored scale (512), rope (64)], exactly 0 at masked slots
                               (V = keys[..., :512]); None when gathered with decode=False
    all_valid: bool            every slot holds a key (known on the host; False: unknown)
    keyed: bool                every row has a valid key (known on the host; False: unknown)
    slots: int64 [R, L]        KV row of each slot, -1 at masked slots (contiguous); None when
                               the keys were decoded
    """

    rows: torch.Tensor
    valid: torch.Tensor
    keys: torch.Tensor | None
    all_valid: bool = False
    keyed: bool = False
    slots: torch.Tensor | None = None


def _decode_keys_torch(flat: torch.Tensor, entries: torch.Tensor, valid: torch.Tensor, all_valid: bool) -> torch.Tensor:
    """f64 [*S, 576] keys of KV rows `entries` (int64 [*S], any value where not `valid`) of the
    flat cache uint8 [rows, 656], +0 at masked slots, by torch ops: masked slots gather an
    all-zero record (so whatever row 0 holds, NaN codes included, never reaches them), codes are
    converted to f16 (e4m3 -> f16 is exact, and a NaN code's f16 NaN widens to the f64 bits of
    the e4m3 -> f32 cast's: key_decode.code_table) and multiplied by the f64 scale straight into the
    key tensor. The zeroing pass is skipped when `all_valid` (masking is then the identity)."""
    shape = tuple(entries.shape)
    records = index_records(flat, torch.where(valid, entries, 0).view(-1)).view(*shape, RECORD_BYTES)
    if not all_valid:
        record_words(records).masked_fill_(~valid.unsqueeze(-1), 0)
    keys = torch.empty(*shape, 576, dtype=torch.float64, device=flat.device)
    # code (e4m3 -> f16, exact) x f64 scale: the product is formed in f64 from the f16 code
    # widened exactly, written straight into the key tensor
    if flat.device.type == "cpu":
        # the same f64 operand from a table of those casts' values (key_decode.code_table): the
        # CPU's e4m3 -> f16 cast (software) and the mul's widening of it cost 2x the gather
        index = records[..., :512].reshape(-1).to(torch.int32)
        codes = key_decode.code_table(flat.device).index_select(0, index).view(*shape, 4, 128)
    else:
        codes = records[..., :512].view(torch.float8_e4m3fn).to(torch.float16).view(*shape, 4, 128)
    scales = records[..., 512:528].view(torch.float32).to(torch.float64).unsqueeze(-1)
    torch.mul(codes, scales, out=keys[..., :512].view(*shape, 4, 128))
    keys[..., 512:] = records[..., 528:].view(torch.bfloat16)
    return keys


def _probe_decode(flat: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The torch decode of slots int64 [N] (-1: masked) as oracle.key_decode.self_check compares it."""
    return _decode_keys_torch(flat, slots, slots >= 0, False)


fastpath.register(
    fastpath.FastPath(
        key_decode.FAST_PATH,
        key_decode.VARIANTS,
        lambda device, variant: key_decode.self_check(device, _probe_decode, variant),
        key_decode.eligible,
    )
)


def gather_keys(
    rows: torch.Tensor,
    start: torch.Tensor,
    length: torch.Tensor,
    indices: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    width: int | None = None,
    full: bool = False,
    decode: bool = True,
) -> KeyBlock:
    """Gather and decode the keys of `rows` under the "stored" scale model (the contract).
    decode False: no keys, the block's slots instead (for oracle.fused_products).

    Same values as gather_chunk's k_latent / rope (code * scale and rope are exact in f64), with
    fewer passes over memory: on CUDA one fused kernel (oracle.key_decode, the fast path
    oracle.key-decode: where its self-check passed, the torch decode's bits), else _decode_keys_torch. `width` (the rows' longest
    length) and `full` (every row has that length; with has_invalid not used) when the caller
    knows them from its plan: no host read; else one (the width).
    """
    width, entries, valid = _row_slots(rows, start, length, indices, has_invalid=has_invalid, width=width)
    all_valid = full and not has_invalid
    flat = kv_cache.reshape(-1, RECORD_BYTES)
    if not decode:
        slots = entries if all_valid else torch.where(valid, entries, -1)
        return KeyBlock(rows=rows, valid=valid, keys=None, all_valid=all_valid, keyed=not has_invalid, slots=slots)
    variant = fastpath.choose(key_decode.FAST_PATH, flat.device) if key_decode.usable(flat) else None
    if variant is None:
        keys = _decode_keys_torch(flat, entries, valid, all_valid)
    else:
        keys = torch.empty(rows.numel(), width, 576, dtype=torch.float64, device=flat.device)
        slots = entries if all_valid else torch.where(valid, entries, -1)
        key_decode.launch(flat, slots.reshape(-1), keys.view(-1, 576), key_decode.Decoder(key_decode.code_table(flat.device), variant))
    return KeyBlock(rows=rows, valid=valid, keys=keys, all_valid=all_valid, keyed=not has_invalid)


def iter_key_blocks(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    has_invalid: bool,
    key_budget: int,
    decode: bool = True,
) -> Iterator[KeyBlock]:
    """All non-empty rows' keys as KeyBlocks, chunk_plan's chunks (after checking the stream's
    preconditions); the host reads the row plan once, then nothing per block. decode False:
    the blocks' slots instead of their keys (gather_keys)."""
    start, length = row_bounds(indptr)
    # batch budget 0: one chunk per plan
    plans, flags = checked_plan(
        indices, indptr, kv_cache, has_invalid=has_invalid, key_budget=key_budget, batch_budget=0, bounds=(start, length)
    )
    raise_stream(indices, indptr, kv_cache.numel() // RECORD_BYTES, has_invalid=has_invalid, flags=flags)
    for plan in plans:
        yield gather_keys(
            plan.rows, start, length, indices, kv_cache, has_invalid=has_invalid, width=plan.width, full=plan.full, decode=decode
        )


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
    for rows, start, length in _planned_chunks(indices, indptr, kv_cache, has_invalid=has_invalid, key_budget=key_budget):
        yield gather_chunk(rows, start, length, indices, kv_cache, has_invalid=has_invalid, scale_model=scale_model)
