"""The a-priori error bound: sound for the emulated gfx950 kernel, broken by precision defects.

Soundness at scale (100,000 problems) is the campaign in conformance/soundness.py; here a CI-sized
Hypothesis run plus constructed cases. The defects are the catalogue's `q_lo_dropped` (Q quantised
to the hi part only) and `p_bf16` (P' rounded to bf16 instead of fp16).
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings

from conformance.mutants import CATALOGUE
from kernel.backends.emulated import run_emulated
from kernel.record import encode_records
from oracle.bound import MODES, evaluate, gamma, half_ulp_bf16
from oracle.profiles import BF16_Q_BF16_P, EXACT, GFX950
from strategies.hypothesis_recipes import recipes
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe


def _ratios(problem: Problem, kernel, profile=GFX950) -> dict[str, float]:  # type: ignore[no-untyped-def]
    out, lse = problem.call(kernel)
    ratios = {}
    for mode in MODES:
        ev = evaluate(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=profile, mode=mode, has_invalid=problem.has_invalid)
        err = (out.double() - ev.out).abs()
        ratios[f"out/{mode}"] = float(torch.where(ev.out_bound > 0, err / ev.out_bound, torch.where(err > 0, math.inf, 0.0)).max())
        if lse is not None:
            finite = torch.isfinite(ev.lse)
            assert torch.equal(torch.isneginf(lse), ~finite)
            lerr = torch.where(finite, (lse.double() - ev.lse).abs(), 0.0)
            ratios[f"lse/{mode}"] = float((lerr / torch.where(finite, ev.lse_bound, 1.0)).max())
    return ratios


@settings(max_examples=40, deadline=None)
@given(recipe=recipes(max_n_q=6, max_row=600, max_total_keys=1500))
def test_emulated_within_gfx950_bound(recipe: Recipe) -> None:
    ratios = _ratios(materialize(recipe, "cpu"), run_emulated)
    assert max(ratios.values()) <= 1.0, ratios


def test_q_hi_only_breaks_the_bound() -> None:
    problem = materialize(Recipe(seed=4, n_q=2, heads=4, row_lengths=(40, 300), cache_rows=2000), "cpu")
    assert max(_ratios(problem, run_emulated).values()) <= 1.0
    broken = _ratios(problem, CATALOGUE["q_lo_dropped"].backend)
    for mode in MODES:
        assert broken[f"out/{mode}"] > 1.0, broken


def _two_key_problem() -> Problem:
    """Two keys whose P' rounds very differently in fp16 and bf16, with cancelling V.

    q = e_rope0, softmax_scale = ln 2 (so x = s exactly). Key 1: rope0 = 0 (P = 2^8), latent +1
    (scale 2^-8, code 256). Key 2: rope0 = -255/256 (P = 2^(8 - 255/256) = 128.35), latent -2
    (scale 2^-7, code -256). P'2 = P * 2^-7 = 1.00271: fp16 keeps it to 2^-10, bf16 rounds it
    to 1.0, which cancels the output (-0.00195) entirely: 3x the bound.
    """
    latent = torch.cat((torch.full((1, 512), 1.0), torch.full((1, 512), -2.0)))
    rope = torch.zeros(2, 64, dtype=torch.bfloat16)
    rope[1, 0] = -255 / 256
    records = encode_records(latent, rope, "pow2")
    q = torch.zeros(1, 1, 576, dtype=torch.bfloat16)
    q[0, 0, 512] = 1.0
    recipe = Recipe(seed=0, n_q=1, heads=1, row_lengths=(2,), cache_rows=2)
    return Problem(
        recipe=recipe, q=q, kv_cache=records, indices=torch.tensor([0, 1], dtype=torch.int32),
        indptr=torch.tensor([0, 2], dtype=torch.int32), softmax_scale=math.log(2.0), has_invalid=False,
        return_lse=True, out=None, referenced_rows=torch.tensor([0, 1]), poison_rows=torch.zeros(0, dtype=torch.int64),
    )


def test_p_rounded_to_bf16_breaks_the_bound() -> None:
    problem = _two_key_problem()
    assert max(_ratios(problem, run_emulated).values()) <= 1.0
    broken = _ratios(problem, CATALOGUE["p_bf16"].backend)
    for mode in MODES:
        assert broken[f"out/{mode}"] > 2.0, broken


def test_empty_rows_have_zero_bound() -> None:
    problem = materialize(Recipe(seed=1, n_q=3, heads=2, row_lengths=(0, 5, -2), cache_rows=50, has_invalid=True, invalid_pattern="all"), "cpu")
    ev = evaluate(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=GFX950, has_invalid=True)
    assert bool((ev.out_bound == 0).all()) and bool((ev.lse_bound == 0).all())
    assert bool(torch.isneginf(ev.lse).all())


def test_profiles_order_by_precision() -> None:
    """A float64 implementation is held much tighter than the fp8/bf16 kernels on the same inputs."""
    problem = materialize(Recipe(seed=2, n_q=2, heads=2, row_lengths=(200, 77), cache_rows=1000), "cpu")
    args = (problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale)
    exact, gfx, bf16 = (evaluate(*args, profile=p) for p in (EXACT, GFX950, BF16_Q_BF16_P))
    pre_rounding = lambda ev: ev.out_bound - half_ulp_bf16(ev.out.abs())  # noqa: E731
    assert float(pre_rounding(exact).max()) < 1e-3 * float(pre_rounding(gfx).max())
    assert float(gfx.lse_bound.max()) < float(bf16.lse_bound.max())


def test_gamma_and_half_ulp() -> None:
    assert gamma(10, 2.0**-24) == 10 * 2.0**-24 / (1 - 10 * 2.0**-24)
    assert math.isinf(gamma(2**24, 2.0**-24))
    values = torch.tensor([1.0, 1.5, 0.75, 2.0**-130, 300.0], dtype=torch.float64)
    assert half_ulp_bf16(values).tolist() == [2.0**-8, 2.0**-8, 2.0**-9, 2.0**-134, 2.0**0]
    # the bound is tight: rounding at the bottom of a binade reaches it
    x = torch.tensor([1.0 + 2.0**-8], dtype=torch.float64)
    assert float((x.to(torch.bfloat16).double() - x).abs()) == float(half_ulp_bf16(x))
