"""The properties' checks over several recipes of one example: each recipe its own kernel call
(the shapes a kernel sees are the recipes' own), the judging around the calls shared.

`differential_batch(target, recipes, ...)` is conformance.judging.checks.differential for each
recipe, with the same records, verdicts and failures: every recipe is materialised and its
kernel called (kernels before any reference), then all are judged with one reference-and-bound
pass and one comparison (conformance.judging.many.judge_many, each call's numbers bit for bit
its own); a call that fails, or that the shared pass leaves undecided, is judged alone by
checks.judge_call, which raises the failure differential raises for that recipe. The failure
carries its recipe (conformance.judging.target.judging), so Hypothesis, shrinking the list by
dropping recipes, ends at the one recipe that fails, replayable alone.

`violation_batch(target, recipes, ...)` runs checks.violation_run per recipe.

`differential_pack(target, recipe, ...)` is checks.differential on one recipe that may be a pack
(several recipes' rows in one kernel call: strategies.recipe, "Packs"): the pack is called and
judged as any call; when it fails, each part is judged alone (its own call), and the first part
that fails alone raises its own failure, charged to that part (replayable alone); only a pack
whose every part passes alone raises the pack's failure, charged to the pack (its recipe holds
its parts: it replays as the same packed call).

A recipe that cannot be judged here (too large, a call the backend does not take, a violating
recipe that violates nothing) is left out with its reason noted (conformance.judging.rejections);
the example is rejected only when no recipe is left. Recipes are judged in list order and the
first failure ends the example.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import reject
from hypothesis.control import currently_in_test_context
from hypothesis.errors import UnsatisfiedAssumption

from conformance.judging.checks import (
    check_returned_types,
    judge_call,
    materialize_for,
    require_support,
    run_valid_call,
    target_ratios,
    violation_run,
)
from conformance.judging.harness import Verdict
from conformance.judging.many import judge_many
from conformance.judging.target import Target, judging, out_of_device_memory
from strategies.materialize import Problem
from strategies.recipe import Recipe

#: called once per recipe judged (passing), with its verdicts (differential) or what was observed (violation)
OnJudged = Callable[[Recipe, Any], None]


@dataclass
class Skipped:
    """A recipe of the example that was not judged, and why."""

    recipe: Recipe
    reason: str


def _skip_exceptions() -> tuple[type[BaseException], ...]:
    return (UnsatisfiedAssumption, pytest.skip.Exception)


def _none_left(skipped: list[Skipped]) -> None:
    """Every recipe was left out: reject the example under Hypothesis (the reasons are noted), else skip the test."""
    if currently_in_test_context():
        reject()
    pytest.skip("not run here: " + "; ".join(dict.fromkeys(s.reason for s in skipped)))


def _prepare(target: Target, recipe: Recipe, property_name: str) -> Problem:
    """The recipe's problem, checked as taken by the backend (raises what materialize_for and require_support raise)."""
    with judging(recipe, property_name):
        problem = materialize_for(target, recipe)
        require_support(target, problem)
    return problem


def differential_batch(
    target: Target,
    recipes: Sequence[Recipe],
    property_name: str = "differential",
    *,
    use_target: bool = True,
    timeout_s: float | None = None,
    on_judged: OnJudged | None = None,
) -> list[list[Verdict]]:
    """checks.differential for each recipe, judged together (module docstring); returns the
    verdicts (exact-steps first) of each recipe judged, in order. `on_judged(recipe, verdicts)`
    is called as each recipe passes (before a later one fails)."""
    __tracebackhide__ = True
    skipped: list[Skipped] = []
    problems: list[Problem] = []
    try:
        for recipe in recipes:
            try:
                problems.append(_prepare(target, recipe, property_name))
            except _skip_exceptions() as err:
                skipped.append(Skipped(recipe, str(err) or "rejected"))
        if not problems:
            _none_left(skipped)
        outputs: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        for problem in problems:  # every kernel before any reference
            with judging(problem.recipe, property_name):
                out, lse = run_valid_call(target, problem, property_name, timeout_s=timeout_s)
                check_returned_types(target, problem, out, lse, property_name)
            outputs.append((out, lse))
        judgements = judge_many(problems, outputs, target.profile)
        verdicts: list[list[Verdict]] = []
        passed: list[dict[str, Verdict]] = []
        for problem, (out, lse), judgement in zip(problems, outputs, judgements, strict=True):
            try:
                with judging(problem.recipe, property_name):
                    found = judge_call(target, problem, out, lse, property_name, judgement)
            except AssertionError:
                if use_target:
                    target_ratios(passed)  # the example's passing calls, before its failure ends it
                raise
            passed.append(dict(zip(("exact-steps", "float64"), found, strict=False)) if judgement is None else judgement.verdicts)
            verdicts.append(found)
            if on_judged is not None:
                on_judged(problem.recipe, found)
        if use_target:
            target_ratios(passed)
        return verdicts
    except torch.OutOfMemoryError as err:
        out_of_device_memory(err)
        raise  # not reached


def violation_batch(
    target: Target,
    recipes: Sequence[Recipe],
    property_name: str = "preconditions",
    *,
    timeout_s: float | None = None,
    on_judged: OnJudged | None = None,
) -> list[dict[str, Any]]:
    """checks.violation_run for each recipe in order (module docstring); returns what was
    observed per recipe judged."""
    __tracebackhide__ = True
    skipped: list[Skipped] = []
    observed: list[dict[str, Any]] = []
    for recipe in recipes:
        try:
            seen = violation_run(target, recipe, property_name, timeout_s=timeout_s)
        except _skip_exceptions() as err:
            skipped.append(Skipped(recipe, str(err) or "rejected"))
            continue
        observed.append(seen)
        if on_judged is not None:
            on_judged(recipe, seen)
    if not observed:
        _none_left(skipped)
    return observed


def differential_pack(
    target: Target,
    recipe: Recipe,
    property_name: str = "differential",
    *,
    use_target: bool = True,
    timeout_s: float | None = None,
) -> list[Verdict]:
    """checks.differential on `recipe`, a pack or a recipe of its own (module docstring); returns
    the verdicts of its call (exact-steps first). A failing pack's parts are judged alone
    (without hypothesis.target()) before the pack's own failure is raised; a part that is not
    judged alone (rejected, skipped) is passed over. A hang is raised as it is (each part could
    hang for the whole limit)."""
    __tracebackhide__ = True
    from conformance.judging.checks import differential

    try:
        return differential(target, recipe, property_name, use_target=use_target, timeout_s=timeout_s)
    except AssertionError:
        for part in recipe.parts:  # none for a recipe of its own
            try:
                differential(target, part, property_name, use_target=False, timeout_s=timeout_s)
            except _skip_exceptions():
                continue
        raise
