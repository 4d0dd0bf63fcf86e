"""The recipe under judgement travels with the failure (conformance.judging.target.judging): an exception
leaving a judging block carries an immutable JudgedRecipe, which the pytest plugin reads back
from a failing test's exception to save a pending corpus entry (end to end through pytest:
tests/conformance/cli/test_errors.py, the unwritable pending folder)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.judging.target import JudgedRecipe, judged_recipe, judges, judging
from strategies.recipe import Recipe
from tests.recipes import TINY

A = TINY
B = Recipe(seed=2, n_q=1, heads=1, row_lengths=(3,), cache_rows=4)


def test_an_exception_leaving_the_block_carries_the_innermost_recipe() -> None:
    with pytest.raises(AssertionError) as caught:
        with judging(A, "outer"):
            with judging(B, "inner", expect="precondition"):
                raise AssertionError("verdict")
    assert judged_recipe(caught.value) == JudgedRecipe(B, "inner", "precondition")
    with pytest.raises(dataclasses.FrozenInstanceError):
        judged_recipe(caught.value).recipe = A  # type: ignore[misc, union-attr]
    with pytest.raises(KeyboardInterrupt) as interrupted:
        with judging(A, "p"):
            raise KeyboardInterrupt
    assert judged_recipe(interrupted.value) is None  # the session's, not a verdict's
    assert judged_recipe(None) is None and judged_recipe(ValueError("outside any block")) is None


def test_groups_and_chains_are_searched() -> None:
    with pytest.raises(AssertionError) as caught:
        with judging(A, "p"):
            raise AssertionError("first")
    group = ExceptionGroup("Hypothesis found 2 distinct failures", [ValueError("no record"), caught.value])
    assert judged_recipe(group) == JudgedRecipe(A, "p")
    try:
        try:
            raise caught.value
        except AssertionError as err:
            raise RuntimeError("while reporting") from err
    except RuntimeError as chained:
        assert judged_recipe(chained) == JudgedRecipe(A, "p")


def test_judges_reads_recipe_and_property_from_the_call() -> None:
    @judges(expect="precondition")
    def check(target: object, recipe: Recipe, property_name: str = "default", *, fail: bool = True) -> str:
        if fail:
            raise AssertionError("bad")
        return "ok"

    assert check(None, A, fail=False) == "ok" and check.__name__ == "check"
    with pytest.raises(AssertionError) as caught:
        check(None, B)
    assert judged_recipe(caught.value) == JudgedRecipe(B, "default", "precondition")


def test_a_hypothesis_failure_carries_the_recipe_of_the_example_it_reports() -> None:
    """Hypothesis re-raises the exception of its final (shrunk) example: that one carries the
    recipe the plugin saves, not the recipe of some earlier failing example."""

    @settings(max_examples=50, database=None, derandomize=True, deadline=None)
    @given(st.integers(0, 1000))
    def prop(keys: int) -> None:
        with judging(dataclasses.replace(A, row_lengths=(keys,)), "p"):
            assert keys < 100, "too many keys"

    with pytest.raises(AssertionError) as caught:
        prop()
    judged = judged_recipe(caught.value)
    assert judged is not None and judged.recipe.row_lengths == (100,)  # the shrunk example
