"""Recipe -> tensors. Everything a recipe determines is bit-identical on every device.

Data of a KV row, a query element or an index entry is a pure function of (recipe seed, what it
is, its id) via `strategies.rng`, so values do not depend on which other rows are referenced.
The index stream is built on the CPU and moved; row and query data are generated on the target
device with integer hashing and IEEE arithmetic only, which give the same bits everywhere.
A pack (a recipe with parts: strategies.recipe, "Packs") holds the bytes of its parts as each
is materialised alone, packed into one call (materialize_pack builds the parts together). Only
referenced rows are materialized; a cache larger than 64 MiB is allocated with `torch.empty` and
only referenced rows plus their neighbours and row 0 are written, so a cache over 4 GiB costs
almost no RAM on a CPU (untouched pages).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kernel.fp8 import round_f32_to_bf16_no_nan
from kernel.host_copy import move_to
from kernel.record import ENGINE_WRITERS, LATENT_DIM, RECORD_BYTES, ROPE_DIM, ROPE_OFFSET, SCALE_OFFSET, encode_records
from kernel.writers.sglang import WriterUnavailable, write_records
from strategies import layouts, rng
from strategies.recipe import ROWS_BEYOND_4GIB, MemoryEstimate, Recipe, RecipeError, RecipeTooLarge, memory_estimate

HEAD_DIM = LATENT_DIM + ROPE_DIM
SMALL_CACHE_BYTES = 64 * 2**20
_ID_STRIDE = 1 << 24  # ids of (row, offset) pairs: row * 2^24 + offset


@dataclass
class Problem:
    """A materialized call: the kernel's arguments plus what the recipe knows about them (plain
    data: conformance.judging.harness.call_kernel makes the call).

    referenced_rows: int64 [U] sorted unique KV rows consumed by valid entries (CPU);
    poison_rows: int64 [P] rows written with the NaN poison record (CPU).
    """

    recipe: Recipe
    q: torch.Tensor
    kv_cache: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    softmax_scale: float
    has_invalid: bool
    return_lse: bool
    out: torch.Tensor | None
    referenced_rows: torch.Tensor
    poison_rows: torch.Tensor

    @property
    def args(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]:
        """The contract call's positional arguments: (q, kv_cache, indices, indptr, softmax_scale)."""
        return (self.q, self.kv_cache, self.indices, self.indptr, self.softmax_scale)

    @property
    def options(self) -> dict[str, Any]:
        """The contract call's keyword arguments: has_invalid, return_lse and out (None: none given)."""
        return {"has_invalid": self.has_invalid, "return_lse": self.return_lse, "out": self.out}


def _stream_arrays(recipe: Recipe) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(indptr int64 [n_q + 1], pair rows, pair offsets, pair positions, the pairs' ids (row * 2^24 +
    offset), all int64 numpy arrays, and the index stream's length: the largest indptr entry plus
    recipe.stream_tail; stream_tail for no rows).

    numpy, as the whole index side (_indexed): single-threaded (torch's CPU repeat_interleave
    opens a parallel region for any size, which costs milliseconds per call when several
    processes share the cores), and a numpy op on these small arrays costs a fraction of a torch
    op's dispatch."""
    lengths = np.asarray(recipe.row_lengths, dtype=np.int64).reshape(-1)
    indptr = np.full(recipe.n_q + 1, recipe.stream_offset, dtype=np.int64)
    indptr[1:] += np.cumsum(lengths)
    positive = np.maximum(lengths, 0)
    pair_rows = np.repeat(np.arange(recipe.n_q, dtype=np.int64), positive)
    firsts = np.cumsum(positive) - positive
    pair_offsets = np.arange(int(positive.sum()), dtype=np.int64) - np.repeat(firsts, positive)
    pair_positions = indptr[:-1][pair_rows] + pair_offsets
    pair_ids = pair_rows * _ID_STRIDE + pair_offsets
    n_idx = (int(indptr.max()) if indptr.size else 0) + recipe.stream_tail
    return indptr, pair_rows, pair_offsets, pair_positions, pair_ids, n_idx


Drawn = dict[str, np.ndarray]  # rng.host_integers_many values by stream name (_index_draws, _invalid_draws)


def _index_low(recipe: Recipe) -> int:
    """The smallest KV row an index pattern draws."""
    return ROWS_BEYOND_4GIB if recipe.index_pattern == "beyond_4gib" else (1 if recipe.poison else 0)


def _index_draws(recipe: Recipe, pair_rows: np.ndarray, pair_ids: np.ndarray) -> list[tuple[str, np.ndarray, int]]:
    """The (stream, ids, high) integer draws _index_values reads (rng.host_integers_many), those that
    depend on no other draw: duplicates' pool draw reads its pick draw and is drawn by
    _index_values itself."""
    span = recipe.cache_rows - _index_low(recipe)
    pattern = recipe.index_pattern
    if pattern in ("uniform", "beyond_4gib", "sorted", "reversed"):
        return [("index", pair_ids, span)]
    if pattern == "clustered":
        return [("cluster", pair_rows, span), ("index", pair_ids, min(span, 128))]
    if pattern == "duplicates":
        return [("pick", pair_ids, 8)]
    if pattern == "tail":
        return [("index", pair_ids, min(span, 256))]
    raise AssertionError(pattern)


def _index_values(recipe: Recipe, pair_rows: np.ndarray, drawn: Drawn) -> np.ndarray:
    """The consumed entries' KV rows by the recipe's index pattern (int64), from the draws of
    _index_draws in `drawn`."""
    seed, n = recipe.seed, recipe.cache_rows
    low = _index_low(recipe)
    span = n - low
    pattern = recipe.index_pattern
    if pattern in ("uniform", "beyond_4gib", "sorted", "reversed"):
        values = low + drawn["index"]
        if pattern in ("sorted", "reversed"):
            key = values if pattern == "sorted" else (n - 1 - values)
            order = np.argsort(pair_rows * n + key, kind="stable")
            values = values[order]
        return values
    if pattern == "clustered":
        return low + (drawn["cluster"] + drawn["index"]) % span
    if pattern == "duplicates":
        return low + rng.host_integers(seed, "pool", pair_rows * 8 + drawn["pick"], span)
    if pattern == "tail":
        return n - 1 - drawn["index"]
    raise AssertionError(pattern)


def _invalid_draws(recipe: Recipe, pair_ids: np.ndarray) -> list[tuple[str, np.ndarray, int]]:
    """The integer draws _apply_invalid reads (none but for the scattered pattern)."""
    if recipe.invalid_pattern != "scattered" or pair_ids.size == 0:
        return []
    return [("invalid", pair_ids, 1000), ("negative", pair_ids, 3)]


def _apply_invalid(recipe: Recipe, values: np.ndarray, pair_rows: np.ndarray, pair_offsets: np.ndarray, drawn: Drawn) -> np.ndarray:
    """`values` with the recipe's invalid pattern applied (negative entries), from the draws of
    _invalid_draws in `drawn`."""
    pattern = recipe.invalid_pattern
    if pattern == "none" or values.size == 0:
        return values
    if pattern == "scattered":
        chosen = drawn["invalid"] < recipe.invalid_permille
        negative = -1 - 7 * drawn["negative"]
        return np.where(chosen, negative, values)
    lengths = np.maximum(np.asarray(recipe.row_lengths, dtype=np.int64), 0)[pair_rows]
    if pattern == "tail":
        chosen = pair_offsets >= lengths - np.maximum(lengths // 4, 1)
    elif pattern == "leading_tile":
        chosen = pair_offsets < 128
    else:  # all
        chosen = np.ones(values.shape, dtype=bool)
    return np.where(chosen, -1, values)


@functools.cache
def _columns(width: int, device: torch.device) -> torch.Tensor:
    """arange(width) (int64) on `device`; made once, read only."""
    return torch.arange(width, dtype=torch.int64, device=device)


def _row_ids(rows: torch.Tensor, width: int) -> torch.Tensor:
    """The ids of a row part's values: rows[:, None] * width + column, int64 [U, width] (rows int64)."""
    return torch.add(_columns(width, rows.device), rows.unsqueeze(1), alpha=width)


# the distributions' constants, and the hash streams each distribution reads (one key per stream:
# _values and _pack_records take them from the recipe's seed, or per row for a pack)
_BLOCK_FACTORS = {"zero_blocks": 0.0, "tiny_blocks": 2.0**-30}  # a latent's chosen 128-value blocks
_PEAKS = {"max57344": 57344.0, "above_cap": 65536.0}  # one latent value per row
_LATENT_LARGE = 1000.0
_ROPE_FACTORS = {"normal": 1.0, "large": 64.0, "tiny": 2.0**-20, "zero": 0.0}
_Q_FACTORS = {"large": 64.0, "tiny": 2.0**-40}
_Q_BLOCK_FACTORS = {"zero_blocks": 0.0, "tiny_blocks": 2.0**-120}  # a query's chosen 128-value latent blocks
_LATENT_STREAMS = {
    "heavy": ("heavy",),
    "outliers": ("outlier_at", "outlier_size"),
    **{kind: ("blocks",) for kind in _BLOCK_FACTORS},
    **{kind: ("peak_at", "peak_sign") for kind in _PEAKS},
    "large": (),
}
_Q_BLOCK_STREAMS = ("q_blocks",)

Keys = dict[str, "int | torch.Tensor"]  # a stream key per stream: one int, or int64 [R] (one per row)


def _per_row(key: int | torch.Tensor, ids: torch.Tensor) -> int | torch.Tensor:
    """`key` shaped to broadcast over ids [R, ...] (a per-row key tensor [R] gets ids' other axes)."""
    return key if isinstance(key, int) else key.view(-1, *([1] * (ids.dim() - 1)))


def _seed_keys(seed: int, streams: tuple[str, ...]) -> Keys:
    """The recipe-alone keys of `streams` (rng.stream_key of the recipe's seed)."""
    return {stream: rng.stream_key(seed, stream) for stream in streams}


def _latent_ids(dist: str, rows: torch.Tensor) -> list[torch.Tensor]:
    """The ids each stream of _LATENT_STREAMS[dist] hashes for KV rows `rows`, in that order
    (none for a kind without streams): a value's id row * 512 + column, a 128-value scale
    block's row * 4 + block, a row's own number."""
    if dist == "heavy":
        return [_row_ids(rows, LATENT_DIM)]
    if dist == "outliers":
        block_ids = _row_ids(rows, 4)
        return [block_ids, block_ids]
    if dist in _BLOCK_FACTORS:
        return [_row_ids(rows, 4)]
    if dist in _PEAKS:
        return [rows, rows]
    return []


def _query_streams(dist: str) -> tuple[str, ...]:
    """The hash streams the query distribution `dist` reads."""
    return _Q_BLOCK_STREAMS if dist in _Q_BLOCK_FACTORS else ()


def _query_ids(dist: str, q_rows: torch.Tensor, heads: int) -> list[torch.Tensor]:
    """The ids each stream of _query_streams(dist) hashes for query rows `q_rows` (each row's
    number within its recipe): a latent block's id row * H * 4 + head * 4 + block."""
    return [_row_ids(q_rows, heads * 4)] if dist in _Q_BLOCK_FACTORS else []


def _draws(streams: tuple[str, ...], keys: Keys, ids: list[torch.Tensor]) -> list[tuple[int | torch.Tensor, torch.Tensor]]:
    """(key, ids) of each stream, the key shaped to broadcast over its ids (rng.keyed_inputs)."""
    return [(_per_row(keys[stream], i), i) for stream, i in zip(streams, ids, strict=True)]


def _latent_in_place(dist: str, x: torch.Tensor, hashes: list[torch.Tensor]) -> None:
    """The latent distribution `dist` applied to normal_like values x (f64 [U, 512], in place),
    from `hashes`: the int64 hashes (rng.keyed_hash64) of _latent_ids' ids in each stream of
    _LATENT_STREAMS[dist] ("normal" leaves the values; "exact" is not drawn from normal values:
    _values)."""
    if dist in ("normal", "exact"):
        return
    if dist == "heavy":
        x.div_(torch.sqrt(rng.uniform_from_hash(hashes[0]) + 2.0**-10))
    elif dist == "outliers":
        where = rng.integers_from_hash(hashes[0], 128).unsqueeze(-1)
        boost = 64 + 448 * rng.uniform_from_hash(hashes[1])
        blocks = x.view(-1, 4, 128)
        blocks.scatter_(2, where, (torch.gather(blocks, 2, where).sign() + 0.5).sign() * boost.unsqueeze(-1))
    elif dist in _BLOCK_FACTORS:
        chosen = rng.uniform_below(hashes[0], 0.3)
        factor = torch.ones(chosen.shape, dtype=torch.float64, device=x.device).masked_fill_(chosen, _BLOCK_FACTORS[dist])
        x.view(-1, 4, 128).mul_(factor.unsqueeze(-1))
    elif dist in _PEAKS:
        where = rng.integers_from_hash(hashes[0], LATENT_DIM)
        negative = rng.uniform_below(hashes[1], 0.5)
        peak = torch.full(negative.shape, _PEAKS[dist], dtype=torch.float64, device=x.device).masked_fill_(negative, -_PEAKS[dist])
        x.scatter_(1, where.unsqueeze(1), peak.unsqueeze(1))
    elif dist == "large":
        x.mul_(_LATENT_LARGE)
    else:
        raise AssertionError(dist)


def _query_in_place(dist: str, x: torch.Tensor, hashes: list[torch.Tensor]) -> None:
    """The query distribution `dist` applied to normal_like values x (f64 [n, H, 576], in place),
    from `hashes`: the int64 hashes of _query_ids' ids in _query_streams(dist) ("exact" is not
    drawn from normal values: _values)."""
    heads = x.shape[1]
    if dist in _Q_FACTORS:
        x.mul_(_Q_FACTORS[dist])
    elif dist in _Q_BLOCK_FACTORS:
        chosen = rng.uniform_below(hashes[0], 0.3).view(-1, heads, 4)
        factor = torch.ones(chosen.shape, dtype=torch.float64, device=x.device).masked_fill_(chosen, _Q_BLOCK_FACTORS[dist])
        x[..., :LATENT_DIM].view(-1, heads, 4, 128).mul_(factor.unsqueeze(-1))
    elif dist not in ("normal", "exact"):
        raise AssertionError(dist)


def _exact_query(recipe: Recipe, device: torch.device) -> torch.Tensor:
    """f64 [n_q, H, 576]: one signed 1 in the latent and one in the rope part of each head."""
    seed, n_q, heads = recipe.seed, recipe.n_q, recipe.heads
    head_ids = torch.arange(n_q * heads, dtype=torch.int64, device=device).view(n_q, heads, 1)
    sign_ids = torch.cat((head_ids * 2, head_ids * 2 + 1), dim=-1)
    latent_at, rope_at, signs = rng.integers_many(
        seed, [("q_at", head_ids, LATENT_DIM), ("q_rope_at", head_ids, ROPE_DIM), ("q_sign", sign_ids, 2)]
    )
    at = torch.cat((latent_at, LATENT_DIM + rope_at), dim=-1)
    sign = (2 * signs - 1).to(torch.float64)
    return torch.zeros(n_q, heads, HEAD_DIM, dtype=torch.float64, device=device).scatter_(2, at, sign)


def _values(recipe: Recipe, rows: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(latent f32 [U, 512] of bf16 values, rope bf16 [U, 64]) of KV rows `rows` (on `device`) and
    the query, bf16 [n_q, H, 576] (contiguous), on `device`.

    Each value is a function of (seed, its stream: "latent", "rope" or "q", its id: row * 512 +
    column, row * 64 + column, or the query's flat element number). The parts drawn from
    normal_like values share one buffer: their hash words are built into it, hashed, turned into
    normal values, shaped by the recipe's distributions in place and rounded to bf16 together
    (about 45 device ops for the three parts instead of one chain each). "exact" parts are small
    integers of their own streams."""
    seed, u = recipe.seed, rows.numel()
    n_q_values = recipe.n_q * recipe.heads * HEAD_DIM
    drawn = (recipe.latent != "exact", recipe.rope != "exact", recipe.q != "exact")
    sizes = [n * d for n, d in zip((u * LATENT_DIM, u * ROPE_DIM, n_q_values), drawn)]
    latent_streams = _LATENT_STREAMS.get(recipe.latent, ()) if drawn[0] else ()
    q_streams = _query_streams(recipe.q) if drawn[2] else ()
    latent_ids = _latent_ids(recipe.latent, rows) if latent_streams else []
    q_ids = _query_ids(recipe.q, torch.arange(recipe.n_q, dtype=torch.int64, device=device), recipe.heads) if q_streams else []
    latent_draws = _draws(latent_streams, _seed_keys(seed, latent_streams), latent_ids)
    q_draws = _draws(q_streams, _seed_keys(seed, q_streams), q_ids)
    # the distributions' draws share the values' buffer: one mix64 hashes everything (rng.keyed_inputs)
    values_size = sum(sizes)
    words = torch.empty(values_size + sum(ids.numel() for _, ids in latent_draws + q_draws), dtype=torch.int64, device=device)
    latent_words, rope_words, q_words = words[:values_size].split(sizes)
    draw_hashes = rng.keyed_inputs(latent_draws + q_draws, words[values_size:])
    if drawn[0]:
        rng.row_words(seed, "latent", rows, LATENT_DIM, out=latent_words.view(u, LATENT_DIM))
    if drawn[1]:
        rng.row_words(seed, "rope", rows, ROPE_DIM, out=rope_words.view(u, ROPE_DIM))
    if drawn[2]:
        rng.hash_input(seed, "q", torch.arange(n_q_values, dtype=torch.int64, device=device), out=q_words)
    rng.mix64(words)  # in place: the sections above now hold their hashes
    normal = rng.normal_from_hash(words[:values_size])
    latent_x, rope_x, q_x = normal.split(sizes)
    if drawn[0]:
        _latent_in_place(recipe.latent, latent_x.view(u, LATENT_DIM), draw_hashes[: len(latent_draws)])
    if drawn[1] and _ROPE_FACTORS[recipe.rope] != 1.0:
        rope_x.mul_(_ROPE_FACTORS[recipe.rope])  # 0.0 keeps the values' signs: signed zeros
    if drawn[2]:
        _query_in_place(recipe.q, q_x.view(recipe.n_q, recipe.heads, HEAD_DIM), draw_hashes[len(latent_draws) :])
    rounded = round_f32_to_bf16_no_nan(normal.to(torch.float32))  # normal values times finite factors: no NaN
    latent_bf, rope_bf, q_bf = rounded.split(sizes)
    # "exact" parts: small integers of their own streams, drawn together
    parts = (("latent_int", LATENT_DIM, drawn[0]), ("rope_int", ROPE_DIM, drawn[1]))
    exact = [(stream, _row_ids(rows, width), 5) for stream, width, from_normal in parts if not from_normal]
    ints = iter(rng.integers_many(seed, exact))
    latent = latent_bf.view(u, LATENT_DIM).to(torch.float32) if drawn[0] else (next(ints) - 2).to(torch.float32)
    rope = rope_bf.view(u, ROPE_DIM) if drawn[1] else (next(ints) - 2).to(torch.bfloat16)
    if drawn[2]:
        q = q_bf.view(recipe.n_q, recipe.heads, HEAD_DIM)
    else:
        q = round_f32_to_bf16_no_nan(_exact_query(recipe, device).to(torch.float32))  # 0 and +-1
    return latent, rope, q


def _poison_record(count: int) -> torch.Tensor:
    record = torch.full((count, RECORD_BYTES), 0xFF, dtype=torch.uint8)
    record[:, SCALE_OFFSET:ROPE_OFFSET] = torch.tensor([0x00, 0x00, 0xC0, 0x7F] * 4, dtype=torch.uint8)  # f32 NaN
    record[:, ROPE_OFFSET:] = torch.tensor([0xC0, 0x7F] * ROPE_DIM, dtype=torch.uint8)  # bf16 NaN
    return record


def _strided(values: torch.Tensor, pad: tuple[int, int], fill: float, device: torch.device) -> torch.Tensor:
    """values [n, H, D] copied into a NaN-filled buffer with padded row/head strides."""
    n, heads, width = values.shape
    head_stride = width + pad[1]
    row_stride = heads * head_stride + pad[0]
    storage = torch.full((max(n * row_stride, 1),), fill, dtype=values.dtype, device=device)
    view = storage.as_strided((n, heads, width), (row_stride, head_stride, 1))
    view.copy_(values)
    return view


def _corrupt_indices(recipe: Recipe, entries: np.ndarray, consumed: np.ndarray) -> None:
    """Apply recipe.corruptions of kind index_out_of_range to the consumed entries (int64, in place)."""
    for number, corruption in enumerate(recipe.corruptions):
        if corruption["kind"] != "index_out_of_range":
            continue
        count = int(corruption.get("count", 1))
        positions = np.flatnonzero(consumed & (entries >= 0))
        if positions.size:
            positions = positions[rng.host_integers(recipe.seed, f"corrupt{number}", np.arange(count, dtype=np.int64), positions.size)]
        oob = rng.host_integers(recipe.seed, f"oob{number}", np.arange(positions.size, dtype=np.int64), 1000)
        entries[positions] = recipe.cache_rows + oob


def _corrupt_records(recipe: Recipe, records: torch.Tensor) -> None:
    """Apply the record corruptions of recipe.corruptions to the referenced rows' records in place
    (their rows and blocks drawn on the records' device: the same numbers everywhere)."""
    for number, corruption in enumerate(recipe.corruptions):
        kind, count = corruption["kind"], int(corruption.get("count", 1))
        if kind == "index_out_of_range" or records.shape[0] == 0:
            continue
        picks = torch.arange(count, device=records.device)
        rows, blocks = rng.integers_many(recipe.seed, [(f"corrupt{number}", picks, records.shape[0]), (f"corrupt_block{number}", picks, 4)])
        scales = records[:, SCALE_OFFSET:ROPE_OFFSET].clone().view(torch.float32)
        # values written as device scalars: a Python number assigned through tensor indices is
        # copied from the host, and that copy waits for the device (kernel.host_copy)
        if kind == "nan_codes":
            records[rows, blocks * 128 + 5] = torch.full((), 0x7F, dtype=torch.uint8, device=records.device)
            continue
        if kind == "scale_not_pow2":
            scales[rows, blocks] = scales[rows, blocks] * 1.5
        elif kind == "scale_above_cap":
            scales[rows, blocks] = torch.full((), 256.0, dtype=torch.float32, device=records.device)
        elif kind == "zero_scale":
            scales[rows, blocks] = torch.full((), 0.0, dtype=torch.float32, device=records.device)
        records[:, SCALE_OFFSET:ROPE_OFFSET] = scales.view(torch.uint8).view(-1, 16)


@functools.cache
def _poison_on(device: torch.device) -> torch.Tensor:
    """The poison record [1, 656] on `device` (made once per device; read only)."""
    return _poison_record(1).to(device)


def _to_device(parts: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """int64 CPU tensors moved to `device` in one host-to-device copy, queued without a host sync
    (kernel.host_copy; the same tensors on the CPU)."""
    if device.type == "cpu" or not parts:
        return parts
    moved = move_to(torch.cat(parts), device)
    return list(moved.split([t.numel() for t in parts]))


MEMORY_LIMIT_ENV = "CONFORMANCE_MEMORY_LIMIT"
HOST_MEMORY_FRACTION = 0.5  # of the RAM available at first use (MemAvailable)
DEVICE_MEMORY_FRACTION = 0.8  # of the accelerator's free memory at first use
_UNITS = {
    "": 1,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size(text: str) -> int:
    """Bytes from "8GiB", "8G" (binary), "8GB" (decimal), "512M", "1e9" or a plain integer;
    ValueError naming the text otherwise. "0" means no limit."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K, M, G, T, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(n: int) -> str:
    """ "1.5 GiB" etc."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _available_ram() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


@functools.cache
def _measured_limits(device: torch.device) -> tuple[int | None, int | None]:
    """(host, device) limits sized from this machine at first use, then kept for the process:
    a later reading under a passing load spike must not shrink the limit mid-session."""
    ram = _available_ram()
    host = int(ram * HOST_MEMORY_FRACTION) if ram else None
    dev: int | None = None
    if device.type != "cpu":
        try:
            free, _ = torch.cuda.mem_get_info(device)
            dev = int(free * DEVICE_MEMORY_FRACTION)
        except (RuntimeError, AssertionError, ValueError):
            dev = None
    return host, dev


def memory_limit(device: torch.device | str = "cpu") -> tuple[int | None, int | None, str]:
    """(host limit, device limit, where they come from), bytes; None means unlimited / unknown.

    $CONFORMANCE_MEMORY_LIMIT (a size, see parse_size; 0 = no limit) sets both, read on every
    call; otherwise the limits are sized once per process and device, at first use: host
    HOST_MEMORY_FRACTION of the RAM available then, device DEVICE_MEMORY_FRACTION of the
    accelerator's free memory then. ValueError for a malformed variable."""
    device = torch.device(device)
    value = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if value:
        try:
            limit = parse_size(value)
        except ValueError as err:
            raise ValueError(f"${MEMORY_LIMIT_ENV}: {err}") from None
        return (limit or None), (limit or None), f"${MEMORY_LIMIT_ENV}={value}"
    host, dev = _measured_limits(device)
    how = (
        f"{HOST_MEMORY_FRACTION:.0%} of the RAM available at first use"
        + (f", {DEVICE_MEMORY_FRACTION:.0%} of free {device.type} memory" if device.type != "cpu" else "")
        + f"; set ${MEMORY_LIMIT_ENV} or --memory-limit"
    )
    return host, dev, how


def check_memory(recipe: Recipe, device: torch.device | str = "cpu") -> MemoryEstimate:
    """The recipe's memory estimate (strategies.recipe.memory_estimate) when it fits the limits
    (memory_limit); RecipeTooLarge naming the estimate and the limit otherwise."""
    device = torch.device(device)
    estimate = memory_estimate(recipe, device.type)
    try:
        host_limit, dev_limit, how = memory_limit(device)
    except ValueError as err:
        raise RecipeTooLarge(str(err)) from None
    biggest = max(estimate.parts, key=lambda k: estimate.parts[k])
    for kind, need, limit in (("host", estimate.host_bytes, host_limit), (device.type, estimate.device_bytes, dev_limit)):
        if limit is not None and need > limit:
            raise RecipeTooLarge(
                f"recipe too large: needs about {format_size(need)} of {kind} memory (estimate; largest part {biggest} "
                f"{format_size(estimate.parts[biggest])}, {recipe.total_keys:,} keys, {recipe.cache_rows:,} cache rows), "
                f"limit {format_size(limit)} ({how})"
            )
    return estimate


@dataclass(frozen=True)
class _Indexed:
    """The CPU side of one plain recipe (materialize): indptr int64 [n_q + 1], the stream positions
    its rows consume (row by row: _stream's pair positions), the index stream
    (entries int64 [n_idx], corrupted where the recipe says), consumed bool [n_idx], referenced
    (sorted unique rows consumed by valid entries), written (a large cache's other rows written:
    neighbours, rows 0 and last), poison_rows, and whether the cache is small (written whole)."""

    indptr: torch.Tensor
    positions: torch.Tensor
    entries: torch.Tensor
    consumed: torch.Tensor
    referenced: torch.Tensor
    written: torch.Tensor
    poison_rows: torch.Tensor
    small: bool


def _indexed(recipe: Recipe) -> _Indexed:
    """The index stream and the rows it references (built with numpy on the host, _stream_arrays;
    returned as CPU tensors sharing the arrays' memory; see _Indexed)."""
    indptr, pair_rows, pair_offsets, pair_positions, pair_ids, n_idx = _stream_arrays(recipe)
    low = 1 if recipe.poison else 0
    filler_span = recipe.cache_rows - low
    # every draw that reads no other draw, hashed together (rng.host_integers_many: the same values)
    pair_draws = _index_draws(recipe, pair_rows, pair_ids) + _invalid_draws(recipe, pair_ids)
    stream_ids = np.arange(n_idx, dtype=np.int64)
    filler, *drawn = rng.host_integers_many(recipe.seed, [("filler", stream_ids, max(filler_span, 1)), *pair_draws])
    by_stream = {stream: values for (stream, _, _), values in zip(pair_draws, drawn, strict=True)}
    values = _index_values(recipe, pair_rows, by_stream)
    values = _apply_invalid(recipe, values, pair_rows, pair_offsets, by_stream)
    entries = filler
    if low:
        entries += low  # a fresh array
    pairs = pair_positions.size
    if pairs:
        owner = np.full(n_idx, pairs, dtype=np.int64)  # the first pair consuming each entry
        np.minimum.at(owner, pair_positions, np.arange(pairs, dtype=np.int64))
        consumed = owner < pairs
        entries[consumed] = values[owner[consumed]]
    else:
        consumed = np.zeros(n_idx, dtype=bool)
    if recipe.unconsumed == "garbage":  # entries no row consumes: values the kernel must not read
        entries = np.where(consumed, entries, layouts.garbage(recipe.seed, stream_ids, recipe.cache_rows))

    n_rows = recipe.cache_rows
    # rows consumed by valid entries get records (before an index is corrupted: its row keeps its record)
    referenced = np.unique(entries[consumed & (entries >= 0) & (entries < n_rows)])
    _corrupt_indices(recipe, entries, consumed)
    small = n_rows * RECORD_BYTES <= SMALL_CACHE_BYTES
    written = np.empty(0, dtype=np.int64)  # a large cache's rows written besides the referenced ones
    if not small:  # rows 0 and last and the referenced rows' neighbours: poisoned or zeroed
        near = np.concatenate((np.array([0, n_rows - 1], dtype=np.int64), referenced - 1, referenced + 1))
        near = np.unique(near[(near >= 0) & (near < n_rows)])
        written = near[~np.isin(near, referenced)]
    poison_rows = written if recipe.poison else np.empty(0, dtype=np.int64)
    if recipe.poison and small:
        unreferenced = np.ones(n_rows, dtype=bool)
        unreferenced[referenced] = False
        poison_rows = np.flatnonzero(unreferenced)
    return _Indexed(*map(_host_tensor, (indptr, pair_positions, entries, consumed, referenced, written, poison_rows)), small=small)


def _host_tensor(array: np.ndarray) -> torch.Tensor:
    """`array` as a CPU tensor sharing its memory; an empty one as a fresh tensor (numpy gives
    empty arrays stride 0, which torch's views of other element sizes refuse)."""
    tensor = torch.from_numpy(array)
    return tensor if array.size else torch.empty(array.shape, dtype=tensor.dtype)


class _IndexedCache:
    """The index sides (_indexed) of the parts packed lately, least recently used first, at most
    `max_bytes` of tensors in all. A campaign's packs repeat many parts (Hypothesis builds most
    examples by copying spans of earlier ones), and a part's index side is a function of the
    part alone, built on the host part by part; its tensors are only read (materialize_pack
    copies what it returns)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._sides: dict[Recipe, tuple[_Indexed, int]] = {}

    def get(self, part: Recipe) -> _Indexed:
        """_indexed(part), from the cache when it holds it."""
        held = self._sides.pop(part, None)
        if held is not None:
            self.hits += 1
            self._sides[part] = held  # most recently used last
            return held[0]
        self.misses += 1
        side = _indexed(part)
        size = sum(t.numel() * t.element_size() for t in vars(side).values() if isinstance(t, torch.Tensor))
        if size <= self.max_bytes:
            while self._sides and self.bytes + size > self.max_bytes:
                self.bytes -= self._sides.pop(next(iter(self._sides)))[1]
            self._sides[part] = (side, size)
            self.bytes += size
        return side


PACKED_SIDES = _IndexedCache(max_bytes=64 * 2**20)  # materialize_pack's parts' index sides


def materialize(recipe: Recipe, device: torch.device | str = "cpu") -> Problem:
    """Build the problem of `recipe` on `device` (see the module docstring). The recipe's memory
    estimate is checked first (check_memory): RecipeTooLarge before anything is allocated. A pack
    (a recipe with parts) is built by materialize_pack."""
    device = torch.device(device)
    if recipe.parts:
        return materialize_pack(recipe, device)
    check_memory(recipe, device)
    side = _indexed(recipe)
    referenced, poison_rows, small, n_rows = side.referenced, side.poison_rows, side.small, recipe.cache_rows
    # every index tensor the device needs, in one copy: row data is generated where it will live
    # (integer hashing and IEEE arithmetic give the same bits on every device)
    referenced_here, entries_here, indptr_here, written_here = _to_device([referenced, side.entries, side.indptr, side.written], device)
    latent, rope, q_values = _values(recipe, referenced_here, device)
    if recipe.writer in ENGINE_WRITERS:  # the engine's own code (kernel.writers.sglang)
        try:
            records = write_records(latent, rope)
        except WriterUnavailable as err:
            raise RecipeError(f"writer {recipe.writer!r} cannot write this cache here: {err}") from None
    else:
        records = encode_records(latent, rope, recipe.writer, latent_known_finite=True)  # type: ignore[arg-type]  # _values: |latent| <= 65536
    _corrupt_records(recipe, records)

    if small and not recipe.poison and device.type == "cpu":
        # calloc'd (numpy): the pages stay the kernel's shared zero page until written, so only the
        # referenced rows cost a page fault, instead of a memset of the whole cache
        kv = torch.from_numpy(np.zeros((n_rows, RECORD_BYTES), dtype=np.uint8))
    elif small and not recipe.poison:
        kv = torch.zeros((n_rows, RECORD_BYTES), dtype=torch.uint8, device=device)
    else:  # every row written below (small and poisoned), or only the referenced rows and their neighbours
        kv = torch.empty((n_rows, RECORD_BYTES), dtype=torch.uint8, device=device)
    if recipe.poison:
        poison = _poison_on(device)
        if small:
            kv.copy_(poison.expand(n_rows, RECORD_BYTES))  # every row; the referenced ones are overwritten below
        else:
            kv[written_here] = poison
    elif not small:
        kv[written_here] = 0
    kv[referenced_here] = records

    if recipe.q_layout == "rows":
        q = _strided(q_values, recipe.q_pad, float("nan"), device)
    else:  # head-major, a stride 0, overlapping heads (strategies.layouts)
        q_strides = layouts.strides(recipe.q_layout, recipe.n_q, recipe.heads, HEAD_DIM, recipe.q_pad)
        q = layouts.place(q_values, *q_strides, float("nan"), device)
    out = None
    if recipe.out_pad is not None:
        empty = torch.empty((recipe.n_q, recipe.heads, LATENT_DIM), dtype=torch.bfloat16, device=device)
        if recipe.out_layout == "rows":
            out = _strided(empty.fill_(float("nan")), recipe.out_pad, float("nan"), device)
        else:
            out_strides = layouts.strides(recipe.out_layout, recipe.n_q, recipe.heads, LATENT_DIM, recipe.out_pad)
            out = layouts.place(empty.fill_(float("nan")), *out_strides, float("nan"), device)
    return Problem(
        recipe=recipe,
        q=q,
        kv_cache=kv if recipe.cache_shape is None else kv.view(*recipe.cache_shape, RECORD_BYTES),
        indices=entries_here.to(torch.int32),
        indptr=indptr_here.to(torch.int32),
        softmax_scale=recipe.scale_value,
        has_invalid=recipe.has_invalid,
        return_lse=recipe.return_lse,
        out=out,
        referenced_rows=referenced,
        poison_rows=poison_rows,
    )


def materialize_pack(recipe: Recipe, device: torch.device | str = "cpu") -> Problem:
    """The problem of the pack `recipe` on `device`; RecipeError for a recipe that is not a pack.
    The pack holds the parts' q rows one after the other, their caches one after the other in one
    flat [rows, 656] cache (bytes as in each part's cache alone: materialize), each part's consumed
    index entries offset by the rows before its cache (negative entries kept), and a stream
    rebuilt without gaps (row r's entries from indptr[r]; a row of negative length empty). Each row
    of the pack holds the same query vector and reads the same records as that row of its part
    alone, so a kernel that computes each row on its own gives every row the bits it gives it
    alone. The parts are built together (_pack_records: one pass over every part's rows) unless a
    part's data is "exact" or its writer is an engine's; then each part is materialised alone and
    its tensors copied into the pack's: the same bytes either way. A part's index side comes from
    PACKED_SIDES when an earlier pack held the same part."""
    if not recipe.parts:
        raise RecipeError("materialize_pack needs a pack (a recipe with parts)")
    device = torch.device(device)
    check_memory(recipe, device)
    parts = recipe.parts
    together = all(p.writer not in ENGINE_WRITERS and "exact" not in (p.latent, p.rope, p.q) for p in parts)
    sides = [PACKED_SIDES.get(part) for part in parts] if together else None
    problems = None if together else [materialize(part, device) for part in parts]
    row_offsets = np.cumsum([0, *(part.cache_rows for part in parts)])
    referenced = [s.referenced for s in sides] if sides else [p.referenced_rows for p in problems or []]
    poison = [s.poison_rows for s in sides] if sides else [p.poison_rows for p in problems or []]
    entries = [s.entries for s in sides] if sides else [p.indices.cpu().to(torch.int64) for p in problems or []]

    stream_offsets = np.cumsum([0, *(int(e.shape[0]) for e in entries)])
    positions, shifts = [], []
    consumed_at = [s.positions.numpy() for s in sides] if sides else [_stream_arrays(part)[3] for part in parts]  # row by row
    for consumed, first_row, first_entry in zip(consumed_at, row_offsets[:-1], stream_offsets[:-1], strict=True):
        positions.append(consumed + first_entry)
        shifts.append(np.full(consumed.shape, first_row, dtype=np.int64))
    stream = torch.cat(entries)[torch.from_numpy(np.concatenate(positions))]
    shift = torch.from_numpy(np.concatenate(shifts))
    indices = torch.where(stream >= 0, stream + shift, stream)
    indptr = torch.from_numpy(np.concatenate(([0], np.cumsum(np.asarray(recipe.row_lengths, dtype=np.int64)))))
    kv_rows = _shifted(referenced, row_offsets[:-1])
    poison_rows = _shifted(poison, row_offsets[:-1])

    total = int(row_offsets[-1])
    if device.type == "cpu":  # calloc'd: the pages no part writes stay untouched
        kv = torch.from_numpy(np.zeros((total, RECORD_BYTES), dtype=np.uint8))
    else:
        kv = torch.zeros((total, RECORD_BYTES), dtype=torch.uint8, device=device)
    if problems is not None:
        for part, problem, first_row in zip(parts, problems, row_offsets[:-1], strict=True):
            flat = problem.kv_cache.reshape(-1, RECORD_BYTES)
            if part.poison:  # every row written (NaN poison besides the referenced ones)
                kv[int(first_row) : int(first_row) + part.cache_rows] = flat
            elif problem.referenced_rows.numel():  # a packable cache is zero but for its referenced rows
                rows = move_to(problem.referenced_rows, device)
                kv[rows + int(first_row)] = flat[rows]
        q = torch.cat([p.q for p in problems])
        indices_here, indptr_here = _to_device([indices, indptr], device)
    else:
        writers = _writers(parts)
        counts = [r.numel() for r in referenced]
        names, distributions = _distribution_terms(parts, counts)
        terms = _pack_terms(parts, referenced, writers)
        moved = _to_device([indices, indptr, kv_rows, *terms, *distributions], device)
        indices_here, indptr_here, kv_rows_here = moved[:3]
        terms_here, distributions_here = moved[3 : 3 + len(terms)], moved[3 + len(terms) :]
        records, q = _pack_records(parts, counts, writers, *terms_here, names=names, distributions=distributions_here, device=device)
        # a poisoned part's rows: a packable cache is small, so its poison rows are every row it
        # does not reference (_indexed); its whole range is poisoned, consecutive poisoned parts
        # in one contiguous copy, and the referenced rows get their records below (the same
        # bytes as poisoning poison_rows)
        assert all(side.small for part, side in zip(parts, sides, strict=True) if part.poison)  # recipe validation
        for begin, end in _poisoned_ranges(parts, row_offsets):
            kv[begin:end] = _poison_on(device)
        kv[kv_rows_here] = records
    return Problem(
        recipe=recipe,
        q=q,
        kv_cache=kv,
        indices=indices_here.to(torch.int32),
        indptr=indptr_here.to(torch.int32),
        softmax_scale=recipe.scale_value,
        has_invalid=recipe.has_invalid,
        return_lse=recipe.return_lse,
        out=None,
        referenced_rows=kv_rows,
        poison_rows=poison_rows,
    )


def _poisoned_ranges(parts: tuple[Recipe, ...], row_offsets: np.ndarray) -> list[tuple[int, int]]:
    """[begin, end) row ranges of the pack's cache held by poisoned parts, consecutive poisoned
    parts merged into one range (`row_offsets`: each part's first row, then the total)."""
    ranges: list[tuple[int, int]] = []
    for part, begin, end in zip(parts, row_offsets[:-1], row_offsets[1:], strict=True):
        if not part.poison:
            continue
        if ranges and ranges[-1][1] == int(begin):
            ranges[-1] = (ranges[-1][0], int(end))
        else:
            ranges.append((int(begin), int(end)))
    return ranges


def _shifted(rows: list[torch.Tensor], firsts: np.ndarray) -> torch.Tensor:
    """The parts' row numbers (CPU int64 tensors) in the pack's cache: each part's shifted by the
    rows before its cache, concatenated (on the host, in numpy: no torch op per part)."""
    shifted = [r.numpy() + np.int64(first) for r, first in zip(rows, firsts, strict=True) if r.numel()]
    return torch.from_numpy(np.concatenate(shifted)) if shifted else torch.zeros(0, dtype=torch.int64)


def _pack_terms(parts: tuple[Recipe, ...], referenced: list[torch.Tensor], writers: list[str]) -> list[torch.Tensor]:
    """The CPU int64 tensors _pack_records needs, for one host-to-device copy: every part's
    referenced rows (its own row numbers: the hashes' ids) and their latent and rope stream keys
    (each part's own), each query row's number within its part and q stream key, and, where the
    parts have several `writers`, per writer the rows it writes (their positions in the
    concatenated `referenced`)."""
    counts = [r.numel() for r in referenced]

    def keys(stream: str, per: list[int]) -> torch.Tensor:
        return torch.from_numpy(np.repeat(np.array([rng.stream_key(p.seed, stream) for p in parts], dtype=np.int64), per))

    q_rows = torch.from_numpy(np.concatenate([np.arange(p.n_q, dtype=np.int64) for p in parts]))
    firsts = np.cumsum([0, *counts])
    by_writer = [
        torch.from_numpy(
            np.concatenate([np.arange(firsts[i], firsts[i + 1]) for i, p in enumerate(parts) if p.writer == writer]).astype(np.int64)
        )
        for writer in (writers if len(writers) > 1 else [])
    ]
    n_q = [p.n_q for p in parts]
    return [torch.cat(referenced), keys("latent", counts), keys("rope", counts), q_rows, keys("q", n_q), *by_writer]


def _f64_bits(values: list[float] | np.ndarray) -> torch.Tensor:
    """float64 values as int64 bit patterns (moved with the index tensors; .view(float64) after)."""
    return torch.from_numpy(np.asarray(values, dtype=np.float64).view(np.int64).copy())


def _distribution_terms(parts: tuple[Recipe, ...], counts: list[int]) -> tuple[list[tuple[str, str]], list[torch.Tensor]]:
    """What _distribution_draws needs to apply every part's latent, rope and q distribution at
    once (CPU int64 tensors, for the pack's one host-to-device copy): per (target, kind) present,
    in `names` ("latent", "q" or "rope"/"q_scale" with kind ""), the positions of its parts' rows
    in the pack's referenced rows (query rows for "q") and each row's key of each stream the kind
    reads (its part's seed); for "rope" and "q_scale" each row's factor (float64 bits)."""
    n_q = [p.n_q for p in parts]
    firsts, q_firsts = np.cumsum([0, *counts]), np.cumsum([0, *n_q])
    names: list[tuple[str, str]] = []
    terms: list[torch.Tensor] = []

    def add(target: str, kind: str, chosen: list[int], starts: np.ndarray, sizes: list[int], streams: tuple[str, ...]) -> None:
        names.append((target, kind))
        terms.append(torch.from_numpy(np.concatenate([np.arange(starts[i], starts[i + 1], dtype=np.int64) for i in chosen])))
        for stream in streams:
            per_part = np.array([rng.stream_key(parts[i].seed, stream) for i in chosen], dtype=np.int64)
            terms.append(torch.from_numpy(np.repeat(per_part, [sizes[i] for i in chosen])))

    for kind, streams in _LATENT_STREAMS.items():
        chosen = [i for i, p in enumerate(parts) if p.latent == kind]
        if chosen:
            add("latent", kind, chosen, firsts, counts, streams)
    for kind in _Q_BLOCK_FACTORS:
        chosen = [i for i, p in enumerate(parts) if p.q == kind]
        if chosen:
            add("q", kind, chosen, q_firsts, n_q, _Q_BLOCK_STREAMS)
    if any(_ROPE_FACTORS[p.rope] != 1.0 for p in parts):  # x * 1.0 is x: one multiplication for every row
        names.append(("rope", ""))
        terms.append(_f64_bits(np.repeat([_ROPE_FACTORS[p.rope] for p in parts], counts)))
    if any(p.q in _Q_FACTORS for p in parts):
        names.append(("q_scale", ""))
        terms.append(_f64_bits(np.repeat([_Q_FACTORS.get(p.q, 1.0) for p in parts], n_q)))
    return names, terms


Job = tuple[str, str, torch.Tensor, int]  # _distribution_draws: (target, kind, positions or factors' bits, draws of the kind)


def _distribution_draws(
    names: list[tuple[str, str]], terms: list[torch.Tensor], rows: torch.Tensor, q_rows: torch.Tensor, heads: int
) -> tuple[list[Job], list[tuple[int | torch.Tensor, torch.Tensor]]]:
    """The first half of applying every part's distributions (_distribution_terms' `names` and
    `terms`, on the device): per name a job (target, kind, its positions in the pack's rows, or
    for "rope" and "q_scale" its factors' bits; how many draws it reads), and every kind's draws
    (per-row key, ids: _latent_ids of the referenced `rows`, each its part's own row number, or
    _query_ids of `q_rows`, each row's number within its part) in the jobs' order, for one mix
    with the values (rng.keyed_inputs)."""
    at = iter(terms)
    jobs: list[Job] = []
    draws: list[tuple[int | torch.Tensor, torch.Tensor]] = []
    for target, kind in names:
        if target in ("rope", "q_scale"):
            jobs.append((target, kind, next(at), 0))
            continue
        pos = next(at)
        streams = _LATENT_STREAMS[kind] if target == "latent" else _query_streams(kind)
        keys: Keys = {stream: next(at) for stream in streams}
        if streams and target == "latent":
            draws += _draws(streams, keys, _latent_ids(kind, rows.index_select(0, pos)))
        elif streams:
            draws += _draws(streams, keys, _query_ids(kind, q_rows.index_select(0, pos), heads))
        jobs.append((target, kind, pos, len(streams)))
    return jobs, draws


def _apply_distributions(jobs: list[Job], hashes: list[torch.Tensor], latent: torch.Tensor, rope: torch.Tensor, q: torch.Tensor) -> None:
    """The second half: every part's distributions applied in place to the pack's normal values,
    latent f64 [U, 512], rope [U, 64] and q [n_q, H, 576], by _distribution_draws' `jobs` with the
    hashes of its draws (in order). Each kind runs _latent_in_place or _query_in_place once, on
    all the rows of its parts with their parts' keys: the bits each part gets alone."""
    at = iter(hashes)
    for target, kind, term, n_draws in jobs:
        if target in ("rope", "q_scale"):
            values = rope if target == "rope" else q.view(q.shape[0], -1)
            values.mul_(term.view(torch.float64).unsqueeze(1))  # 0.0 keeps the values' signs: signed zeros
            continue
        values = latent if target == "latent" else q
        chosen = values.index_select(0, term)
        own = [next(at) for _ in range(n_draws)]
        if target == "latent":
            _latent_in_place(kind, chosen, own)
        else:
            _query_in_place(kind, chosen, own)
        values.index_copy_(0, term, chosen)


def _writers(parts: tuple[Recipe, ...]) -> list[str]:
    """The parts' writers, each once, in the order of the parts."""
    return list(dict.fromkeys(p.writer for p in parts))


def _pack_records(
    parts: tuple[Recipe, ...],
    counts: list[int],
    writers: list[str],
    rows: torch.Tensor,
    latent_keys: torch.Tensor,
    rope_keys: torch.Tensor,
    q_rows: torch.Tensor,
    q_keys: torch.Tensor,
    *by_writer: torch.Tensor,
    names: list[tuple[str, str]],
    distributions: list[torch.Tensor],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(records uint8 [U, 656] of every part's referenced rows, in the parts' order; q bf16
    [n_q, H, 576], contiguous) on `device`: what _values and encode_records give each part alone,
    bit for bit (each value is a function of its part's seed, stream and id, and a record of its
    row alone), built in one buffer of hash words for all the parts (rng.keyed_row_words; one mix,
    one normal transform, one rounding), the parts' distributions applied in place per kind
    (_distribution_draws, hashed with the values; _apply_distributions), and one encoding per writer. The tensors after `writers` come from
    _pack_terms, on `device`; `names` and `distributions` from _distribution_terms, on `device`."""
    u, n_q, heads = rows.numel(), q_rows.numel(), parts[0].heads
    q_width = heads * HEAD_DIM
    sizes = [u * LATENT_DIM, u * ROPE_DIM, n_q * q_width]
    jobs, draws = _distribution_draws(names, distributions, rows, q_rows, heads)
    values_size = sum(sizes)  # the distributions' draws follow the values' words: one mix64 hashes everything
    words = torch.empty(values_size + sum(ids.numel() for _, ids in draws), dtype=torch.int64, device=device)
    per_part = ((latent_keys, rows, LATENT_DIM), (rope_keys, rows, ROPE_DIM), (q_keys, q_rows, q_width))
    # q: ids row * q_width + column, as _values' flat element numbers
    for section, (keys, ids, width) in zip(words[:values_size].split(sizes), per_part, strict=True):
        rng.keyed_row_words(keys, ids, width, out=section.view(-1, width))
    hashes = rng.keyed_inputs(draws, words[values_size:])
    rng.mix64(words)  # in place: the sections above now hold their hashes
    normal = rng.normal_from_hash(words[:values_size])
    latent_x, rope_x, q_x = (x.view(-1, w) for x, w in zip(normal.split(sizes), (LATENT_DIM, ROPE_DIM, q_width), strict=True))
    _apply_distributions(jobs, hashes, latent_x, rope_x, q_x.view(n_q, heads, HEAD_DIM))
    rounded = round_f32_to_bf16_no_nan(normal.to(torch.float32))  # normal values times finite factors: no NaN
    latent_bf, rope_bf, q_bf = rounded.split(sizes)
    latent, rope = latent_bf.view(u, LATENT_DIM).to(torch.float32), rope_bf.view(u, ROPE_DIM)
    if len(writers) == 1:
        records = encode_records(latent, rope, writers[0], latent_known_finite=True)  # type: ignore[arg-type]  # |latent| <= 65536
    else:
        records = torch.empty((u, RECORD_BYTES), dtype=torch.uint8, device=device)
        for writer, at in zip(writers, by_writer, strict=True):
            records[at] = encode_records(latent[at], rope[at], writer, latent_known_finite=True)  # type: ignore[arg-type]
    return records, q_bf.view(n_q, parts[0].heads, HEAD_DIM).clone()
