"""Failure triage (conformance.judging.triage): each class is reached by the failure it names.

The kernel outputs here are the float64 reference perturbed the way a legitimate or a broken
kernel would perturb it (subnormals flushed, merge weights off 1 at a large |lse|, a relative
error no rung explains, a NaN, a value no weighting of the keys gives), judged under a profile
that does not admit the perturbation: the triage must name the rung that does, or none.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from conformance.judging.harness import judge
from conformance.judging.triage import CONTRACT, LADDER, PRECISION, PROFILE, triage
from oracle.bound import evaluate
from oracle.profile_schema import SplitModel
from oracle.profiles import load_profile
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe

CORPUS = Path(__file__).resolve().parents[1] / "conformance" / "corpus"
BF16 = load_profile("bf16-q-bf16-p")


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


def test_flushed_subnormal_output_is_class_2_subnormals() -> None:
    """The flat-softmax entry's out[30, 0, 362] is -6.7e-40 in float64: a flushing kernel returns 0."""
    problem = _entry("flashmla-max-latent-flat-softmax")
    ref, lse = _reference(problem)
    assert 0 < abs(float(ref[30, 0, 362])) < 2.0**-126
    flushed = torch.where(ref.abs() < 2.0**-126, torch.zeros_like(ref), ref)
    result = _classify(problem, flushed, lse, dataclasses.replace(BF16, subnormals="preserve"))
    assert result.klass == PROFILE and result.rungs == (LADDER[0].name,), result


def test_merge_weights_off_one_at_large_lse_is_class_2_split() -> None:
    """One-hot softmax at max |score| 2.4e5: f32 lse_i carry 2^-6 each, so a merge may scale the
    row by 2^(+-2^-6 ln 2 ...): 0.8% low is what FlashMLA decode returned (2 bf16 ulps)."""
    problem = _entry("flashmla-decode-max-latent-one-hot")
    ref, lse = _reference(problem)
    result = _classify(problem, ref * (1 - 2.0**-7), lse, dataclasses.replace(BF16, split=SplitModel(rows="never")))
    assert result.klass == PROFILE and result.rungs == (LADDER[2].name,), result


def test_scaled_output_at_ordinary_scores_is_class_3() -> None:
    """A row scaled by 7/8 at ordinary scores (|lse| < 60): no rung admits it, since the merge's
    error scales with |lse|, and shrinking toward 0 stays inside the keys' hull."""
    problem = _entry("edge-softmax-peaked")
    ref, lse = _reference(problem)
    result = _classify(problem, ref * (1 - 2.0**-3), lse, BF16)
    assert result.klass == PRECISION, result


def test_nan_where_reference_is_finite_is_class_1() -> None:
    problem = _entry("edge-softmax-peaked")
    ref, lse = _reference(problem)
    bad = ref.clone()
    bad[0, 0, 3] = float("nan")
    result = _classify(problem, bad, lse, BF16)
    assert result.klass == CONTRACT and "not finite" in result.reason, result


def test_value_outside_the_keys_hull_is_class_1() -> None:
    problem = _entry("edge-softmax-peaked")
    ref, lse = _reference(problem)
    bad = ref.clone()
    bad[0, 0, 7] = 64 * ref.abs().max()
    result = _classify(problem, bad, lse, BF16)
    assert result.klass == CONTRACT and "outside [min v, max v]" in result.reason, result


def test_empty_row_not_zero_is_class_1() -> None:
    problem = materialize(Recipe(seed=4, n_q=2, heads=2, row_lengths=(0, 5), cache_rows=20, return_lse=True), "cpu")
    ref, lse = _reference(problem)
    bad = ref.clone()
    bad[0, 1, 0] = 1.0
    result = _classify(problem, bad, lse, BF16)
    assert result.klass == CONTRACT and "exactly 0" in result.reason, result


@pytest.mark.parametrize("rung", LADDER, ids=lambda r: r.name)
def test_every_rung_only_loosens(rung) -> None:  # type: ignore[no-untyped-def]
    """A rung is a weaker assumption: its bound is never below the declared profile's."""
    problem = _entry("edge-softmax-peaked")
    for profile in (BF16, load_profile("gfx950"), load_profile("fp32")):
        args = (problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale)
        tight, loose = evaluate(*args, profile=profile), evaluate(*args, profile=rung.relax(profile))
        assert bool((loose.out_bound >= tight.out_bound).all()) and bool((loose.lse_bound >= tight.lse_bound).all())
