"""oracle.batch.evaluate_many: every call's reference and bound bit for bit evaluate_modes' on
that call alone, and the PreconditionError evaluate_modes raises, message for message, over
drawn lists of conforming and violating recipes, under profiles with and without split-KV."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kernel.bits import same_bits
from oracle.batch import Call, evaluate_many
from oracle.bound import evaluate_modes
from oracle.profiles import load_profile
from oracle.rows import PreconditionError
from strategies.hypothesis_recipes import recipe_lists, recipes, violating_recipes
from strategies.materialize import materialize
from strategies.recipe import Recipe

FIELDS = ("out", "out_bound", "lse", "lse_bound", "window")
SCATTER = {"invalid_permille": 300}


def _call(recipe: Recipe) -> Call:
    p = materialize(recipe)
    return Call(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, p.has_invalid)


def _assert_alone(calls: list[Call], profile_name: str, **kwargs: object) -> tuple[int, int]:
    """evaluate_many(calls) against evaluate_modes per call; (calls evaluated, calls that raised)."""
    profile = load_profile(profile_name)
    many = evaluate_many(calls, profile=profile, **kwargs)  # type: ignore[arg-type]
    assert len(many) == len(calls)
    raised = 0
    for call, got in zip(calls, many, strict=True):
        try:
            args = (call.q, call.kv_cache, call.indices, call.indptr, call.softmax_scale)
            want = evaluate_modes(*args, profile=profile, has_invalid=call.has_invalid, **kwargs)  # type: ignore[arg-type]
        except PreconditionError as err:
            raised += 1
            assert isinstance(got, PreconditionError) and str(got) == str(err), (got, err)
            continue
        assert isinstance(got, dict) and list(got) == list(want)
        for mode in want:
            for name in FIELDS:
                a, b = getattr(want[mode], name), getattr(got[mode], name)
                assert same_bits(a, b), (profile_name, mode, name, float((a - b).abs().nan_to_num().max()))
            assert got[mode].mode == mode and got[mode].profile == profile.name
    return len(calls), raised


SEEN = {"calls": 0, "raised": 0}


@settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.generate,),
    suppress_health_check=list(HealthCheck),
)
@given(
    profile_name=st.sampled_from(("gfx950", "bf16-q-bf16-p", "vllm-triton-decode", "fp32")),
    drawn=recipe_lists(
        st.one_of(
            recipes(max_n_q=12, max_total_keys=1500, writers=("pow2", "pow2-floor", "raw")),
            violating_recipes(allow_out_of_range=True, max_total_keys=600),
        ),
        max_size=6,
    ),
)
def test_every_call_as_alone(profile_name: str, drawn: list[Recipe]) -> None:
    n, raised = _assert_alone([_call(r) for r in drawn], profile_name)
    SEEN["calls"] += n
    SEEN["raised"] += raised


def test_the_draws_reached_both_outcomes() -> None:
    """The property above judged evaluations and precondition errors both (run after it)."""
    if SEEN["calls"] == 0:
        pytest.skip("test_every_call_as_alone did not run in this process")
    assert SEEN["raised"] > 0 and SEEN["calls"] > SEEN["raised"], SEEN


def test_small_budgets_many_chunks() -> None:
    """Many chunks per call and one chunk per batch (key and batch budgets small), mixed head
    counts, an empty row, has_invalid, a call with no query rows: still every call's bits."""
    drawn = [
        Recipe(seed=1, n_q=5, heads=3, row_lengths=(40, 7, 0, 129, 2), cache_rows=300),
        Recipe(seed=2, n_q=3, heads=16, row_lengths=(200, 200, 1), cache_rows=50, has_invalid=True, invalid_pattern="scattered", **SCATTER),
        Recipe(seed=3, n_q=0, heads=2, row_lengths=(), cache_rows=4),
        Recipe(seed=4, n_q=2, heads=1, row_lengths=(-1, 3), cache_rows=9, stream_offset=3),
    ]
    calls = [_call(r) for r in drawn]
    for profile_name in ("gfx950", "bf16-q-bf16-p"):
        _assert_alone(calls, profile_name, key_budget=256, batch_budget=0)
        _assert_alone(calls, profile_name, modes=("float64",))


def test_one_call_and_none() -> None:
    assert evaluate_many([], profile=load_profile("gfx950")) == []
    _assert_alone([_call(Recipe(seed=5, n_q=2, heads=4, row_lengths=(30, 31), cache_rows=64))], "gfx950")


def test_bad_input_is_one_line() -> None:
    call = _call(Recipe(seed=6, n_q=1, heads=1, row_lengths=(3,), cache_rows=8))
    with pytest.raises(ValueError, match="unknown comparison mode 'nope'"):
        evaluate_many([call], profile=load_profile("gfx950"), modes=("nope",))  # type: ignore[arg-type]
    meta = Call(call.q.to("meta"), call.kv_cache, call.indices, call.indptr, call.softmax_scale)
    with pytest.raises(ValueError, match="every call on one device"):
        evaluate_many([call, meta], profile=load_profile("gfx950"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_every_call_as_alone_on_cuda() -> None:
    """The same on the GPU (evaluate_modes' own bits there)."""
    drawn = [
        Recipe(seed=s, n_q=n, heads=h, row_lengths=lengths, cache_rows=500)
        for s, (n, h, lengths) in enumerate(((1, 1, (1,)), (3, 8, (100, 5, 257)), (2, 16, (2048, 3)), (4, 5, (0, 1, 2, 3))))
    ]
    calls = []
    for r in drawn:
        p = materialize(r, "cuda")
        calls.append(Call(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, p.has_invalid))
    _assert_alone(calls, "gfx950")
    _assert_alone(calls, "bf16-q-bf16-p")
