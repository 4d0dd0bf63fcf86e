"""oracle.preconditions.check_call makes every tensor on its inputs' device. Checked on the CPU
by making `meta` torch's default device: a tensor the check creates without `device=` lands on
meta, and an op mixing it with the inputs' CPU tensors raises, as a CPU-made tensor would beside
CUDA inputs. Drawn over the violation strategies and valid recipes, and with q scaled so the
score checks (softmax_scale_overflow_f32, score_overflow_f32 and its exact per-key pass) run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from oracle import preconditions as pc
from strategies.hypothesis_recipes import recipes, violating_recipes
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe


@contextmanager
def _default_device_meta() -> Iterator[None]:
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def _check(p: Problem, q: torch.Tensor) -> list[pc.Finding]:
    with _default_device_meta():
        return pc.check_call(q, p.kv_cache, p.indices, p.indptr, has_invalid=p.has_invalid, softmax_scale=p.softmax_scale)


def test_the_audit_catches_a_tensor_made_without_device() -> None:
    x = torch.ones(3)
    with _default_device_meta(), pytest.raises(RuntimeError, match="meta"):
        torch.cat([x, torch.zeros(1)])


@settings(max_examples=40, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    recipe=st.one_of(violating_recipes(allow_out_of_range=True, max_total_keys=2048), recipes(max_total_keys=2048)),
    exponent=st.sampled_from([0, 110, 120]),
)
def test_check_call_keeps_to_its_inputs_device(recipe: Recipe, exponent: int) -> None:
    p = materialize(recipe)
    q = p.q if exponent == 0 else (p.q.float() * 2.0**exponent).to(p.q.dtype)
    assert _check(p, q) == pc.check_call(q, p.kv_cache, p.indices, p.indptr, has_invalid=p.has_invalid, softmax_scale=p.softmax_scale)


def test_the_exact_score_pass_keeps_to_its_inputs_device() -> None:
    """A call whose scores overflow f32 (q x 2^120 on normal latents): the per-key pass runs."""
    recipe = find(
        recipes(max_total_keys=256),
        lambda r: r.latent == "normal" and r.q == "normal" and r.total_keys > 0,
        settings=settings(database=None, derandomize=True, max_examples=500),
    )
    p = materialize(recipe)
    q = (p.q.float() * 2.0**120).to(p.q.dtype)
    findings = _check(p, q)
    assert pc.KIND_SCORE_OVERFLOW in {f.kind for f in findings}, findings
