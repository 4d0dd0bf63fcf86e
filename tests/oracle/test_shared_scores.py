"""Comparison modes whose reference queries hold the same bits share one computation of their
scores (oracle.bound.share_equal_queries) where the modes run in separate passes (the CPU's
grouping): the same bits as computing them apart, and fewer score passes."""

from __future__ import annotations

import pytest
import torch

from kernel.bits import same_bits
from oracle import bound
from oracle.batch import Call, evaluate_many
from oracle.bound import evaluate_modes, share_equal_queries
from oracle.profiles import load_profile
from strategies.materialize import materialize
from strategies.recipe import Recipe

FIELDS = ("out", "lse", "out_bound", "lse_bound", "window")
CPU_GROUPS = ((0,), (1,))


def test_one_pass_is_left_as_given() -> None:
    a = torch.zeros(2, 3, dtype=torch.float64)
    b = a.clone()
    assert share_equal_queries((a, b), ((0, 1),)) == (a, b)
    shared = share_equal_queries((a, b), CPU_GROUPS)
    assert shared[0] is a and shared[1] is a


def test_only_equal_bits_are_shared() -> None:
    a = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    minus_zero = torch.tensor([[1.0, -0.0]], dtype=torch.float64)  # equal values, other bits
    other_shape = torch.tensor([1.0, 0.0], dtype=torch.float64)
    nan = torch.tensor([[float("nan"), 0.0]], dtype=torch.float64)
    for b in (minus_zero, other_shape):
        assert share_equal_queries((a, b), CPU_GROUPS)[1] is b
    # NaN holds the same bits as itself: the same operations give the same bits
    assert share_equal_queries((nan, nan.clone()), CPU_GROUPS)[1] is nan


def _spy_scores(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = bound._mode_scores

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(bound, "_mode_scores", counted)
    return calls


def _apart(q_refs: tuple[torch.Tensor, ...], groups: object) -> tuple[torch.Tensor, ...]:
    """Every mode's query as a tensor of its own (copies: the same bits, nothing shared)."""
    return tuple(ref.clone() for ref in q_refs)


def _evaluations(p, profile_name: str) -> dict:  # type: ignore[no-untyped-def]
    return evaluate_modes(*p.args, profile=load_profile(profile_name), has_invalid=p.has_invalid)


@pytest.mark.parametrize("profile_name", ["gfx950", "fp32", "flashmla-sparse-prefill"])
@pytest.mark.parametrize("tiny", [False, True])
def test_sharing_gives_the_bits_of_separate_passes(profile_name: str, tiny: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With and without sharing, every output of both modes has the same bits. gfx950 with an
    element far below its block's largest (`tiny`): Q's representation differs from Q, so the
    modes' queries differ and nothing is shared there."""
    p = materialize(Recipe(seed=5, n_q=5, heads=4, row_lengths=(60, 9, 0, 33, 128), cache_rows=256), "cpu")
    if tiny:
        p.q[1, 2, 7] = p.q[1, 2, :128].abs().amax() * 2.0**-20
    profile = load_profile(profile_name)
    q64 = p.q.to(torch.float64)
    rep = bound._representation(q64, profile)
    equal = torch.equal(rep.q_hat.view(torch.int64), q64.view(torch.int64))
    assert equal != (tiny and profile.q_representation == "fp8_hi_lo")

    scores = _spy_scores(monkeypatch)
    shared = _evaluations(p, profile_name)
    passes_shared = len(scores)
    monkeypatch.setattr(bound, "share_equal_queries", _apart)
    scores.clear()
    apart = _evaluations(p, profile_name)
    passes_apart = len(scores)
    for mode in bound.MODES:
        for field in FIELDS:
            assert same_bits(getattr(shared[mode], field), getattr(apart[mode], field)), (mode, field)
    assert passes_apart > 0
    assert passes_shared == (passes_apart // 2 if equal else passes_apart)


def test_packed_calls_share_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluate_many decides per call: a call whose Q its representation holds shares its scores
    although another call of the pack does not; the bits are evaluate_modes' per call."""
    from oracle import batch

    recipes = [Recipe(seed=s, n_q=3, heads=2, row_lengths=(40, 12, 70), cache_rows=128) for s in (11, 12)]
    problems = [materialize(r, "cpu") for r in recipes]
    problems[1].q[0, 1, 3] = problems[1].q[0, 1, :128].abs().amax() * 2.0**-20
    profile = load_profile("gfx950")
    scores = _spy_scores(monkeypatch)
    many = evaluate_many([Call(*p.args, has_invalid=p.has_invalid) for p in problems], profile=profile)
    packed_passes = len(scores)
    monkeypatch.setattr(batch, "share_equal_queries", _apart)
    monkeypatch.setattr(bound, "share_equal_queries", _apart)
    scores.clear()
    alone = [evaluate_modes(*p.args, profile=profile, has_invalid=p.has_invalid) for p in problems]
    apart_passes = len(scores)
    for outcome, expected in zip(many, alone, strict=True):
        assert isinstance(outcome, dict)
        for mode in bound.MODES:
            for field in FIELDS:
                assert same_bits(getattr(outcome[mode], field), getattr(expected[mode], field)), (mode, field)
    # one call's chunks share (half its passes), the other's do not
    assert apart_passes > packed_passes > apart_passes // 2
