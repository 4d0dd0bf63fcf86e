"""The directed precision probes (strategies.precision_probes) have the properties their
docstrings claim: scores exactly as designed and exact in f32, P on the claimed side of its
fp16 rounding interval, the bound's other terms negligible next to the isolated one, every
correct kernel within its profile's bound and the defect of the isolated step outside it."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from conformance.judging.harness import call_kernel, judge
from conformance.mutation.catalogue import CORRECT_VARIANTS, PRECISION_DEFECTS
from kernel.record import decode_records
from kernel.registry import resolve
from oracle.accumulation import Accumulation
from oracle.bound import evaluate
from oracle.profiles import GFX950, load_profile
from oracle.q_representation import fp8_hi_lo
from strategies.materialize import Problem
from strategies.precision_probes import (
    PROBES,
    equal_scores_probe,
    growing_max_probe,
    p_rounding_many_keys_probe,
    p_rounding_probe,
    q_lo_probe,
    rope_scores_probe,
)


def _scores(problem: Problem) -> torch.Tensor:
    """q . K in f64 for every (row, head, key of the row) [n_q, H, L] (rows of equal length)."""
    dec = decode_records(problem.kv_cache)
    keys = torch.cat((dec.latent, dec.rope), dim=-1)[problem.indices.long()]
    n_q = problem.q.shape[0]
    keys = keys.view(n_q, -1, 576)
    return torch.einsum("qhd,qkd->qhk", problem.q.double(), keys)


def _exact_in_f32(x: torch.Tensor) -> bool:
    return bool((x.float().double() == x).all())


def _fp16_position(p: torch.Tensor) -> torch.Tensor:
    """Where p (f64, normal fp16 range) lies in its fp16 interval: (p - fp16 below) / ulp in [0, 1)."""
    _, e = torch.frexp(p)
    ulp = torch.exp2((e - 11).double())
    return (p - torch.floor(p / ulp) * ulp) / ulp


def _ratio(problem: Problem, backend, profile=None) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(out, lse) max err / bound over both comparison modes."""
    profile = profile or (load_profile(backend.profile) if isinstance(backend.profile, str) else backend.profile)
    out, lse = call_kernel(problem, backend)
    judgement = judge(problem, out, lse, profile)
    return max(v.out_ratio for v in judgement.verdicts.values()), max(v.lse_ratio for v in judgement.verdicts.values())


def _only(profile, keep: str):  # type: ignore[no-untyped-def]
    """`profile` with every error term but `keep` (and the output rounding) switched off."""
    exact = Accumulation(format="f64", order="sequential", rounding="nearest", terms_per_instruction=1)
    r = dataclasses.replace
    off = {
        "qk": {"qk": exact},
        "softmax": {"score_roundings": 0, "arith_u": 2.0**-53, "exp_rel_err": 0.0},
        "p": {"p_format": "exact"},
        "acc": {"pv": exact, "l": exact},
    }
    changes: dict[str, object] = {}
    for term, fields in off.items():
        if term != keep:
            changes.update(fields)
    return r(profile, **changes)


def _bounds(problem: Problem, profile):  # type: ignore[no-untyped-def]
    return evaluate(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=profile)


# -- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize("heads, n_q", [(1, 16), (16, 16), (5, 4)])
def test_p_rounding_probe_puts_p_high_in_its_fp16_interval(heads: int, n_q: int) -> None:
    problem = p_rounding_probe(seed=3, heads=heads, n_q=n_q)
    s = _scores(problem)  # log2 units (softmax_scale = ln 2, c_log2 = 1)
    assert bool((s[..., 0] == 0).all()) and _exact_in_f32(s)
    p_b = torch.exp2(8 + s[..., 1]) * 2.0**-7  # P_B * scale_v (key B's latent in [1, 2): scale 2^-7)
    pos = _fp16_position(p_b)
    # 0.73 to 0.97 of an ulp, with room for the argument's rounding (2^-21) and exp2's 1 ulp
    assert float(pos.min()) > 0.72 and float(pos.max()) < 0.98
    assert bool((s[..., 2] <= 0).all()) and bool((s[..., 2] >= -1).all())


@pytest.mark.parametrize("n_keys", [16, 200])
def test_many_keys_probe_has_equal_scores_high_in_the_interval(n_keys: int) -> None:
    problem = p_rounding_many_keys_probe(n_keys, seed=1, heads=4, n_q=2)
    s = _scores(problem)
    assert bool((s[..., 0] == 0).all()) and _exact_in_f32(s)
    assert bool((s[..., 1:] == s[..., 1:2]).all()), "keys B must share one score per (row, head)"
    pos = _fp16_position(torch.exp2(8 + s[..., 1]) * 2.0**-7)
    assert float(pos.min()) > 0.72 and float(pos.max()) < 0.98
    latent = decode_records(problem.kv_cache).latent
    assert bool((latent[1:] > 0).all()) and bool((latent[0] == 0).all())


def test_equal_scores_probe_scores() -> None:
    problem = equal_scores_probe(1024, seed=2, heads=5)
    s = _scores(problem)
    assert bool((s[..., 0] == 0).all())
    for h in range(5):
        assert bool((s[0, h, 1:] == -(1 + h / 16) * 2.0**-7).all())


@pytest.mark.parametrize("n_keys", [300, 1024])
def test_growing_max_probe_rescales_at_every_tile(n_keys: int) -> None:
    problem = growing_max_probe(n_keys, seed=0, heads=4)
    s = _scores(problem)[0]  # [H, L]
    assert _exact_in_f32(s)
    assert bool((s[:, 1:] > s[:, :-1]).all()), "scores must increase along the row"
    assert bool((s[:, -1].abs() < 2.0**-10).all()) and float(s[:, 0].max()) <= -4 + 2.0**-6
    for tile in (64, 128):  # the running max at each tile end: its differences are not 16-bit values
        maxima = s[:, tile - 1 :: tile]
        steps = maxima[:, 1:] - maxima[:, :-1]
        assert float((steps.to(torch.float16).double() != steps).double().mean()) > 0.7
        assert bool((steps.to(torch.bfloat16).double() != steps).all())


def test_rope_scores_probe_has_rope_only_scores() -> None:
    problem = rope_scores_probe(64, seed=4, heads=3)
    assert bool((problem.q[..., :512] == 0).all())
    s = _scores(problem) * problem.softmax_scale
    assert float(s.std()) > 0.5 and float(s.abs().max()) < 30


def test_q_lo_probe_needs_both_lo_bits_and_is_exact() -> None:
    problem = q_lo_probe(64, seed=5, heads=4)
    q = problem.q
    rep = fp8_hi_lo(q)
    assert bool((rep.q_hat[..., :512] == q[..., :512].double()).all()), "hi + lo must represent q exactly"
    # every element's residual is 7/128 of its binade: lo = 1.11b x 2^k
    m, _ = torch.frexp(q[..., :512].double().abs())
    frac = m * 2 - 1  # in [0, 1): 1.mmm0111b - 1
    assert bool(((frac * 128) % 16 == 7).all())
    # the keys share q's sign per dim: every latent product is positive
    latent = decode_records(problem.kv_cache).latent
    assert bool(((latent * q[0, :1, :512].double()) > 0).all())
    top = (_scores(problem) * problem.softmax_scale).max()
    assert 1 < float(top) < 8


# -- the bound's terms -------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: p_rounding_probe(seed=1, heads=8, n_q=8), lambda: p_rounding_many_keys_probe(64, 1, heads=8)])
def test_p_rounding_probes_isolate_the_p_term(make) -> None:  # type: ignore[no-untyped-def]
    """The out bound with only the P' rounding term (and the output rounding) left is the full
    bound on almost every element; without the P' term it is smaller on many."""
    problem = make()
    full = _bounds(problem, GFX950).out_bound
    only_p = _bounds(problem, _only(GFX950, "p")).out_bound
    without_p = _bounds(problem, dataclasses.replace(GFX950, p_format="exact")).out_bound
    nonzero = full > 0
    same = float((only_p[nonzero] == full[nonzero]).double().mean())
    assert same > 0.97, same
    assert float((without_p[nonzero] < full[nonzero]).double().mean()) > 0.1


@pytest.mark.parametrize(
    "make, keep, share",
    [
        (lambda: equal_scores_probe(4096, seed=0, heads=4), "acc", 0.6),  # l's accumulation
        (lambda: growing_max_probe(1024, seed=0, heads=4), "softmax", 0.2),  # the rescales and exp2
        (lambda: rope_scores_probe(64, seed=0, heads=4), "qk", 0.8),  # the rope dot's accumulation
        (lambda: q_lo_probe(64, seed=0, heads=4), "qk", 0.8),  # the QK accumulation over hi + lo
    ],
)
def test_lse_probes_term_shares(make, keep: str, share: float) -> None:  # type: ignore[no-untyped-def]
    """The lse bound left with only the isolated term is at least `share` of the full one (the
    probe's isolated step dominates what a correct kernel is allowed)."""
    problem = make()
    full = _bounds(problem, GFX950).lse_bound
    only = _bounds(problem, _only(GFX950, keep)).lse_bound
    assert float((only / full).min()) >= share, float((only / full).min())


# -- verdicts ----------------------------------------------------------------------------------

# (probe, seed, heads, size) -> the precision defects of the step it isolates
KILLS = {
    ("p_rounding", 0, 1, 16): ("p_fp16_toward_zero", "exp2_f16"),
    ("p_rounding", 7, 16, 4): ("p_fp16_toward_zero", "exp2_f16"),
    ("p_rounding_many_keys", 0, 1, 64): ("p_fp16_toward_zero", "exp2_f16"),
    ("p_rounding_many_keys", 3, 5, 16): ("p_fp16_toward_zero", "exp2_f16"),
    ("growing_max", 0, 1, 640): ("alpha_bf16", "exp2_f16"),
    ("growing_max", 2, 16, 300): ("alpha_bf16", "exp2_f16"),
    ("equal_scores", 0, 5, 1024): ("l_bf16", "exp2_f16"),
    ("rope_scores", 0, 4, 64): ("rope_fp8",),
    ("q_lo", 0, 4, 64): ("q_lo_two_bits_fewer",),
}


@pytest.mark.parametrize("key", list(KILLS), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}-{k[3]}")
def test_probe_passes_emulated_and_kills_its_defects(key: tuple[str, int, int, int]) -> None:
    name, seed, heads, size = key
    problem = PROBES[name].build(seed, heads, size)
    assert max(_ratio(problem, resolve("emulated"))) <= 1.0
    for defect in KILLS[key]:
        assert max(_ratio(problem, PRECISION_DEFECTS[defect].backend)) > 1.0, defect


CORRECT = ["emulated"] + [n for n, v in CORRECT_VARIANTS.items() if not v.nightly]


@pytest.mark.parametrize("kernel", CORRECT)
@pytest.mark.parametrize("name", list(PROBES))
def test_every_correct_kernel_passes_every_probe(name: str, kernel: str) -> None:
    """Each probe at two head counts and its first two sizes, under the profile the kernel declares."""
    backend = resolve("emulated") if kernel == "emulated" else CORRECT_VARIANTS[kernel].backend
    for heads, size in ((1, PROBES[name].sizes[0]), (16, PROBES[name].sizes[1])):
        problem = PROBES[name].build(11, heads, size)
        out_ratio, lse_ratio = _ratio(problem, backend)
        assert out_ratio <= 1.0 and lse_ratio <= 1.0, (name, kernel, heads, size, out_ratio, lse_ratio)


def test_probes_are_small_and_well_formed() -> None:
    for name, probe in PROBES.items():
        for size in probe.sizes:
            problem = probe.build(0, 16, size)
            assert problem.recipe.heads == 16
            assert int(problem.indptr[-1]) == problem.indices.numel() <= 8192, name
            assert problem.q.shape[0] <= 16 and problem.kv_cache.shape[0] <= 1024
            assert int(problem.indices.max()) < problem.kv_cache.shape[0]
            assert math.isfinite(problem.softmax_scale)
