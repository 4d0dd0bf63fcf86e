"""Recipes several test modules share (strategies.recipe.Recipe, frozen: safe to share).

Each one is written once here and imported where a module used the same literal; a list of
recipes chosen for one module's boundaries (tile and chunk edges) stays in that module.
"""

from __future__ import annotations

from strategies.recipe import Recipe


def tiny(seed: int = 1) -> Recipe:
    """The smallest problem with keys: one query row, one head, 2 keys of a 4-row cache."""
    return Recipe(seed=seed, n_q=1, heads=1, row_lengths=(2,), cache_rows=4)


TINY = tiny()

#: one query row, one head, 16 keys of a 64-row cache (within every memory limit)
SIXTEEN_KEYS = Recipe(seed=1, n_q=1, heads=1, row_lengths=(16,), cache_rows=64)

#: ragged rows (an empty, a negative-length and two equal ones) over an index stream that starts 3 entries in
RAGGED_OFFSET = Recipe(seed=3, n_q=5, heads=4, row_lengths=(0, 70, -3, 33, 70), cache_rows=200, stream_offset=3)

#: has_invalid with 30% of the entries -1, scattered, and an empty last row
SCATTERED_INVALID = Recipe(
    seed=4,
    n_q=3,
    heads=2,
    row_lengths=(90, 40, 0),
    cache_rows=150,
    invalid_pattern="scattered",
    invalid_permille=300,
    has_invalid=True,
)


def bench_shape(seed: int) -> Recipe:
    """The timing tests' problem: 64 query rows x 16 heads x 2048 keys of an 8192-row cache."""
    return Recipe(seed=seed, n_q=64, heads=16, row_lengths=(2048,) * 64, cache_rows=8192)


def exact_isa(heads: int, has_invalid: bool, return_lse: bool, seed: int) -> Recipe:
    """The exact-arithmetic problem of the compiled kernel's interpreter runs: rows empty, one tile
    with a tail and two tiles (0, 37, 200 keys of a 400-row cache); with has_invalid, 20% of the
    entries -1, scattered. Exact latent, rope, q and softmax scale: every kernel that follows the
    gfx950 numerics gives the same bits."""
    return Recipe(
        seed=seed,
        n_q=3,
        heads=heads,
        row_lengths=(0, 37, 200),
        cache_rows=400,
        latent="exact",
        rope="exact",
        q="exact",
        softmax_scale="exact",
        has_invalid=has_invalid,
        return_lse=return_lse,
        invalid_pattern="scattered" if has_invalid else "none",
        invalid_permille=200 if has_invalid else 0,
    )
