"""Hypothesis strategies that draw small `Recipe`s (never tensors element by element).

Each field is drawn from a small strategy whose simplest value comes first, so shrinking walks a
failure toward one short row, one head, normal data, no padding. Tensors are built afterwards by
`strategies.materialize.materialize` on the target device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from kernel.record import PRECONDITION_WRITERS
from kernel.writers import sglang as sglang_writer
from strategies import fresh
from strategies.fresh import FreshDraws
from strategies.layouts import OUT_LAYOUTS, Q_LAYOUTS, UNCONSUMED
from strategies.recipe import (
    EXACT_MAX_ROW,
    INVALID_PATTERNS,
    ROWS_BEYOND_4GIB,
    Recipe,
)
from strategies.rng import stream_key

SPECIAL_LENGTHS = (1, 0, 2, 127, 128, 129, 255, 256, 257, 2048, 8192)
CLEAN_LATENT = ("normal", "heavy", "outliers", "zero_blocks", "tiny_blocks", "max57344", "large")
CLEAN_ROPE = ("normal", "large", "tiny", "zero")
CLEAN_Q = ("normal", "large", "tiny", "zero_blocks", "tiny_blocks")
SCALES = ("default", "peaked", "flat", "negative", "zero")
STREAM_OFFSETS = (0, 3, 200)
BLOCK_SIZES = (16, 64, 1, 3)  # paged caches: tokens per block (1: one row per block)
CACHE_LAYOUTS = ("flat", "paged", "paged_3d")
PLAIN_PATTERNS = ("uniform", "clustered", "duplicates", "sorted", "reversed", "tail")
RECIPES_PER_EXAMPLE = 16  # the most recipes one example draws (recipe_lists)
PACK_PARTS = 8  # the most recipes one packed call holds (packs)
# A part of a pack of R query rows draws at most ceil(PART_FILL * R / max_parts) rows (at least 1),
# as a recipe draws its rows (half of the time 1 to 4): for PART_FILL / max_parts of 4 / 64, one row
# each up to R = 16 and about 5 on average at R = 256, so the parts fill the call's rows before
# max_parts of them are taken, and a small call holds as many recipes as it has rows.
PART_FILL = 4


def differential_writers(needs_pow2_scales: bool) -> tuple[str, ...]:
    """The writers a differential property draws for a profile: the project's precondition
    writers, plus the sglang engine writer where it runs (kernel.writers.sglang) for a profile
    that does not need power-of-two scales (its scales never are; for a profile that needs them
    its caches go to the precondition-violation property: violating_recipes)."""
    engine = ("sglang",) if not needs_pow2_scales and sglang_writer.available() else ()
    return (*PRECONDITION_WRITERS, *engine)


@functools.cache
def _row_length(max_row: int) -> st.SearchStrategy[int]:
    specials = [x for x in SPECIAL_LENGTHS if x <= max_row]
    return st.one_of(st.sampled_from(specials), st.integers(0, min(max_row, 300)), st.integers(-3, -1))


# The strategies a recipe draws from, built once per argument (functools.cache): Hypothesis
# validates a strategy object and computes its properties on its first draw, so objects built
# afresh for every recipe pay that again each time; the draws are the same either way.
@functools.cache
def _row_lengths(max_row: int, n_q: int) -> st.SearchStrategy[list[int]]:
    return st.lists(_row_length(max_row), min_size=n_q, max_size=n_q)


@functools.cache
def _query_rows(max_n_q: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, min(4, max_n_q)), st.integers(1, max_n_q))


@functools.cache
def _heads(heads: tuple[int, ...] | None, max_heads: int) -> st.SearchStrategy[int]:
    return st.sampled_from(heads) if heads else st.integers(1, max_heads)


@functools.cache
def _sampled(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


@functools.cache
def _q_layouts(exact: bool) -> st.SearchStrategy[str]:
    """Row-major (the simplest) or a layout beyond it (strategies.layouts); overlapping heads mix
    q vectors, so not in exact recipes."""
    beyond = tuple(x for x in Q_LAYOUTS[1:] if not (exact and x == "overlapping_heads"))
    return st.one_of(st.just(Q_LAYOUTS[0]), st.sampled_from(beyond))


_BOOLEANS = st.booleans()
_PERMILLE = st.integers(0, 1000)
_CACHE_ROWS = st.one_of(st.integers(2, 64), st.integers(2, 100_000), st.just(1))
_PAD = st.tuples(st.integers(0, 64), st.integers(0, 64))
_Q_PAD = st.one_of(st.just((0, 0)), _PAD)
_OUT_PAD = st.one_of(st.none(), _PAD)
_SEED = st.integers(0, 2**32 - 1)
_STREAM_TAIL = st.one_of(st.just(0), st.integers(1, 300))


@st.composite
def cache_layouts(draw: st.DrawFn, rows: int) -> tuple[int, tuple[int, ...] | None]:
    """(cache_rows, cache_shape) for about `rows` rows: flat [rows, 656] (the simplest), paged
    [blocks, block_size, 656], or a 3-D leading shape [2, blocks, block_size, 656] (rows rounded
    up to whole blocks; a cache of 0 rows keeps 0 blocks)."""
    layout = draw(_sampled(CACHE_LAYOUTS), label="cache_layout")
    if layout == "flat":
        return rows, None
    block = draw(_sampled(BLOCK_SIZES), label="block_size")
    blocks = -(-rows // block)
    if layout == "paged":
        return blocks * block, (blocks, block)
    half = -(-blocks // 2)
    return 2 * half * block, (2, half, block)


def _fit_lengths(lengths: list[int], max_total_keys: int, stream_offset: int) -> tuple[int, ...]:
    """Cap the total key count and keep indptr >= 0 (negative steps only where the pointer allows)."""
    positive_total = sum(x for x in lengths if x > 0)
    if positive_total > max_total_keys:
        cap = max(1, max_total_keys // max(1, len(lengths)))
        lengths = [min(x, cap) for x in lengths]
    pointer = stream_offset
    fitted = []
    for length in lengths:
        if pointer + length < 0:
            length = 0
        pointer += length
        fitted.append(length)
    return tuple(fitted)


@dataclass(frozen=True)
class PackCall:
    """What the parts of one pack share (strategies.recipe.PACK_CALL_FIELDS), drawn once per pack."""

    heads: int
    softmax_scale: str
    has_invalid: bool
    return_lse: bool


@st.composite
def recipes(
    draw: st.DrawFn,
    *,
    max_n_q: int = 256,
    max_row: int = 8192,
    max_total_keys: int = 16384,
    max_heads: int = 16,
    heads: tuple[int, ...] | None = None,
    writers: tuple[str, ...] = PRECONDITION_WRITERS,
    huge_cache: bool = False,
    exact: bool = False,
    allow_out: bool = True,
    call: PackCall | None = None,
) -> Recipe:
    """A recipe meeting every precondition (unless `writers` includes "raw"; "sglang" meets
    those of a profile without needs_pow2_scales: its latent is never "zero_blocks", whose all-zero
    tiles the engine stores with scale 0).

    huge_cache: the cache spans more than 4 GiB and every index points past the 4 GiB mark.
    exact: an exact-arithmetic recipe (see strategies.recipe), rows of at most 256 keys.
    heads: restrict H to these values (a backend's head counts), else 1..max_heads.
    call: a part of a pack (`packs`): heads, softmax_scale, has_invalid and return_lse are the
    pack's, not drawn, and the recipe is packable (q row-major without padding, no out=, a flat
    cache, never huge); every other field is drawn as for a recipe alone.
    """
    if call is not None and (huge_cache or exact):
        raise ValueError("a part of a pack (call=) is neither huge_cache nor exact")
    n_q = draw(_query_rows(max_n_q), label="n_q")
    if call is not None:
        head_count = call.heads
    else:
        head_count = draw(_heads(tuple(heads) if heads else None, max_heads), label="heads")
    row_cap = min(max_row, EXACT_MAX_ROW) if exact else max_row
    stream_offset = draw(_sampled(STREAM_OFFSETS), label="stream_offset")
    lengths = draw(_row_lengths(row_cap, n_q), label="row_lengths")
    row_lengths = _fit_lengths(lengths, max_total_keys, stream_offset)
    has_invalid = call.has_invalid if call is not None else draw(_BOOLEANS, label="has_invalid")
    invalid_pattern = draw(_sampled(INVALID_PATTERNS), label="invalid_pattern") if has_invalid else "none"
    invalid_permille = draw(_PERMILLE, label="invalid_permille") if invalid_pattern == "scattered" else 0
    if huge_cache:
        index_pattern = "beyond_4gib"
        cache_rows = ROWS_BEYOND_4GIB + draw(st.integers(1, 100_000), label="rows_past_4gib")
    else:
        index_pattern = draw(_sampled(PLAIN_PATTERNS), label="index_pattern")
        cache_rows = draw(_CACHE_ROWS, label="cache_rows")
        if not any(x > 0 for x in row_lengths) and draw(_BOOLEANS, label="empty_cache"):
            cache_rows = 0  # every row empty: a cache of 0 rows is a valid call
    cache_shape = None
    if not huge_cache and call is None:
        cache_rows, cache_shape = draw(cache_layouts(cache_rows), label="cache_layout")
    if exact:
        latent = rope = q = softmax_scale = "exact"
    else:
        latent = draw(_sampled(CLEAN_LATENT), label="latent")
        rope = draw(_sampled(CLEAN_ROPE), label="rope")
        q = draw(_sampled(CLEAN_Q), label="q")
        softmax_scale = call.softmax_scale if call is not None else draw(_sampled(SCALES), label="softmax_scale")
    if call is not None:  # packable: q row-major without padding, no out=
        q_pad, out_pad, q_layout, out_layout = (0, 0), None, Q_LAYOUTS[0], OUT_LAYOUTS[0]
    else:
        q_pad = draw(_Q_PAD, label="q_pad")
        out_pad = draw(_OUT_PAD, label="out_pad") if allow_out else None
        q_layout = draw(_q_layouts(exact), label="q_layout")
        out_layout = draw(_sampled(OUT_LAYOUTS), label="out_layout") if out_pad is not None else OUT_LAYOUTS[0]
    recipe = Recipe(
        seed=draw(_SEED, label="seed"),
        n_q=n_q,
        heads=head_count,
        row_lengths=row_lengths,
        cache_rows=cache_rows,
        stream_offset=stream_offset,
        index_pattern=index_pattern,
        invalid_pattern=invalid_pattern,
        invalid_permille=invalid_permille,
        latent=latent,
        rope=rope,
        q=q,
        softmax_scale=softmax_scale,
        writer=draw(_sampled(tuple(writers)), label="writer"),
        q_pad=q_pad,
        out_pad=out_pad,
        return_lse=call.return_lse if call is not None else draw(_BOOLEANS, label="return_lse"),
        has_invalid=has_invalid,
        poison=draw(_BOOLEANS, label="poison") if cache_rows >= 2 else False,
        cache_shape=cache_shape,
        stream_tail=draw(_STREAM_TAIL, label="stream_tail"),
        q_layout=q_layout,
        out_layout=out_layout,
        unconsumed=draw(_sampled(UNCONSUMED), label="unconsumed"),
    )
    if recipe.writer == "sglang":
        assume(recipe.latent != "zero_blocks")  # scale 0 tiles: no profile's bound is promised there
    return recipe


def _pack_seed(call: PackCall, call_rows: int, first: Recipe) -> int:
    """The seed of a pack's fresh parts: strategies.rng.stream_key of what the pack drew before them."""
    return stream_key(call_rows, f"pack|{call!r}|{first.to_json()}")


@st.composite
def packs(
    draw: st.DrawFn,
    *,
    max_parts: int = PACK_PARTS,
    max_n_q: int = 256,
    max_total_keys: int = 16384,
    heads: tuple[int, ...] | None = None,
    max_heads: int = 16,
    fresh_parts: bool = True,
    **recipe_options: Any,
) -> Recipe:
    """One kernel call packing 1 to `max_parts` recipes (strategies.recipe, "Packs"), shaped as
    `recipes` draws a call alone: what the parts share (PackCall) is drawn once, then the call's
    query rows R as `recipes` draws a recipe's (at most `max_n_q`), then the parts, each drawn by
    `recipes` with `call=`, `recipe_options` and at most ceil(PART_FILL * R / `max_parts`) rows
    and the rows still free, until the call's rows are filled or `max_parts` parts are taken; then, as `recipes` caps one recipe's rows
    (_fit_lengths), when the call's keys pass `max_total_keys` every row of the call is capped to
    `max_total_keys` // its rows. So a packed call's query rows follow the distribution of a call
    drawn alone (short of it only where `max_parts` runs out first), its rows' keys too, and it is
    never larger than a call drawn alone. One part is returned as it is (a recipe of its own,
    packable); two or more as their pack. Shrinks toward one row, hence one part, then as the
    parts shrink.

    fresh_parts (where strategies.fresh is available): the first part is drawn from the test's
    choices, the others are fresh draws of the same strategy (strategies.fresh.FreshDraws) seeded
    by a hash of everything drawn before them (the shared fields, the call's rows, the first
    part), so any change Hypothesis makes to a pack's choices gives it new other parts: a pack is
    one drawn recipe and up to `max_parts` - 1 new ones, not the parts of the example it was
    mutated from. Else every part is drawn from the test's choices."""
    if max_parts < 1:
        raise ValueError(f"packs needs max_parts >= 1, got {max_parts}")
    call = PackCall(
        heads=draw(_heads(tuple(heads) if heads else None, max_heads), label="heads"),
        softmax_scale=draw(_sampled(SCALES), label="softmax_scale"),
        has_invalid=draw(_BOOLEANS, label="has_invalid"),
        return_lse=draw(_BOOLEANS, label="return_lse"),
    )
    call_rows = draw(_query_rows(max_n_q), label="call_n_q")
    part_rows = -(-PART_FILL * call_rows // max_parts)
    taken: list[Recipe] = []
    rows = 0
    others: FreshDraws | None = None
    while rows < call_rows and len(taken) < max_parts:
        part = _part_strategy(min(part_rows, call_rows - rows), max_total_keys, call, recipe_options)
        if others is None:
            taken.append(draw(part, label="part"))
            if fresh_parts and fresh.available():
                others = FreshDraws(_pack_seed(call, call_rows, taken[0]))
        else:
            drawn = others.draw(part)
            if drawn is None:
                break
            taken.append(drawn)
        rows += taken[-1].n_q
    lengths = [x for part in taken for x in part.row_lengths]
    if sum(x for x in lengths if x > 0) > max_total_keys:  # the call's cap, as _fit_lengths caps a recipe alone
        cap = max(1, max_total_keys // len(lengths))
        taken = [
            replace(part, row_lengths=_fit_lengths([min(x, cap) for x in part.row_lengths], max_total_keys, part.stream_offset))
            for part in taken
        ]
    return taken[0] if len(taken) == 1 else Recipe.pack(taken)


@functools.lru_cache(maxsize=4096)
def _cached_part_strategy(
    max_n_q: int, max_total_keys: int, call: PackCall, options: tuple[tuple[str, Any], ...]
) -> st.SearchStrategy[Recipe]:
    """recipes(...) of one pack's part, made once per argument set (see _part_strategy)."""
    return recipes(max_n_q=max_n_q, max_total_keys=max_total_keys, call=call, **dict(options))


def _part_strategy(max_n_q: int, max_total_keys: int, call: PackCall, recipe_options: dict[str, Any]) -> st.SearchStrategy[Recipe]:
    """`recipes` for a part of a pack (packs): the same strategy object for the same arguments,
    so a pack's many parts do not each pay a new strategy's label and validation (a strategy
    keeps no state between draws: the same choices give the same recipe); a new one where an
    option is unhashable."""
    options = tuple(sorted(recipe_options.items()))
    try:
        return _cached_part_strategy(max_n_q, max_total_keys, call, options)
    except TypeError:  # an unhashable option value
        return recipes(max_n_q=max_n_q, max_total_keys=max_total_keys, call=call, **recipe_options)


def recipe_lists(recipe: st.SearchStrategy[Recipe], max_size: int = RECIPES_PER_EXAMPLE) -> st.SearchStrategy[list[Recipe]]:
    """1 to `max_size` recipes of `recipe`, each drawn as `recipe` alone draws it (one kernel call
    each; conformance.judging.batch judges them together). Hypothesis's own list: about 6 recipes
    on average at max_size 16 (5 + the minimum, capped at the midpoint), and a failing list
    shrinks by dropping recipes, down to the one that fails, then shrinks that recipe."""
    if max_size < 1:
        raise ValueError(f"recipe_lists needs max_size >= 1, got {max_size}")
    return st.lists(recipe, min_size=1, max_size=max_size)


@st.composite
def violating_recipes(
    draw: st.DrawFn,
    *,
    allow_out_of_range: bool,
    max_total_keys: int = 4096,
    heads: tuple[int, ...] | None = None,
    engine_writer: bool | None = None,
    flags: dict[int, tuple[tuple[bool, bool], ...]] | None = None,
) -> Recipe:
    """A recipe that breaks exactly one precondition the host cannot check.

    Kinds: raw (non-pow2) writer, scale above 2^7 (latent above 57344 or a corrupted scale),
    NaN codes in a consumed row, a zero scale, a negative entry without has_invalid, (only
    with allow_out_of_range, i.e. on backends whose index reads cannot fault) an index >= rows,
    and (only with engine_writer; None: where kernel.writers.sglang runs) the cache written by
    sglang's quantiser (scales amax / 448, not powers of two; 0 for an all-zero tile).
    flags: per H, the (has_invalid, return_lse) pairs the kernel takes (None: all): the recipe's
    flags are drawn among them (has_invalid True, with no negative entry, where False is not taken).
    """
    base = draw(recipes(max_n_q=8, max_row=512, max_total_keys=max_total_keys, heads=heads))
    taken = None if flags is None else flags.get(base.heads, ())
    kinds = ["raw_writer", "above_cap_latent", "scale_above_cap", "nan_codes", "zero_scale", "negative_without_has_invalid"]
    if taken is not None and not any(not inv for inv, _ in taken):
        kinds.remove("negative_without_has_invalid")  # needs a kernel that takes has_invalid False
    if allow_out_of_range:
        kinds.append("index_out_of_range")
    if sglang_writer.available() if engine_writer is None else engine_writer:
        kinds.insert(1, "sglang_writer")  # beside the other writer (Hypothesis draws the first kinds most)
    kind = draw(st.sampled_from(kinds), label="violation")
    rows = tuple(max(x, 1) for x in base.row_lengths)
    fields = base.to_json_dict()
    fields["row_lengths"] = list(rows)
    if base.cache_rows == 0:  # the rows now hold keys: give them a cache
        fields["cache_rows"], fields["cache_shape"] = 64, None
    fields["corruptions"] = []
    if kind == "raw_writer":
        fields["writer"] = "raw"
    elif kind == "sglang_writer":
        fields["writer"] = "sglang"
    elif kind == "above_cap_latent":
        fields["latent"] = "above_cap"
    elif kind == "negative_without_has_invalid":
        fields["has_invalid"] = False
        fields["invalid_pattern"] = "tail"
    else:
        fields["corruptions"] = [{"kind": kind, "count": draw(st.integers(1, 3), label="count")}]
    if kind != "negative_without_has_invalid":
        fields["has_invalid"] = False
        fields["invalid_pattern"] = "none"
        fields["invalid_permille"] = 0
    if taken is not None and (fields["has_invalid"], base.return_lse) not in taken:
        fitting = [f for f in taken if kind != "negative_without_has_invalid" or not f[0]]
        assume(fitting)  # no flags of this kernel at this H: the caller restricts heads to avoid it
        fields["has_invalid"], fields["return_lse"] = draw(st.sampled_from(fitting), label="flags")
    return Recipe.from_json_dict(fields)
