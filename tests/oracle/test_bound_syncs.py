"""The bound's precondition checks read the device back once per check group, and still name
the first broken precondition in their order."""

from __future__ import annotations

import pytest

from conformance.tools.op_count import SCALAR_READS, OpCounter
from oracle import bound
from oracle.profiles import load_profile
from oracle.rows import PreconditionError, iter_bound_chunks
from strategies.materialize import materialize
from strategies.recipe import Recipe


def _chunk(recipe: Recipe):  # type: ignore[no-untyped-def]
    p = materialize(recipe, "cpu")
    (chunk,) = iter_bound_chunks(p.indices, p.indptr, p.kv_cache, has_invalid=p.has_invalid)
    return p, chunk


def test_chunk_preconditions_one_sync() -> None:
    _, chunk = _chunk(Recipe(seed=1, n_q=3, heads=4, row_lengths=(90, 30, 200), cache_rows=512))
    for name, scale_model in (("gfx950", "stored"), ("gfx950", "gfx950"), ("bf16-q-bf16-p", "stored")):
        with OpCounter() as syncs:
            bound._check_chunk_preconditions(chunk, load_profile(name), scale_model)
        assert syncs.count(SCALAR_READS) <= 1  # tolist reads the stacked flags (not a dispatched op on every build)


def test_first_broken_precondition_named() -> None:
    """Scales that are not powers of two and NaN codes in the same chunk: the scale is named, as
    when each check read the device back in turn."""
    recipe = Recipe(
        seed=2,
        n_q=2,
        heads=2,
        row_lengths=(60, 40),
        cache_rows=128,
        corruptions=({"kind": "scale_not_pow2", "count": 3}, {"kind": "nan_codes", "count": 3}),
    )
    _, chunk = _chunk(recipe)
    with pytest.raises(PreconditionError, match="not a positive normal power of two"):
        bound._check_chunk_preconditions(chunk, load_profile("gfx950"), "stored")
    with pytest.raises(PreconditionError, match="NaN codes"):
        bound._check_chunk_preconditions(chunk, load_profile("gfx950"), "gfx950")


def test_evaluate_syncs_per_chunk() -> None:
    """One chunk, two modes: the whole evaluation reads the device back at most 8 times through
    scalar reads (the precondition checks read back once per check group, not once per check)."""
    p = materialize(Recipe(seed=3, n_q=4, heads=8, row_lengths=(300, 20, 0, 129), cache_rows=1024), "cpu")
    with OpCounter() as syncs:
        bound.evaluate_modes(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, profile=load_profile("gfx950"))
    assert syncs.count(SCALAR_READS) <= 8
