"""Failure triage (conformance.judging.triage): each kind is reached by the failure it names.

The kernel outputs here are the float64 reference perturbed the way a legitimate or a broken
kernel would perturb it (subnormals flushed, merge weights off 1 at a large |lse|, a relative
error no rounding model explains, a NaN, a value no weighting of the keys gives), judged under a
profile that does not admit the perturbation: the triage must name the rung that does, or the
kind it is. tests/conformance/judging/test_kinds.py reaches every kind with real kernels.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conformance.judging.finding import CONTRACT, PROFILE, WRONG_RESULT
from conformance.judging.harness import judge
from conformance.judging.triage import COARSENINGS, LADDER, _apply, coarsest, outputs_subject, triage
from oracle.bound import evaluate
from oracle.profile_schema import SplitModel
from oracle.profiles import load_profile
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe

CORPUS = Path(__file__).resolve().parents[3] / "conformance" / "corpus"
BF16 = load_profile("bf16-q-bf16-p")
SHIPPED = ("bf16-q-bf16-p", "gfx950", "fp32", "exact")


def _entry(name: str, **changes: object) -> Problem:
    recipe = json.loads((CORPUS / f"{name}.json").read_text())["recipe"]
    return materialize(Recipe.from_json_dict({**recipe, "return_lse": True, **changes}), "cpu")


def _reference(problem: Problem, profile=BF16) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    ev = evaluate(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=profile)
    return ev.out, ev.lse


def _classify(problem: Problem, out64: torch.Tensor, lse64: torch.Tensor, profile):  # type: ignore[no-untyped-def]
    out, lse = out64.to(torch.bfloat16), lse64.to(torch.float32)
    judgement = judge(problem, out, lse, profile)
    assert not judgement.ok, "the perturbation must fail the declared profile"
    return triage(problem, out, lse, profile, judgement)


def test_flushed_subnormal_output_is_a_profile_too_tight_for_subnormals() -> None:
    """The flat-softmax entry's out[30, 0, 362] is -6.7e-40 in float64: a flushing kernel returns 0."""
    problem = _entry("flashmla-max-latent-flat-softmax")
    ref, lse = _reference(problem)
    assert 0 < abs(float(ref[30, 0, 362])) < 2.0**-126
    flushed = torch.where(ref.abs() < 2.0**-126, torch.zeros_like(ref), ref)
    result = _classify(problem, flushed, lse, dataclasses.replace(BF16, subnormals="preserve"))
    assert result.kind == PROFILE and result.rungs == (LADDER[0].name,), result
    assert result.finding.subject == f"passes if {LADDER[0].name}"
    assert "under the declared profile 'bf16-q-bf16-p'" in result.finding.detail


def test_merge_weights_off_one_at_large_lse_is_a_profile_too_tight_for_splits() -> None:
    """One-hot softmax at max |score| 2.4e5: f32 lse_i carry 2^-6 each, so a merge may scale the
    row by 2^(+-2^-6 ln 2 ...): 0.8% low is what FlashMLA decode returned (2 bf16 ulps)."""
    problem = _entry("flashmla-decode-max-latent-one-hot")
    ref, lse = _reference(problem)
    result = _classify(problem, ref * (1 - 2.0**-7), lse, dataclasses.replace(BF16, split=SplitModel(rows="never")))
    assert result.kind == PROFILE and result.rungs == (LADDER[2].name,), result


def test_halved_output_at_ordinary_scores_is_a_wrong_result() -> None:
    """A batch whose out is halved at ordinary scores (|lse| < 6): no rung admits it, halving stays
    inside the keys' hull, and a 50% error is outside even a bf16 score and softmax (at such
    scores they err by a few percent)."""
    problem = materialize(Recipe(seed=11, n_q=4, heads=4, row_lengths=(64, 200, 17, 129), cache_rows=512, return_lse=True), "cpu")
    ref, lse = _reference(problem)
    result = _classify(problem, ref * 0.5, lse, BF16)
    assert result.finding.group == (WRONG_RESULT, "out outside the bound"), result
    assert "under the coarsest rounding model" in result.finding.detail and "exact-steps mode" in result.finding.detail


def test_nan_where_reference_is_finite_is_a_contract_violation() -> None:
    problem = _entry("edge-softmax-peaked")
    ref, lse = _reference(problem)
    bad = ref.clone()
    bad[0, 0, 3] = float("nan")
    result = _classify(problem, bad, lse, BF16)
    assert result.finding.group == (CONTRACT, "out is not finite where the reference is"), result
    assert "out[0, 0, 3] = nan" in result.finding.detail


def test_value_outside_the_keys_hull_is_a_contract_violation() -> None:
    problem = _entry("edge-softmax-peaked")
    ref, lse = _reference(problem)
    bad = ref.clone()
    bad[0, 0, 7] = 64 * ref.abs().max()
    result = _classify(problem, bad, lse, BF16)
    assert result.finding.group == (CONTRACT, "out lies outside the keys' [min v, max v]"), result
    assert "outside [min v, max v]" in result.finding.detail


def test_empty_row_not_zero_is_a_contract_violation() -> None:
    problem = materialize(Recipe(seed=4, n_q=2, heads=2, row_lengths=(0, 5), cache_rows=20, return_lse=True), "cpu")
    ref, lse = _reference(problem)
    bad = ref.clone()
    bad[0, 1, 0] = 1.0
    result = _classify(problem, bad, lse, BF16)
    assert result.finding.group == (CONTRACT, "an empty row's out is not 0"), result


def test_subjects_name_the_outputs() -> None:
    assert outputs_subject(["lse"]) == "lse outside the bound"
    assert outputs_subject(["out"]) == outputs_subject(["lse", "out"]) == "out outside the bound"  # out with or without lse: one subject


def test_a_precision_failure_groups_with_the_wrong_results_of_its_subject() -> None:
    from conformance.judging.finding import PRECISION, WRONG_RESULT, Finding, worse

    wrong, precise = Finding(WRONG_RESULT, "out outside the bound", "x 3"), Finding(PRECISION, "out outside the bound", "P")
    assert wrong.group == precise.group and worse(precise, wrong) == wrong
    assert Finding(PRECISION, "lse outside the bound").group != precise.group


def _bounds(problem: Problem, profile):  # type: ignore[no-untyped-def]
    return evaluate(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=profile)


@pytest.mark.parametrize("rung", LADDER, ids=lambda r: r.name)
def test_every_rung_only_loosens(rung) -> None:  # type: ignore[no-untyped-def]
    """A rung is a weaker assumption: its bound is never below the declared profile's."""
    problem = _entry("edge-softmax-peaked")
    for profile in (BF16, load_profile("gfx950"), load_profile("fp32")):
        tight, loose = _bounds(problem, profile), _bounds(problem, rung.relax(profile))
        assert bool((loose.out_bound >= tight.out_bound).all()) and bool((loose.lse_bound >= tight.lse_bound).all())


@pytest.mark.parametrize("step", COARSENINGS, ids=lambda r: r.name)
def test_every_coarsening_only_loosens_and_the_coarsest_model_contains_it(step) -> None:  # type: ignore[no-untyped-def]
    """A coarsening widens the bound of every rung's profile, and the coarsest model (every
    coarsening) is at least as wide as any one of them: "wrong result" (outside the coarsest
    model) is then outside each single step too. Rows of many tiles, invalid entries and an empty row."""
    problems = (
        _entry("edge-softmax-peaked"),
        materialize(Recipe(seed=7, n_q=3, heads=2, row_lengths=(300, 0, 40), cache_rows=512, latent="outliers", return_lse=True), "cpu"),
    )
    for problem in problems:
        for name in SHIPPED:
            laddered = _apply(load_profile(name), LADDER)
            base, single, coarse = (
                _bounds(problem, laddered),
                _bounds(problem, step.relax(laddered)),
                _bounds(problem, coarsest(load_profile(name))),
            )
            for tight, loose in ((base, single), (single, coarse)):
                assert bool((loose.out_bound >= tight.out_bound).all()), (name, step.name)
                assert bool((loose.lse_bound >= tight.lse_bound).all()), (name, step.name)
            assert bool(torch.isfinite(coarse.out_bound).all()) and bool(torch.isfinite(coarse.lse_bound).all()), name
