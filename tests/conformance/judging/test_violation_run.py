"""violation_run on a recipe that violates nothing: no verdict against the kernel under Hypothesis
(the example is rejected), an error for a stored entry (outside Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from conformance.judging.checks import violation_run
from conformance.judging.target import build_target
from strategies.recipe import Recipe
from tests.recipes import tiny

CLEAN = tiny(seed=3)


def test_outside_hypothesis_a_clean_recipe_is_an_error() -> None:
    target = build_target("emulated", device="cpu")
    with pytest.raises(AssertionError, match="reports none"):
        violation_run(target, CLEAN)


def test_under_hypothesis_a_clean_recipe_is_rejected_not_failed() -> None:
    target = build_target("emulated", device="cpu")

    @settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.just(CLEAN))
    def prop(recipe: Recipe) -> None:
        violation_run(target, recipe)

    with pytest.raises(Unsatisfiable):  # every example rejected: no failure is reported
        prop()
