"""Host reads per call of the reference and the bound: a fixed number, whatever the number of chunks
(the index-stream check, the row plan and, for the bound, the finiteness of q share one read; the
bound reads each batch's first chunk's preconditions, and the other checks once at the end), and
the stream's errors still named."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.tools.op_count import count_ops
from oracle.bound import evaluate_modes
from oracle.profiles import load_profile
from oracle.reference import reference
from oracle.rows import PreconditionError
from strategies.materialize import materialize
from strategies.recipe import Recipe

_SYNC_OPS = ("_local_scalar_dense", "nonzero", "item", "masked_select", "unique")


def _reads(fn: Any) -> int:
    """Device reads of one call: scalar reads, data-dependent shapes and Tensor.tolist calls."""
    ops = count_ops(fn).ops
    return ops["tolist"] + sum(n for name, n in ops.items() if name in _SYNC_OPS)


@pytest.mark.parametrize("has_invalid", [False, True])
def test_reference_reads_once(has_invalid: bool) -> None:
    invalid = {"has_invalid": True, "invalid_pattern": "scattered", "invalid_permille": 300} if has_invalid else {}
    recipe = Recipe(seed=1, n_q=12, heads=2, row_lengths=(50, 3, 50, 0, 20) * 2 + (7, 50), cache_rows=300, **invalid)  # type: ignore[arg-type]
    p = materialize(recipe, "cpu")
    args = p.args
    assert _reads(lambda: reference(*args, has_invalid=has_invalid, key_budget=100)) == 1  # several chunks


def test_bound_reads_per_batch() -> None:
    p = materialize(Recipe(seed=2, n_q=12, heads=2, row_lengths=(50, 3, 50, 0, 20) * 2 + (7, 50), cache_rows=300), "cpu")
    args = p.args
    profile = load_profile("gfx950")
    # the plan, each batch's first chunk, the deferred checks (and a read of a CPU profile
    # constant, no device involved): 5 chunks in 3 batches (widths 50, 20, 7 ... 3)
    many = _reads(lambda: evaluate_modes(*args, profile=profile, key_budget=100))
    one = _reads(lambda: evaluate_modes(*args, profile=profile, key_budget=100, batch_budget=1))
    assert many <= 3 + 4 and one > many


def test_stream_errors_still_named() -> None:
    p = materialize(Recipe(seed=3, n_q=3, heads=2, row_lengths=(10, 10, 10), cache_rows=64), "cpu")
    args = p.args
    beyond = p.indptr.clone()
    beyond[-1] += 5
    with pytest.raises(PreconditionError, match="row 2 reads indices"):
        reference(p.q, p.kv_cache, p.indices, beyond, p.softmax_scale)
    bad = p.indices.clone()
    bad[13] = 64
    with pytest.raises(PreconditionError, match=r"indices\[13\] = 64 is consumed"):
        evaluate_modes(p.q, p.kv_cache, bad, p.indptr, p.softmax_scale, profile=load_profile("gfx950"))
    q = p.q.clone()
    q[0, 0, 0] = float("nan")
    with pytest.raises(PreconditionError, match="q holds non-finite"):
        evaluate_modes(q, p.kv_cache, bad, p.indptr, p.softmax_scale, profile=load_profile("gfx950"))
    assert reference(*args).out.shape == (3, 2, 512)
