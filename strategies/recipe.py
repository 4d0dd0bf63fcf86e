"""The recipe: a small, plain-JSON description of one kernel call, replayable anywhere.

A recipe names shapes, row lengths, patterns, distributions and a data seed; `materialize`
builds the tensors from it, bit-identical on every device. Field meanings (units are elements
unless stated):

    version          format version (1)
    seed             data seed (any non-negative int)
    n_q, heads       query rows, heads (1..16)
    row_lengths      one int per row: indptr[q + 1] - indptr[q] (negative: the row is empty and
                     the stream pointer steps back)
    stream_offset    indptr[0]
    index_pattern    uniform | clustered | duplicates | sorted | reversed | tail | beyond_4gib
    invalid_pattern  none | scattered | tail | leading_tile | all   (negative entries; they are
                     masked only with has_invalid, else they break a precondition)
    invalid_permille share of entries made negative by "scattered"
    cache_rows       KV rows in the cache (beyond_4gib needs more than 4 GiB / 656); 0 only when
                     every row is empty (no key is consumed)
    cache_shape      null (the cache is [cache_rows, 656]) or the cache's leading shape, e.g.
                     [blocks, block_size] for a paged [blocks, block_size, 656] cache: 1 to 3
                     dims whose product is cache_rows (rows are the flattened leading dims)
    stream_tail      index entries after the last one any row consumes (unread filler; the
                     stream is longer than indptr[n_q])
    unconsumed       valid | garbage: what index entries no row consumes hold: valid rows, or
                     out-of-range and negative values the kernel must not read (strategies.layouts)
    latent           normal | heavy | outliers | zero_blocks | tiny_blocks | max57344 | large |
                     above_cap | exact
    rope             normal | large | tiny | zero | exact
    q                normal | large | tiny | zero_blocks | tiny_blocks | exact
    softmax_scale    default | peaked | flat | exact (ln 2) | negative | zero, or a number
    writer           pow2 | pow2-floor | raw | sglang (an engine's writer, kernel.writers.sglang: only
                     where sglang's quantiser runs, a CUDA machine; drawn only there)
    q_pad            [row pad, head pad] added to q's row / head strides
    q_layout         rows | heads | shared_rows | shared_heads | overlapping_heads: q's memory
                     layout (strategies.layouts: row- or head-major, a stride 0, overlapping heads)
    out_pad          null (kernel allocates out) or [row pad, head pad] of a preallocated out
    out_layout       rows | heads: a preallocated out row- or head-major (needs out_pad)
    return_lse, has_invalid
    poison           NaN-poison unreferenced rows (row 0 included) and never reference row 0
    corruptions      list of {"kind": nan_codes | scale_not_pow2 | scale_above_cap |
                     zero_scale | index_out_of_range, "count": int} applied to consumed data
    parts            [] (a recipe of its own), or the recipes packed into this one call (a pack:
                     strategies.materialize.materialize_pack), in order; see "Packs" below

A pack is one kernel call holding the query rows of several recipes, its parts: q is the parts'
q rows one after the other (contiguous, row-major), the cache is the parts' caches one after the
other (flat [rows, 656]), and each part's rows consume their own keys (their indices offset by
the rows of the caches before theirs) through a stream rebuilt without gaps (row r's entries at
indptr[r], a row of negative length empty). The parts agree on what is one per call (heads,
softmax_scale, has_invalid, return_lse) and are packable (`packable_reason`: q row-major
without padding, no out=, no corruptions, a cache of at most 64 MiB that the pack copies, never
beyond 4 GiB). A pack's own fields are those `pack_fields(parts)` derives (the call's n_q,
heads, row lengths, cache rows and flags; the data fields at their defaults, unused): a pack
whose fields say otherwise is not valid.

"Exact" recipes (q, latent, rope and softmax_scale all "exact", rows of at most 256 keys) make
every step of the gfx950 algorithm exact: q has one nonzero latent and one nonzero rope value
(+-1) per head, latent and rope values are integers in [-2, 2], so scores are integers in [-4, 4],
c_log2 = 1, P = 2^k with k in [0, 8], and every sum fits an f32 significand. Any correct
implementation of the algorithm then returns the same bits as the emulated kernel.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from kernel.record import RECORD_BYTES, WRITERS
from strategies.layouts import OUT_LAYOUTS, Q_LAYOUTS, UNCONSUMED

RECIPE_VERSION = 1
INDEX_PATTERNS = ("uniform", "clustered", "duplicates", "sorted", "reversed", "tail", "beyond_4gib")
INVALID_PATTERNS = ("none", "scattered", "tail", "leading_tile", "all")
LATENT_DISTS = ("normal", "heavy", "outliers", "zero_blocks", "tiny_blocks", "max57344", "large", "above_cap", "exact")
ROPE_DISTS = ("normal", "large", "tiny", "zero", "exact")
Q_DISTS = ("normal", "large", "tiny", "zero_blocks", "tiny_blocks", "exact")
SOFTMAX_SCALES = {
    "default": 576**-0.5,
    "peaked": 16 * 576**-0.5,
    "flat": 576**-0.5 / 64,
    "exact": math.log(2.0),
    "negative": -(576**-0.5),
    "zero": 0.0,
}
EXACT_MAX_ROW = 256  # longest row for which "exact" recipes keep every step exact
CORRUPTIONS = ("nan_codes", "scale_not_pow2", "scale_above_cap", "zero_scale", "index_out_of_range")
ROWS_BEYOND_4GIB = (4 * 2**30) // 656 + 1  # first row whose record starts past 4 GiB


# Fields added after version 1 and their defaults: omitted from the JSON at their default.
OPTIONAL_FIELDS: dict[str, Any] = {
    "cache_shape": None,
    "stream_tail": 0,
    "q_layout": "rows",
    "out_layout": "rows",
    "unconsumed": "valid",
    "parts": [],
}
PACKABLE_CACHE_BYTES = 64 * 2**20  # strategies.materialize.SMALL_CACHE_BYTES: a part's cache is written whole, the pack copies it


class RecipeError(ValueError):
    """A recipe that is not valid; the message names the field and the problem."""


class RecipeTooLarge(RecipeError):
    """A valid recipe whose estimated memory (strategies.recipe.memory_estimate) exceeds the limit
    (strategies.materialize.memory_limit); the message names the estimate and the limit."""


@dataclass(frozen=True)
class Recipe:
    """One kernel call, as plain data (see the module docstring for each field)."""

    seed: int
    n_q: int
    heads: int
    row_lengths: tuple[int, ...]
    cache_rows: int
    version: int = RECIPE_VERSION
    stream_offset: int = 0
    index_pattern: str = "uniform"
    invalid_pattern: str = "none"
    invalid_permille: int = 0
    latent: str = "normal"
    rope: str = "normal"
    q: str = "normal"
    softmax_scale: str | float = "default"
    writer: str = "pow2"
    q_pad: tuple[int, int] = (0, 0)
    out_pad: tuple[int, int] | None = None
    return_lse: bool = True
    has_invalid: bool = False
    poison: bool = False
    corruptions: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    cache_shape: tuple[int, ...] | None = None
    stream_tail: int = 0
    q_layout: str = "rows"
    out_layout: str = "rows"
    unconsumed: str = "valid"
    parts: tuple[Recipe, ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    def __repr__(self) -> str:
        """The fields that differ from the defaults, one line (the full recipe: to_json)."""
        defaults = {f.name: f.default_factory() if f.default_factory is not MISSING else f.default for f in fields(self)}
        shown = [
            f"{k}={v!r}" if k != "parts" else f"parts=[{len(v)} recipes]"
            for k, v in self.to_json_dict().items()
            if defaults[k] is MISSING or defaults[k] != getattr(self, k)
        ]
        return f"Recipe({', '.join(shown)})"

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(repr(self))  # type: ignore[attr-defined]

    @property
    def scale_value(self) -> float:
        """softmax_scale as a number."""
        if isinstance(self.softmax_scale, str):
            return SOFTMAX_SCALES[self.softmax_scale]
        return float(self.softmax_scale)

    @property
    def total_keys(self) -> int:
        """Sum of positive row lengths (key slots the kernel reads)."""
        return sum(max(length, 0) for length in self.row_lengths)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (lists, not tuples). Fields added after version 1 appear only when
        they differ from their defaults, so a recipe written before they existed keeps its JSON
        and content hash."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}  # each container is copied below
        data["parts"] = [part.to_json_dict() for part in self.parts]
        for name, default in OPTIONAL_FIELDS.items():
            if data[name] == default:
                del data[name]
        if self.cache_shape is not None:
            data["cache_shape"] = list(self.cache_shape)
        data["row_lengths"] = list(self.row_lengths)
        data["q_pad"] = list(self.q_pad)
        data["out_pad"] = None if self.out_pad is None else list(self.out_pad)
        data["corruptions"] = [dict(c) for c in self.corruptions]
        return data

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys), stable for content hashing."""
        return json.dumps(self.to_json_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json_dict(cls, data: object) -> Recipe:
        """Build from parsed JSON; RecipeError names any unknown, missing or ill-typed field."""
        if not isinstance(data, dict):
            raise RecipeError(f"a recipe must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RecipeError(f"unknown recipe field(s): {', '.join(unknown)}")
        required = {"seed", "n_q", "heads", "row_lengths", "cache_rows"}
        missing = sorted(required - set(data))
        if missing:
            raise RecipeError(f"recipe is missing field(s): {', '.join(missing)}")
        values = dict(data)
        for name in ("row_lengths", "q_pad"):
            if name in values:
                if not isinstance(values[name], list | tuple):
                    raise RecipeError(f"{name} must be a list, got {type(values[name]).__name__}")
                values[name] = tuple(values[name])
        if values.get("cache_shape") is not None:
            if not isinstance(values["cache_shape"], list | tuple):
                raise RecipeError("cache_shape must be null or a list of ints")
            values["cache_shape"] = tuple(values["cache_shape"])
        if values.get("out_pad") is not None:
            if not isinstance(values["out_pad"], list | tuple):
                raise RecipeError("out_pad must be null or a list of two ints")
            values["out_pad"] = tuple(values["out_pad"])
        if "corruptions" in values:
            if not isinstance(values["corruptions"], list | tuple) or not all(isinstance(c, dict) for c in values["corruptions"]):
                raise RecipeError("corruptions must be a list of objects")
            values["corruptions"] = tuple(dict(c) for c in values["corruptions"])
        if "parts" in values:
            if not isinstance(values["parts"], list | tuple):
                raise RecipeError("parts must be a list of recipes")
            values["parts"] = tuple(cls.from_json_dict(part) for part in values["parts"])
        try:
            return cls(**values)
        except TypeError as err:
            raise RecipeError(str(err)) from err

    @classmethod
    def pack(cls, parts: Sequence[Recipe]) -> Recipe:
        """The pack of `parts` (at least two packable recipes that agree on heads, softmax_scale,
        has_invalid and return_lse; module docstring, "Packs"); RecipeError naming what does not fit."""
        fields_ = pack_fields(parts)
        return cls(**{**fields_, "parts": tuple(parts)})

    @property
    def is_pack(self) -> bool:
        """Whether this recipe packs several recipes into one call (its parts)."""
        return bool(self.parts)

    @classmethod
    def from_json(cls, text: str) -> Recipe:
        """Parse JSON text; RecipeError on malformed JSON or fields."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise RecipeError(f"recipe is not valid JSON: {err}") from err
        return cls.from_json_dict(data)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


PACK_CALL_FIELDS = ("heads", "softmax_scale", "has_invalid", "return_lse")  # one per call: the parts of a pack agree on them


def packable_reason(recipe: Recipe) -> str:
    """Empty when `recipe` can be a part of a pack (module docstring, "Packs"), else why not."""
    if recipe.parts:
        return "it is a pack itself"
    if recipe.q_layout != "rows" or recipe.q_pad != (0, 0):
        return f"q is not row-major without padding (q_layout {recipe.q_layout}, q_pad {list(recipe.q_pad)})"
    if recipe.out_pad is not None:
        return "it passes out="
    if recipe.corruptions:
        return "it has corruptions"
    if recipe.index_pattern == "beyond_4gib" or recipe.cache_rows * RECORD_BYTES > PACKABLE_CACHE_BYTES:
        return f"its cache of {recipe.cache_rows} rows is over {PACKABLE_CACHE_BYTES >> 20} MiB"
    return ""


def pack_fields(parts: Sequence[Recipe]) -> dict[str, Any]:
    """The fields (less parts) of the pack of `parts` (module docstring, "Packs"); RecipeError
    when fewer than two parts are given, a part is not packable or the parts disagree on a field
    of PACK_CALL_FIELDS."""
    if len(parts) < 2:
        raise RecipeError(f"a pack needs at least 2 parts, got {len(parts)}")
    first = parts[0]
    for i, part in enumerate(parts):
        if not isinstance(part, Recipe):
            raise RecipeError(f"part {i} is not a recipe: {type(part).__name__}")
        reason = packable_reason(part)
        if reason:
            raise RecipeError(f"part {i} cannot be packed: {reason}")
        for name in PACK_CALL_FIELDS:
            if getattr(part, name) != getattr(first, name):
                mine, theirs = getattr(part, name), getattr(first, name)
                raise RecipeError(f"part {i} has {name} {mine!r}, part 0 {theirs!r}: the parts of a pack agree on it")
    rows = sum(part.cache_rows for part in parts)
    if rows > 2**31 - 1:
        raise RecipeError(f"the parts' caches hold {rows} rows together, more than 2^31 - 1")
    return {
        "seed": 0,
        "n_q": sum(part.n_q for part in parts),
        "heads": first.heads,
        "row_lengths": tuple(max(length, 0) for part in parts for length in part.row_lengths),
        "cache_rows": rows,
        "softmax_scale": first.softmax_scale,
        "has_invalid": first.has_invalid,
        "return_lse": first.return_lse,
    }


def _validate(r: Recipe) -> None:
    def need(cond: bool, message: str) -> None:
        if not cond:
            raise RecipeError(message)

    if r.parts:
        derived = pack_fields(r.parts)
        for f in fields(r):
            if f.name == "parts":
                continue
            expected = derived.get(f.name, f.default_factory() if f.default_factory is not MISSING else f.default)
            need(getattr(r, f.name) == expected, f"a pack's {f.name} is {getattr(r, f.name)!r}; its parts make it {expected!r}")

    need(r.version == RECIPE_VERSION, f"version must be {RECIPE_VERSION}, got {r.version!r}")
    for name in ("seed", "n_q", "heads", "cache_rows", "stream_offset", "invalid_permille", "stream_tail"):
        need(_is_int(getattr(r, name)), f"{name} must be an integer, got {getattr(r, name)!r}")
    need(r.seed >= 0, f"seed must be >= 0, got {r.seed}")
    need(0 <= r.n_q <= 65536, f"n_q must be in [0, 65536], got {r.n_q}")
    need(1 <= r.heads <= 16, f"heads must be in [1, 16], got {r.heads}")
    need(0 <= r.cache_rows <= 2**31 - 1, f"cache_rows must be in [0, 2^31 - 1], got {r.cache_rows}")
    need(0 <= r.stream_tail <= 1 << 20, f"stream_tail must be in [0, 2^20], got {r.stream_tail}")
    if r.cache_shape is not None:
        shape = r.cache_shape
        need(
            isinstance(shape, tuple) and 1 <= len(shape) <= 3 and all(_is_int(x) and x >= 0 for x in shape),
            f"cache_shape must be null or 1 to 3 ints >= 0, got {shape!r}",
        )
        need(math.prod(shape) == r.cache_rows, f"cache_shape {list(shape)} holds {math.prod(shape)} rows, cache_rows is {r.cache_rows}")
    need(0 <= r.invalid_permille <= 1000, f"invalid_permille must be in [0, 1000], got {r.invalid_permille}")
    need(len(r.row_lengths) == r.n_q, f"row_lengths has {len(r.row_lengths)} entries for n_q = {r.n_q}")
    need(all(_is_int(x) for x in r.row_lengths), "row_lengths must hold integers")
    need(r.stream_offset >= 0, f"stream_offset must be >= 0, got {r.stream_offset}")
    pointer = r.stream_offset
    for q, length in enumerate(r.row_lengths):
        pointer += length
        need(pointer >= 0, f"row_lengths step indptr below 0 at row {q}")
    need(r.cache_rows > 0 or r.total_keys == 0, f"cache_rows 0 needs every row empty, got {r.total_keys} keys")
    need(r.index_pattern in INDEX_PATTERNS, f"index_pattern must be one of {INDEX_PATTERNS}, got {r.index_pattern!r}")
    need(r.invalid_pattern in INVALID_PATTERNS, f"invalid_pattern must be one of {INVALID_PATTERNS}, got {r.invalid_pattern!r}")
    need(r.latent in LATENT_DISTS, f"latent must be one of {LATENT_DISTS}, got {r.latent!r}")
    need(r.rope in ROPE_DISTS, f"rope must be one of {ROPE_DISTS}, got {r.rope!r}")
    need(r.q in Q_DISTS, f"q must be one of {Q_DISTS}, got {r.q!r}")
    if isinstance(r.softmax_scale, str):
        need(
            r.softmax_scale in SOFTMAX_SCALES, f"softmax_scale must be one of {tuple(SOFTMAX_SCALES)} or a number, got {r.softmax_scale!r}"
        )
    else:
        need(
            isinstance(r.softmax_scale, int | float) and not isinstance(r.softmax_scale, bool) and math.isfinite(r.softmax_scale),
            f"softmax_scale must be a finite number or a name, got {r.softmax_scale!r}",
        )
    need(r.writer in WRITERS, f"writer must be one of {WRITERS}, got {r.writer!r}")
    need(r.q_layout in Q_LAYOUTS, f"q_layout must be one of {Q_LAYOUTS}, got {r.q_layout!r}")
    need(r.out_layout in OUT_LAYOUTS, f"out_layout must be one of {OUT_LAYOUTS}, got {r.out_layout!r}")
    need(r.out_layout == "rows" or r.out_pad is not None, f"out_layout {r.out_layout!r} needs a preallocated out (out_pad)")
    need(r.unconsumed in UNCONSUMED, f"unconsumed must be one of {UNCONSUMED}, got {r.unconsumed!r}")
    for name in ("q_pad", "out_pad"):
        pad = getattr(r, name)
        if pad is None and name == "out_pad":
            continue
        need(
            isinstance(pad, tuple) and len(pad) == 2 and all(_is_int(x) and 0 <= x <= 4096 for x in pad),
            f"{name} must be two ints in [0, 4096], got {pad!r}",
        )
    for name in ("return_lse", "has_invalid", "poison"):
        need(isinstance(getattr(r, name), bool), f"{name} must be true or false, got {getattr(r, name)!r}")
    if r.index_pattern == "beyond_4gib":
        need(r.cache_rows > ROWS_BEYOND_4GIB, f"beyond_4gib needs cache_rows > {ROWS_BEYOND_4GIB}, got {r.cache_rows}")
    if r.poison:
        need(r.cache_rows >= 2, "poison needs at least 2 cache rows (row 0 is poisoned)")
    for c in r.corruptions:
        need(c.get("kind") in CORRUPTIONS, f"corruption kind must be one of {CORRUPTIONS}, got {c.get('kind')!r}")
        need(_is_int(c.get("count", 1)) and c.get("count", 1) >= 1, f"corruption count must be a positive int, got {c.get('count')!r}")
        need(set(c) <= {"kind", "count"}, f"corruption fields are kind and count, got {sorted(c)}")


# ---------------------------------------------------------------------------------------------
# Memory estimate (bytes), before anything is materialised

# Measured with ru_maxrss on the CPU (torch 2.13, one row of 100k-400k keys): building the index
# stream costs ~90 B per index entry, generating and encoding a referenced KV row ~28 KiB, the
# float64 reference and bound ~16 KiB per key slot of the chunk in flight. Rounded up.
STREAM_BYTES_PER_ENTRY = 128
ROW_BYTES_PER_REFERENCED_ROW = 32 * 1024
REFERENCE_BYTES_PER_KEY_SLOT = 16 * 1024
Q_BYTES_PER_ELEMENT = 32  # f64 generation temporaries + bf16 q, per (row, head, 576)
OUT_BYTES_PER_ELEMENT = 40  # bf16 out + f64 reference out and bound per mode, per (row, head, 512)
SMALL_CACHE_BYTES_ = 64 * 2**20  # strategies.materialize.SMALL_CACHE_BYTES: caches up to this are zero-filled
# Key slots the reference evaluates at once per device type: mirrors oracle.rows.REFERENCE_KEY_BUDGET
# (a chunk holds at least one whole row, so the longest row may exceed it).
REFERENCE_KEY_BUDGET_ = {"cpu": 1 << 15, "cuda": 1 << 21}


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated peak bytes of materialising a recipe and judging one call of it.

    host_bytes: CPU RAM (everything when the device is the CPU); device_bytes: memory of the
    accelerator (0 on the CPU); parts: the terms, in bytes, for the message."""

    host_bytes: int
    device_bytes: int
    parts: dict[str, int]


def memory_estimate(recipe: Recipe, device_type: str = "cpu") -> MemoryEstimate:
    """Estimate the memory of `materialize(recipe, device)` plus the kernel call and the float64
    reference of one judgement, without building anything (O(n_q) time). Conservative: the
    referenced rows are counted as min(keys, cache_rows) (every key a distinct row). A pack:
    its parts' estimates (each is materialised) plus that of its own call."""
    if recipe.parts:
        estimates = [memory_estimate(part, device_type) for part in recipe.parts]
        own = memory_estimate(Recipe(**{f.name: getattr(recipe, f.name) for f in fields(recipe) if f.name != "parts"}), device_type)
        parts = {name: own.parts[name] + sum(e.parts[name] for e in estimates) for name in own.parts}
        return MemoryEstimate(
            host_bytes=own.host_bytes + sum(e.host_bytes for e in estimates),
            device_bytes=own.device_bytes + sum(e.device_bytes for e in estimates),
            parts=parts,
        )
    pointer, n_idx, longest = recipe.stream_offset, recipe.stream_offset, 0
    for length in recipe.row_lengths:
        pointer += length
        n_idx = max(n_idx, pointer)
        longest = max(longest, length)
    n_idx += recipe.stream_tail
    keys = recipe.total_keys
    referenced = min(keys, recipe.cache_rows)
    cache_full = recipe.cache_rows * RECORD_BYTES
    # a big cache is torch.empty: on the CPU only the written pages (referenced rows, neighbours)
    # become resident; on an accelerator the whole allocation is real
    cache_resident = cache_full if cache_full <= SMALL_CACHE_BYTES_ else min(cache_full, (3 * referenced + 2) * RECORD_BYTES)
    pad_rows, pad_heads = recipe.q_pad
    q_elems = recipe.n_q * (recipe.heads + pad_heads) * 576 + recipe.n_q * pad_rows
    if recipe.q_layout != "rows" or recipe.out_layout != "rows":  # strategies.layouts.place: 3 int64 per element
        q_elems += recipe.n_q * recipe.heads * 576
    out_elems = recipe.n_q * recipe.heads * 512
    budget = REFERENCE_KEY_BUDGET_.get(device_type, REFERENCE_KEY_BUDGET_["cuda"])
    slots = max(min(recipe.n_q * longest, budget), longest)
    parts = {
        "index stream": STREAM_BYTES_PER_ENTRY * (n_idx + keys),
        "referenced rows": ROW_BYTES_PER_REFERENCED_ROW * referenced,
        "kv cache": cache_resident if device_type == "cpu" else cache_full,
        "q": Q_BYTES_PER_ELEMENT * q_elems,
        "out": OUT_BYTES_PER_ELEMENT * out_elems,
        "reference": REFERENCE_BYTES_PER_KEY_SLOT * slots,
    }
    if device_type == "cpu":
        return MemoryEstimate(host_bytes=sum(parts.values()), device_bytes=0, parts=parts)
    on_device = ("referenced rows", "kv cache", "q", "out", "reference")
    return MemoryEstimate(host_bytes=parts["index stream"] + 8 * n_idx, device_bytes=sum(parts[k] for k in on_device), parts=parts)
