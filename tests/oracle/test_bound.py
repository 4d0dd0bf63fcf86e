"""The a-priori error bound: sound for the emulated gfx950 kernel, broken by precision defects.

Soundness at scale (100,000 problems) is the campaign in conformance/tools/soundness.py; here a CI-sized
Hypothesis run plus constructed cases. The defects are the catalogue's `q_lo_dropped` (Q quantised
to the hi part only) and `p_bf16` (P' rounded to bf16 instead of fp16).
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings

from conformance.judging.harness import call_kernel
from conformance.mutation.catalogue import CATALOGUE
from kernel.emulated.gfx950 import run_emulated
from kernel.record import encode_records
from oracle.accumulation import Accumulation, gammas
from oracle.bound import MODES, evaluate, gamma, half_ulp_bf16, output_interval_bound, round_bf16
from oracle.profiles import BF16_Q_BF16_P, EXACT, FP32, GFX950, PROFILES
from oracle.rows import PreconditionError
from strategies.hypothesis_recipes import recipes
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe


def _ratios(problem: Problem, kernel, profile=GFX950) -> dict[str, float]:  # type: ignore[no-untyped-def]
    out, lse = call_kernel(problem, kernel)
    ratios = {}
    for mode in MODES:
        ev = evaluate(
            problem.q,
            problem.kv_cache,
            problem.indices,
            problem.indptr,
            problem.softmax_scale,
            profile=profile,
            mode=mode,
            has_invalid=problem.has_invalid,
        )
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
        recipe=recipe,
        q=q,
        kv_cache=records,
        indices=torch.tensor([0, 1], dtype=torch.int32),
        indptr=torch.tensor([0, 2], dtype=torch.int32),
        softmax_scale=math.log(2.0),
        has_invalid=False,
        return_lse=True,
        out=None,
        referenced_rows=torch.tensor([0, 1]),
        poison_rows=torch.zeros(0, dtype=torch.int64),
    )


def test_p_rounded_to_bf16_breaks_the_bound() -> None:
    problem = _two_key_problem()
    assert max(_ratios(problem, run_emulated).values()) <= 1.0
    broken = _ratios(problem, CATALOGUE["p_bf16"].backend)
    for mode in MODES:
        assert broken[f"out/{mode}"] > 2.0, broken


def test_empty_rows_have_zero_bound() -> None:
    problem = materialize(
        Recipe(seed=1, n_q=3, heads=2, row_lengths=(0, 5, -2), cache_rows=50, has_invalid=True, invalid_pattern="all"), "cpu"
    )
    ev = evaluate(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=GFX950, has_invalid=True)
    assert bool((ev.out_bound == 0).all()) and bool((ev.lse_bound == 0).all())
    assert bool(torch.isneginf(ev.lse).all())


def test_profiles_order_by_precision() -> None:
    """A float64 implementation is held much tighter than the fp8/bf16 kernels on the same inputs."""
    problem = materialize(Recipe(seed=2, n_q=2, heads=2, row_lengths=(200, 77), cache_rows=1000), "cpu")
    args = problem.args
    exact, gfx, bf16 = (evaluate(*args, profile=p) for p in (EXACT, GFX950, BF16_Q_BF16_P))

    def pre_rounding(ev):  # type: ignore[no-untyped-def]
        return ev.out_bound - half_ulp_bf16(ev.out.abs())

    assert float(pre_rounding(exact).max()) < 1e-3 * float(pre_rounding(gfx).max())
    assert float(pre_rounding(exact).max()) < 1e-3 * float(pre_rounding(bf16).max())
    # lse: neither hardware profile orders above the other (bf16-q-bf16-p's l sums the unrounded
    # P, gfx950's QK has fewer, wider instructions); both sit far above float64's
    assert 1e3 * float(exact.lse_bound.max()) < min(float(gfx.lse_bound.max()), float(bf16.lse_bound.max()))


def test_gammas_gives_each_count_the_bits_of_gamma_alone() -> None:
    """gammas() stacks counts of one shape with their own unit roundoffs: every entry is
    gamma(k, u)'s bits, at and past k u = 1 (inf) and for NaN counts (inf, as gamma gives)."""
    gen = torch.Generator().manual_seed(3)
    counts = [
        torch.randint(0, 2000, (5, 1, 1), generator=gen).to(torch.float64),
        torch.tensor([0.0, 1.0, 2.0**24, 2.0**24 + 1, float("nan")], dtype=torch.float64).view(5, 1, 1),
        torch.randint(0, 2**20, (5, 1, 1), generator=gen),  # integers: widened as gamma widens them
    ]
    units = (2.0**-24, 2.0**-24, 2.0**-53)
    got = gammas(counts, units)
    assert got.shape == (3, 5, 1, 1)
    for entry, k, u in zip(got, counts, units, strict=True):
        want = gamma(k, u)
        assert isinstance(want, torch.Tensor)
        assert torch.equal(entry.view(torch.int64), want.view(torch.int64))
    assert torch.isinf(got[1, 2:]).all()


def test_gamma_and_half_ulp() -> None:
    assert gamma(10, 2.0**-24) == 10 * 2.0**-24 / (1 - 10 * 2.0**-24)
    assert math.isinf(gamma(2**24, 2.0**-24))
    values = torch.tensor([1.0, 1.5, 0.75, 2.0**-130, 300.0], dtype=torch.float64)
    assert half_ulp_bf16(values).tolist() == [2.0**-8, 2.0**-8, 2.0**-9, 2.0**-134, 2.0**0]
    # the bound is tight: rounding at the bottom of a binade reaches it
    x = torch.tensor([1.0 + 2.0**-8], dtype=torch.float64)
    assert float((x.to(torch.bfloat16).double() - x).abs()) == float(half_ulp_bf16(x))


# --------------------------------------------------------------------------- soundness


def _f32_rtz(y: torch.Tensor) -> torch.Tensor:
    r = y.to(torch.float32)
    return torch.where(r.double().abs() > y.abs(), torch.nextafter(r, torch.zeros_like(r)), r).double()


def _sequential(terms: torch.Tensor, rtz: bool) -> torch.Tensor:
    acc = torch.zeros(terms.shape[:-1], dtype=torch.float64)
    for j in range(terms.shape[-1]):
        acc = _f32_rtz(acc + terms[..., j]) if rtz else (acc + terms[..., j]).to(torch.float32).double()
    return acc


def _fused_truncate(terms: torch.Tensor, width: int, guard: int) -> torch.Tensor:
    """An MMA-like adder: per instruction of `width` terms + accumulator, align to the largest
    exponent keeping 24 + guard bits (truncating), add exactly, round toward zero to f32."""
    acc = torch.zeros(terms.shape[:-1], dtype=torch.float64)
    for s in range(0, terms.shape[-1], width):
        group = torch.cat((acc.unsqueeze(-1), terms[..., s : s + width]), dim=-1)
        _, e = torch.frexp(group.abs().amax(dim=-1, keepdim=True))
        quantum = torch.pow(2.0, (e - 24 - guard).to(torch.float64))
        aligned = torch.trunc(group / quantum) * quantum
        acc = _f32_rtz(aligned.sum(dim=-1))
    return acc


def test_accumulation_models_bound_the_adversarial_dots() -> None:
    """One dominant product and 575 products of 0.5625 ulp (an adversarial dot), plus
    random dots: sequential (nearest, toward zero) and fused adders without guard bits stay within
    gamma_k(u) sum |t| of the model that declares them, and "unknown" covers them all."""
    gen = torch.Generator().manual_seed(0)
    adversarial = torch.full((1, 576), 0.5625 * 2.0**-23, dtype=torch.float64)
    adversarial[0, 0] = 1.0
    rand = (
        (torch.randn(64, 576, generator=gen, dtype=torch.float64) * 2.0 ** torch.randint(-6, 6, (64, 576), generator=gen))
        .to(torch.float32)
        .double()
    )
    for terms in (adversarial, rand, rand.abs()):
        exact = terms.sum(dim=-1)
        mag = terms.abs().sum(dim=-1)
        m = torch.tensor(float(terms.shape[-1]))
        cases = {
            Accumulation("f32", "sequential", "nearest"): _sequential(terms, rtz=False),
            Accumulation("f32", "sequential", "toward_zero"): _sequential(terms, rtz=True),
            Accumulation("f32", "fused", "toward_zero", guard_bits=0, terms_per_instruction=16): _fused_truncate(terms, 16, 0),
            Accumulation("f32", "fused", "toward_zero", guard_bits=3, terms_per_instruction=16): _fused_truncate(terms, 16, 3),
        }
        unknown = Accumulation("f32", "unknown", terms_per_instruction=16)
        for model, computed in cases.items():
            err = (computed - exact).abs()
            for declared in (model, unknown):
                bound = gamma(declared.roundings(m, torch.ceil(m / 16)), declared.u) * mag
                assert bool((err <= bound).all()), (model, declared, float((err / bound).max()))


def test_zero_terms_are_free() -> None:
    acc = Accumulation("f32", "unknown", terms_per_instruction=128)
    assert float(acc.roundings(torch.tensor(0.0), 10.0)) == 0
    assert float(acc.roundings(torch.tensor(1.0), 10.0)) < float(acc.roundings(torch.tensor(1088.0), 10.0)) / 100


def test_round_bf16_is_one_rounding() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(100_000, generator=gen, dtype=torch.float64) * 2.0 ** torch.randint(-140, 20, (100_000,), generator=gen)
    as_f32 = x.to(torch.float32)
    assert torch.equal(round_bf16(as_f32.double()), as_f32.to(torch.bfloat16).double())
    # the f64 value just above a bf16 midpoint that f32 rounds onto it: one rounding goes up, two go to even
    y = torch.tensor([1.0 + 2.0**-8 + 2.0**-30], dtype=torch.float64)
    assert float(round_bf16(y)) == 1.0 + 2.0**-7 and float(y.to(torch.bfloat16)) == 1.0
    b = output_interval_bound(y, torch.zeros_like(y), ("direct", "via_f32"))
    assert float(b) == float(
        (y - 1.0).abs().max(),
    ) and float(b) >= float((y - y.to(torch.bfloat16).double()).abs())


def test_extreme_scores_give_finite_bounds() -> None:
    """softmax_scale 1e30 with q = 2^-80 (|score| ~4e8, inside score_limit): finite bounds in
    every profile (no 0 * inf in the reweighting, no overflowing exp)."""
    problem = materialize(Recipe(seed=3, n_q=2, heads=2, row_lengths=(40, 130), cache_rows=400), "cpu")
    q = (problem.q.double() * 2.0**-80 / problem.q.double().abs().amax()).to(torch.bfloat16)
    for profile in PROFILES.values():
        ev = evaluate(q, problem.kv_cache, problem.indices, problem.indptr, 1e30, profile=profile)
        assert bool(torch.isfinite(ev.out_bound).all()) and bool(torch.isfinite(ev.lse_bound).all()), profile.name
        assert float(ev.out_bound.max()) <= float(ev.out.abs().max()) * 4 + 1e4, profile.name  # the window bound caps it


def test_f32_overflow_is_a_precondition() -> None:
    problem = materialize(Recipe(seed=4, n_q=1, heads=1, row_lengths=(20,), cache_rows=50, latent="large"), "cpu")
    args = (problem.q, problem.kv_cache, problem.indices, problem.indptr)
    for profile in (GFX950, FP32, BF16_Q_BF16_P):
        try:
            evaluate(*args, 1e39, profile=profile)
        except PreconditionError as exc:
            assert "log2(e) is not finite in f32" in str(exc)
        else:
            raise AssertionError(f"{profile.name}: softmax_scale 1e39 judged")
    evaluate(*args, 1e39 * 1e-300, profile=EXACT)
    big = torch.full_like(problem.q, 2.0**120)
    for profile in (GFX950, FP32):
        try:
            evaluate(big, problem.kv_cache, problem.indices, problem.indptr, 1e-40, profile=profile)
        except PreconditionError as exc:
            assert "may overflow f32" in str(exc)
        else:
            raise AssertionError(f"{profile.name}: q . K beyond f32 judged")
