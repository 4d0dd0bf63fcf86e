"""Property 1: the kernel's out and lse lie within its numerics profile's a-priori bound of the
float64 reference (both comparison modes), with identical NaN/inf positions and no all-zero
output where the bound does not admit zero. `target()` steers the search toward large error/bound."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.judging.checks import backend_limits, differential, size_limits
from conformance.judging.target import Target
from conformance.suite.locks import exclusive
from strategies.hypothesis_recipes import differential_writers, recipes


def _writers(target: Target) -> tuple[str, ...]:
    """The writers for the target's profile (the sglang engine writer only where its caches meet the profile's preconditions)."""
    return differential_writers(target.profile.needs_pow2_scales)


@given(data=st.data())
def test_differential(target: Target, data: st.DataObject) -> None:
    recipe = data.draw(recipes(**size_limits(target), **backend_limits(target), writers=_writers(target)), label="recipe")
    differential(target, recipe)


@given(data=st.data())
def test_differential_long_rows(target: Target, data: st.DataObject) -> None:
    """Few rows, up to 8192 keys each: many tiles, rescales and long accumulations."""
    limits = {"max_n_q": 4, "max_total_keys": 8192 if target.device.type == "cpu" else 1 << 15}
    recipe = data.draw(recipes(**limits, **backend_limits(target), writers=_writers(target)), label="recipe")
    differential(target, recipe, "differential_long_rows")


@pytest.mark.huge_cache
@given(data=st.data())
def test_differential_beyond_4gib(target: Target, data: st.DataObject) -> None:
    """Every referenced record lies past the first 4 GiB of a cache larger than 4 GiB. On the CPU
    one such case runs at a time per machine (each holds over 4 GiB of host memory)."""
    recipe = data.draw(
        recipes(max_n_q=8, max_total_keys=2048, huge_cache=True, **backend_limits(target), writers=_writers(target)), label="recipe"
    )
    with exclusive("huge_cache") if target.device.type == "cpu" else nullcontext():
        differential(target, recipe, "differential_beyond_4gib")
