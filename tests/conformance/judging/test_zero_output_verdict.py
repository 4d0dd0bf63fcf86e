"""An all-zero output is judged by the bound: correct when the bound admits zero everywhere
(weights that underflow), a failure with its own diagnosis when it does not."""

from __future__ import annotations

from pathlib import Path

import torch

from conformance.judging.harness import judge
from conformance.records.corpus import load_entry
from oracle.profiles import load_profile
from strategies.materialize import materialize
from strategies.recipe import Recipe

REPO = Path(__file__).resolve().parents[3]
ENTRY = REPO / "conformance" / "corpus" / "variant-all-zero-output-within-bound.json"


def _zeros(problem) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    n_q, heads = problem.q.shape[:2]
    return torch.zeros(n_q, heads, 512, dtype=torch.bfloat16), torch.zeros(n_q, heads, dtype=torch.float32)


def test_all_zero_output_within_the_bound_conforms() -> None:
    problem = materialize(load_entry(ENTRY).recipe, torch.device("cpu"))
    out, _ = _zeros(problem)
    judgement = judge(problem, out, None, load_profile("gfx950"))
    evaluation = judgement.evaluations["exact-steps"]
    assert bool((evaluation.out != 0).any())  # the reference is not zero ...
    assert bool((evaluation.out.abs() <= evaluation.out_bound).all())  # ... but zero is admitted
    assert judgement.ok, judgement.messages()


def test_all_zero_output_outside_the_bound_fails_with_its_diagnosis() -> None:
    problem = materialize(Recipe(seed=3, n_q=2, heads=4, row_lengths=(40, 7), cache_rows=64), torch.device("cpu"))
    out, lse = _zeros(problem)
    judgement = judge(problem, out, lse if problem.return_lse else None, load_profile("gfx950"))
    assert not judgement.ok
    message = "\n".join(judgement.messages())
    assert "out is all zeros but the reference is not: zero lies outside the bound at" in message
    assert "out elements exceed the bound" in message
