"""The fuzz campaign with several recipes per example (conformance.campaign.fuzz,
recipes_per_example > 1): each recipe its own kernel call, judged together
(conformance.judging.batch); a failure shrinks to the one recipe that fails alone; recipes drawn
again after they passed are not judged again; the counters count recipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.campaign.fuzz import summary_json
from conformance.judging.checks import differential
from tests.conformance.campaign.runs import isolate, records, run


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path, "tests/conformance/campaign/test_recipe_lists.py")


def test_counters_count_distinct_recipes(tmp_path: Path) -> None:
    """Every recipe judged is one example with one record per mode; none is judged twice; the
    recipes an example drew again are counted as repeats (in the summary JSON too)."""
    target, state = run("emulated", chunks=1, recipes_per_example=8, examples=12, properties=["differential", "preconditions"])
    judged = [r for r in records(tmp_path) if r.get("mode") != "float64"]
    recipes = [json.dumps(r["recipe"], sort_keys=True) for r in judged]
    assert sum(state.examples.values()) == len(judged) > 12  # more recipes than examples
    assert len(set(recipes)) == len(recipes)  # no recipe judged twice
    assert state.outcomes["differential"]["pass"] == state.examples["differential"] and not state.failures
    data = summary_json(state, target, budget_s=1e6, hypothesis_profile="ci", properties=["differential", "preconditions"], exit_code=0)
    assert data["repeats"] == state.repeats and data["examples"] == len(judged)


def test_a_failure_shrinks_to_one_recipe_that_fails_alone() -> None:
    target, state = run(
        "conformance.mutation.catalogue:empty_row_nan_out",
        chunks=2,
        recipes_per_example=8,
        examples=25,
        properties=["differential"],
        shrink_s=20.0,
    )
    assert len(state.failures) == 1
    failure = next(iter(state.failures.values()))
    assert any(length <= 0 for length in failure.recipe.row_lengths)  # the bug: an empty row
    assert failure.recipe.n_q <= 2 and failure.recipe.total_keys <= 2, failure.recipe
    with pytest.raises(AssertionError) as alone:
        differential(target, failure.recipe, "replay", use_target=False)
    assert str(alone.value).splitlines()[0] == failure.message.splitlines()[0]


def test_one_recipe_per_example_refuses_zero() -> None:
    with pytest.raises(ValueError, match="recipes_per_example must be >= 1"):
        run("emulated", chunks=1, recipes_per_example=0, examples=1, properties=["differential"])
