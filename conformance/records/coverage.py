"""Strategy-feature coverage of a fuzz campaign: which classes of each recipe dimension were drawn.

A *family* is one dimension of the recipe (strategies.recipe.Recipe) that a kernel engineer wants
to know was exercised: row-length classes, index patterns, writers, precondition violations
("corruptions"), the latent / rope / q distributions, softmax scales, head counts, query-row
counts, has_invalid masking, cache sizes, q and out strides and layouts, and the call options. Each family is
a pure function recipe -> frozenset of class names (a set, not one string, because some
dimensions hold several values per recipe: one class per row for the row lengths, every violated
precondition, and the three flags of `options`); its classes are a fixed, ordered tuple and the
function never returns a name outside it, for any valid recipe.

`reachable(space)` says which classes the strategies of strategies.hypothesis_recipes can draw
at all for given strategy parameters (a `DrawSpace`): that is the denominator of the coverage
line ("row-length classes 7/14"). It mirrors those strategies' logic (the tests check it both
ways against real draws: nothing drawn falls outside it, every class in it can be drawn).

`Coverage` counts, per family and class, the examples whose recipe had that class (an example
with many rows of one class counts once for it).

Row-length classes come from the tiling of the gfx950 kernel (docs/explanation/flydsl-kernel.md): one
workgroup per query row walks the row in 128-key tiles (nt = ceil(len / 128)), each tile split
among 4 waves of 32 keys; positions >= len are masked; a row of one tile skips the next-tile
prefetch. So the classes are (every length in exactly one, checked in this order):

    <0          negative length: an empty row whose indptr steps back (the stream pointer moves back)
    0           empty row: out = 0, lse = -inf, no tile at all
    1           one key: the smallest tile, 127 masked positions
    2-31        one tile, all keys inside wave 0's 32 (waves 1-3 fully masked)
    32-126      one tile, several waves, a partial tile
    127         one tile, one key short of full (the last position masked)
    128         exactly one full tile: no masking, no prefetch of a next tile
    129         two tiles, the second holding one key
    128k-1      k >= 2 tiles (length < 2048), the last tile one key short (255, 383, ...)
    128k        k >= 2 whole tiles (length < 2048): no tail masking (256, 384, ...)
    128k+1      k >= 2 full tiles plus a one-key tail tile (length < 2048: 257, 385, ...)
    130-2046    several tiles with a partial tail of 2..126 keys (the rest below 2048)
    2048-8191   long rows: 16 to 64 tiles (online-max rescaling over many tiles)
    >=8192      very long rows: 64 tiles or more (the CPU long_rows campaign's longest row)

Query rows: one workgroup each; MI355X has 256 CUs, so up to 256 rows run in one pass and more
queue behind them: 0 | 1 | 2-8 | 9-64 | 65-256 | >256 (8: the preconditions property's most; 64
and 256: the general property's most on CPU and GPU). Heads: each count 1..16 is a class (the
QK MFMA is 16 heads wide, so every H < 16 pads it differently). Cache sizes: 1 | 2-64 (indices
collide: duplicates, clustered) | up to 64 MiB (strategies.recipe.SMALL_CACHE_BYTES_: zero-filled)
| over 64 MiB (allocated untouched) | over 4 GiB (records past the 32-bit byte offset).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.record import PRECONDITION_WRITERS, RECORD_BYTES, WRITERS
from kernel.writers import sglang as sglang_writer
from strategies.layouts import Q_LAYOUTS
from strategies.recipe import (
    INDEX_PATTERNS,
    INVALID_PATTERNS,
    LATENT_DISTS,
    Q_DISTS,
    ROPE_DISTS,
    ROWS_BEYOND_4GIB,
    SMALL_CACHE_BYTES_,
    SOFTMAX_SCALES,
    Recipe,
)

TILE = 128  # keys per tile of the gfx950 kernel (seed: 128-token tiles, nt = ceil(len / 128))
WAVE_KEYS = 32  # keys per wave within a tile (seed: wave w computes S for tokens [32w, 32w + 32))
LONG_ROW = 2048  # 16 tiles
VERY_LONG_ROW = 8192  # 64 tiles; the longest row of the CPU long_rows campaign
CUS = 256  # compute units of an MI355X: workgroups (query rows) that run in one pass

ROW_LENGTH_CLASSES = (
    "<0",
    "0",
    "1",
    "2-31",
    "32-126",
    "127",
    "128",
    "129",
    "128k-1",
    "128k",
    "128k+1",
    "130-2046",
    "2048-8191",
    ">=8192",
)
N_Q_CLASSES = ("0", "1", "2-8", "9-64", "65-256", ">256")
HEAD_CLASSES = tuple(str(h) for h in range(1, 17))
CACHE_CLASSES = ("0", "1", "2-64", "<=64MiB", ">64MiB", ">4GiB")
CACHE_LAYOUT_CLASSES = ("[rows, 656]", "[blocks, block_size, 656]", "[a, blocks, block_size, 656]")
# the precondition violations a recipe can declare: violating_recipes' kinds, then the recipe's
# corruption kinds it never picks (scale_not_pow2: the raw writer stands for it), then the engine
# writer's cache (drawn only where kernel.writers.sglang runs)
VIOLATION_KINDS = (
    "raw_writer",
    "above_cap_latent",
    "scale_above_cap",
    "nan_codes",
    "zero_scale",
    "negative_without_has_invalid",
    "index_out_of_range",
    "scale_not_pow2",
    "sglang_writer",
)
SCALE_CLASSES = (*SOFTMAX_SCALES, "number")
INVALID_CLASSES = ("off", *(f"on/{p}" for p in INVALID_PATTERNS))
PAD_KINDS = ("contiguous", "row pad", "head pad", "row+head pad")
OUT_CLASSES = ("kernel allocates", *(f"out= {k}" for k in PAD_KINDS), "out= head-major")
OPTION_CLASSES = (
    "lse",
    "no lse",
    "poison",
    "no poison",
    "indptr[0]=0",
    "indptr[0]>0",
    "no stream tail",
    "stream tail",
    "unconsumed valid",
    "unconsumed garbage",
)


def row_length_class(length: int) -> str:
    """The class of one row length (see the module docstring for the boundaries and why)."""
    if length < 0:
        return "<0"
    if length <= 1:
        return str(length)
    if length < WAVE_KEYS:
        return "2-31"
    if length < TILE - 1:
        return "32-126"
    if length <= TILE + 1:
        return str(length)  # 127, 128, 129
    if length >= VERY_LONG_ROW:
        return ">=8192"
    if length >= LONG_ROW:
        return "2048-8191"
    offset = length % TILE
    if offset == TILE - 1:
        return "128k-1"
    if offset == 0:
        return "128k"
    if offset == 1:
        return "128k+1"
    return "130-2046"


def n_q_class(n_q: int) -> str:
    """The class of a query-row count: 0 | 1 | 2-8 | 9-64 | 65-256 | >256 (module docstring)."""
    if n_q <= 1:
        return str(n_q)
    for top, name in ((8, "2-8"), (64, "9-64"), (CUS, "65-256")):
        if n_q <= top:
            return name
    return ">256"


def cache_class(cache_rows: int) -> str:
    """The class of a cache size in rows: 0 | 1 | 2-64 | <=64MiB | >64MiB | >4GiB (module docstring)."""
    if cache_rows <= 64:
        return str(cache_rows) if cache_rows <= 1 else "2-64"
    if cache_rows * RECORD_BYTES <= SMALL_CACHE_BYTES_:
        return "<=64MiB"
    return ">4GiB" if cache_rows * RECORD_BYTES > 4 * 2**30 else ">64MiB"


def _pad_kind(pad: tuple[int, int]) -> str:
    rows, heads = pad
    return PAD_KINDS[(rows > 0) + 2 * (heads > 0)]


def violations(recipe: Recipe) -> frozenset[str]:
    """The precondition violations the recipe declares (VIOLATION_KINDS; empty for a recipe that
    meets every precondition): a raw writer, above-cap latent, each corruption kind, negative
    entries without has_invalid (an invalid pattern that makes some: not "scattered" at 0 permille)."""
    kinds = {c["kind"] for c in recipe.corruptions}
    if recipe.writer == "raw":
        kinds.add("raw_writer")
    if recipe.writer == "sglang":
        kinds.add("sglang_writer")
    if recipe.latent == "above_cap":
        kinds.add("above_cap_latent")
    if not recipe.has_invalid and recipe.invalid_pattern != "none":
        if not (recipe.invalid_pattern == "scattered" and recipe.invalid_permille == 0):
            kinds.add("negative_without_has_invalid")
    return frozenset(kinds)


def _out_class(recipe: Recipe) -> str:
    if recipe.out_pad is None:
        return "kernel allocates"
    return "out= head-major" if recipe.out_layout == "heads" else f"out= {_pad_kind(recipe.out_pad)}"


def _one(value: str) -> frozenset[str]:
    return frozenset((value,))


@dataclass(frozen=True)
class Family:
    """One recipe dimension: `extract(recipe)` is a subset of `classes` for every valid recipe.

    key: the JSON name; title: the name in the summary; classes: every class, display order."""

    key: str
    title: str
    classes: tuple[str, ...]
    extract: Callable[[Recipe], frozenset[str]]


FAMILIES: tuple[Family, ...] = (
    Family("row_length", "row-length classes", ROW_LENGTH_CLASSES, lambda r: frozenset(map(row_length_class, r.row_lengths))),
    Family("pattern", "patterns", INDEX_PATTERNS, lambda r: _one(r.index_pattern)),
    Family("writer", "writers", tuple(WRITERS), lambda r: _one(r.writer)),
    Family("corruption", "corruptions", VIOLATION_KINDS, violations),
    Family("latent", "latent", LATENT_DISTS, lambda r: _one(r.latent)),
    Family("rope", "rope", ROPE_DISTS, lambda r: _one(r.rope)),
    Family("q", "q", Q_DISTS, lambda r: _one(r.q)),
    Family(
        "softmax_scale", "softmax scales", SCALE_CLASSES, lambda r: _one(r.softmax_scale if isinstance(r.softmax_scale, str) else "number")
    ),
    Family("heads", "heads", HEAD_CLASSES, lambda r: _one(str(r.heads))),
    Family("n_q", "query rows", N_Q_CLASSES, lambda r: _one(n_q_class(r.n_q))),
    Family("has_invalid", "has_invalid", INVALID_CLASSES, lambda r: _one(f"on/{r.invalid_pattern}" if r.has_invalid else "off")),
    Family("cache", "cache sizes", CACHE_CLASSES, lambda r: _one(cache_class(r.cache_rows))),
    Family(
        "cache_layout", "cache layouts", CACHE_LAYOUT_CLASSES, lambda r: _one(CACHE_LAYOUT_CLASSES[max(len(r.cache_shape or ()) - 1, 0)])
    ),
    Family("q_strides", "q strides", PAD_KINDS, lambda r: _one(_pad_kind(r.q_pad))),
    Family("q_layout", "q layouts", Q_LAYOUTS, lambda r: _one(r.q_layout)),
    Family("out", "out", OUT_CLASSES, lambda r: _one(_out_class(r))),
    Family(
        "options",
        "options",
        OPTION_CLASSES,
        lambda r: frozenset(
            (
                "lse" if r.return_lse else "no lse",
                "poison" if r.poison else "no poison",
                "indptr[0]>0" if r.stream_offset else "indptr[0]=0",
                "stream tail" if r.stream_tail else "no stream tail",
                f"unconsumed {r.unconsumed}",
            )
        ),
    ),
)
FAMILY_BY_KEY = {f.key: f for f in FAMILIES}
HEADLINE = {"row_length": "rows", "pattern": "patterns", "writer": "writers", "corruption": "corruptions"}  # progress line: short names


def features(recipe: Recipe) -> dict[str, frozenset[str]]:
    """Every family's classes of `recipe` (family key -> classes)."""
    return {f.key: f.extract(recipe) for f in FAMILIES}


# ---------------------------------------------------------------------------------------------
# What the strategies can draw

# mirrors of strategies.hypothesis_recipes (checked against real draws by tests/conformance/records/test_coverage.py)
_SPECIAL_LENGTHS = (1, 0, 2, 127, 128, 129, 255, 256, 257, 2048, 8192)
_RANDOM_LENGTH_MAX = 300
_CLEAN_LATENT = ("normal", "heavy", "outliers", "zero_blocks", "tiny_blocks", "max57344", "large")
_CLEAN_ROPE = ("normal", "large", "tiny", "zero")
_CLEAN_Q = ("normal", "large", "tiny", "zero_blocks", "tiny_blocks")
_SCALES = ("default", "peaked", "flat", "negative", "zero")
_PLAIN_PATTERNS = ("uniform", "clustered", "duplicates", "sorted", "reversed", "tail")
_CACHE_ROWS = (2, 100_000)
_VIOLATING_BASE = {"max_n_q": 8, "max_row": 512}
_EXACT_MAX_ROW = 256


@dataclass(frozen=True)
class DrawSpace:
    """The parameters of one recipe strategy: those of strategies.hypothesis_recipes.recipes
    (same names and defaults), plus `violations`: None for `recipes`, else the kinds
    `violating_recipes` picks one of (then the other fields are those of its base recipe)."""

    max_n_q: int = 256
    max_row: int = 8192
    max_total_keys: int = 16384
    max_heads: int = 16
    heads: tuple[int, ...] | None = None
    writers: tuple[str, ...] = tuple(PRECONDITION_WRITERS)
    huge_cache: bool = False
    exact: bool = False
    allow_out: bool = True
    violations: tuple[str, ...] | None = None


def recipes_space(**kwargs: Any) -> DrawSpace:
    """The space of strategies.hypothesis_recipes.recipes(**kwargs)."""
    if kwargs.get("heads") is not None:
        kwargs["heads"] = tuple(kwargs["heads"])
    return DrawSpace(**kwargs)


def violating_space(
    *, allow_out_of_range: bool, max_total_keys: int = 4096, heads: Iterable[int] | None = None, engine_writer: bool | None = None
) -> DrawSpace:
    """The space of strategies.hypothesis_recipes.violating_recipes(...) with these arguments."""
    engine = sglang_writer.available() if engine_writer is None else engine_writer
    kinds = VIOLATION_KINDS[:6] + (("index_out_of_range",) if allow_out_of_range else ()) + (("sglang_writer",) if engine else ())
    return DrawSpace(**_VIOLATING_BASE, max_total_keys=max_total_keys, heads=tuple(heads) if heads is not None else None, violations=kinds)


def _row_lengths(space: DrawSpace) -> set[int]:
    """Row lengths the strategy can produce (after its total-key cap, and violating_recipes'
    rows of at least one key)."""
    row_cap = min(space.max_row, _EXACT_MAX_ROW) if space.exact else space.max_row
    drawn = {x for x in _SPECIAL_LENGTHS if x <= row_cap} | set(range(min(row_cap, _RANDOM_LENGTH_MAX) + 1)) | {-3, -2, -1}
    longest = max(drawn)
    total = space.max_total_keys
    lengths = {x for x in drawn if x <= total}  # a single row this long keeps its length
    # rows over the total are all cut to max(1, total // n) (n rows; some row is longer than that)
    lengths |= {max(1, total // n) for n in range(1, space.max_n_q + 1) if n * longest > total}
    if space.violations is not None:
        lengths = {max(x, 1) for x in lengths}
    return lengths


def reachable(space: DrawSpace) -> dict[str, tuple[str, ...]]:
    """Per family, the classes (in the family's order) that the strategy of `space` can draw."""
    violating = space.violations is not None
    heads = space.heads if space.heads else range(1, space.max_heads + 1)
    if space.exact:
        latent, rope, q, scales = ("exact",), ("exact",), ("exact",), ("exact",)
    else:
        latent, rope, q, scales = _CLEAN_LATENT, _CLEAN_ROPE, _CLEAN_Q, _SCALES
    kinds = set(space.violations or ())
    writers = set(space.writers) | ({"raw"} if "raw_writer" in kinds else set()) | ({"sglang"} if "sglang_writer" in kinds else set())
    if "raw" in writers:
        kinds.add("raw_writer")
    if "sglang" in writers:
        kinds.add("sglang_writer")
    if space.huge_cache:
        patterns, caches = ("beyond_4gib",), {cache_class(ROWS_BEYOND_4GIB + 1), cache_class(ROWS_BEYOND_4GIB + 100_000)}
    else:
        patterns, caches = _PLAIN_PATTERNS, {cache_class(n) for n in (1, _CACHE_ROWS[0], 64, 65, _CACHE_ROWS[1])}
        if not violating:
            caches.add(cache_class(0))  # every row empty
    found: dict[str, set[str]] = {
        "row_length": {row_length_class(x) for x in _row_lengths(space)},
        "pattern": set(patterns),
        "writer": writers,
        "corruption": kinds,
        "latent": set(latent) | ({"above_cap"} if "above_cap_latent" in kinds else set()),
        "rope": set(rope),
        "q": set(q),
        "softmax_scale": set(scales),
        "heads": {str(h) for h in heads},
        "n_q": {n_q_class(n) for n in range(1, space.max_n_q + 1)},
        "has_invalid": {"off"} if violating else set(INVALID_CLASSES),
        "cache": caches,
        "cache_layout": {CACHE_LAYOUT_CLASSES[0]} if space.huge_cache else set(CACHE_LAYOUT_CLASSES),
        "q_strides": set(PAD_KINDS),
        "q_layout": {x for x in Q_LAYOUTS if not (space.exact and x == "overlapping_heads")},
        "out": set(OUT_CLASSES) if space.allow_out else {"kernel allocates"},
        "options": set(OPTION_CLASSES),
    }
    return {f.key: tuple(c for c in f.classes if c in found[f.key]) for f in FAMILIES}


def reachable_union(spaces: Iterable[DrawSpace]) -> dict[str, tuple[str, ...]]:
    """Per family, the classes any of the strategies can draw (a campaign's denominators)."""
    union: dict[str, set[str]] = {f.key: set() for f in FAMILIES}
    for space in spaces:
        for key, classes in reachable(space).items():
            union[key].update(classes)
    return {f.key: tuple(c for c in f.classes if c in union[f.key]) for f in FAMILIES}


def absent_writers(reach: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """Engine writers not in the writer denominators because they cannot run on this machine,
    with the reason (kernel.writers.sglang.unavailable_reason)."""
    why = sglang_writer.unavailable_reason()
    return {"sglang": why} if why and "sglang" not in reach.get("writer", ()) else {}


# ---------------------------------------------------------------------------------------------
# Counting


@dataclass
class Coverage:
    """Per family and class, how many examples had it; `reachable` gives the denominators."""

    reachable: Mapping[str, tuple[str, ...]]
    counts: dict[str, Counter[str]] = field(default_factory=lambda: {f.key: Counter() for f in FAMILIES})

    def add(self, recipe: Recipe) -> None:
        """Count one judged recipe; a pack (strategies.recipe, "Packs") counts each of its parts."""
        for part in recipe.parts or (recipe,):
            for key, classes in features(part).items():
                self.counts[key].update(classes)

    def hit(self, key: str) -> tuple[str, ...]:
        """The family's reachable classes drawn at least once."""
        return tuple(c for c in self.reachable[key] if self.counts[key][c])

    def never_hit(self, key: str) -> tuple[str, ...]:
        """The family's reachable classes never drawn."""
        return tuple(c for c in self.reachable[key] if not self.counts[key][c])

    def outside(self, key: str) -> tuple[str, ...]:
        """Classes drawn that the strategies were not expected to draw (a stale mirror: a bug)."""
        return tuple(c for c in FAMILY_BY_KEY[key].classes if self.counts[key][c] and c not in self.reachable[key])

    def fraction(self, key: str) -> str:
        """`hit/reachable`, e.g. "7/14"."""
        return f"{len(self.hit(key))}/{len(self.reachable[key])}"

    def headline(self) -> str:
        """The short form for a progress line: the four headline families."""
        return " ".join(f"{short} {self.fraction(key)}" for key, short in HEADLINE.items())

    def summary_lines(self) -> list[str]:
        """The summary's lines: every family's hit/reachable (headline families first), then the
        classes never hit, one line per family (and any drawn outside the expected space)."""
        parts = [f"{f.title} {self.fraction(f.key)}" for f in FAMILIES if f.key in HEADLINE]
        others = [f"{f.title} {self.fraction(f.key)}" for f in FAMILIES if f.key not in HEADLINE]
        lines = ["strategy features: " + ", ".join(parts), "  also: " + ", ".join(others)]
        lines += [f"  not drawn here: {why}" for why in absent_writers(self.reachable).values()]  # "sglang writer: ..."
        missing = [f"  {f.title}: {', '.join(self.never_hit(f.key))}" for f in FAMILIES if self.never_hit(f.key)]
        lines += ["never hit:", *missing] if missing else ["never hit: none (every class the strategies can draw was drawn)"]
        stray = [f"{f.title}: {', '.join(self.outside(f.key))}" for f in FAMILIES if self.outside(f.key)]
        if stray:
            lines.append("drawn outside the expected space: " + "; ".join(stray))
        return lines

    def to_json(self) -> dict[str, Any]:
        """Per family: title, hit, reachable, counts per reachable class (0 included), never_hit,
        not_drawable (classes the strategies cannot produce), outside (counts drawn outside)."""
        out: dict[str, Any] = {}
        for f in FAMILIES:
            reach = self.reachable[f.key]
            out[f.key] = {
                "title": f.title,
                "hit": len(self.hit(f.key)),
                "reachable": len(reach),
                "counts": {c: self.counts[f.key][c] for c in reach},
                "never_hit": list(self.never_hit(f.key)),
                "not_drawable": [c for c in f.classes if c not in reach],
                "outside": {c: self.counts[f.key][c] for c in self.outside(f.key)},
            }
        out["writer"]["absent"] = absent_writers(self.reachable)
        return out
