"""A kernel call that runs out of device memory is the machine's load, not a broken promise: the
differential check skips it (a Hypothesis property rejects the example) instead of reporting
a contract violation, while any other exception of a valid call still is one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.judging.checks import differential
from conformance.judging.target import build_target
from strategies.recipe import Recipe

TWO_ROWS = Recipe(seed=1, n_q=2, heads=1, row_lengths=(5, 3), cache_rows=16)


def out_of_memory(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.99 GiB.")


def value_error(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    raise ValueError("no such layout")


for _kernel in (out_of_memory, value_error):
    _kernel.profile = "gfx950"  # type: ignore[attr-defined]


def test_out_of_memory_skips_the_call() -> None:
    with pytest.raises(pytest.skip.Exception, match="ran out of memory"):
        differential(build_target(f"{__name__}:out_of_memory", device="cpu"), TWO_ROWS, use_target=False)


def test_another_exception_is_still_a_contract_violation() -> None:
    with pytest.raises(AssertionError, match=r"contract violation: a valid call raised ValueError"):
        differential(build_target(f"{__name__}:value_error", device="cpu"), TWO_ROWS, use_target=False)


def test_in_a_property_the_example_is_rejected_not_failed() -> None:
    target = build_target(f"{__name__}:out_of_memory", device="cpu")
    calls = []

    @settings(max_examples=5, database=None, deadline=None)
    @given(st.integers(1, 3))
    def prop(seed: int) -> None:
        calls.append(seed)
        differential(target, Recipe(seed=seed, n_q=1, heads=1, row_lengths=(4,), cache_rows=8), use_target=False)

    with pytest.raises(Exception) as info:  # every example rejected: Hypothesis reports it can draw none
        prop()
    assert "Unsatisfiable" in type(info.value).__name__ or "unsatisf" in str(info.value).lower(), info.value
    assert calls


def test_out_of_memory_under_a_violation_skips_too() -> None:
    from conformance.judging.checks import violation_run

    recipe = Recipe(seed=2, n_q=1, heads=1, row_lengths=(4,), cache_rows=8, corruptions=({"kind": "zero_scale", "count": 2},))
    with pytest.raises(pytest.skip.Exception, match="ran out of memory"):
        violation_run(build_target(f"{__name__}:out_of_memory", device="cpu"), recipe)
