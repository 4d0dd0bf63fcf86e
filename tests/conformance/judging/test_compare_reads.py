"""conformance.judging.harness.compare reads its numbers back in one host read; its verdicts are
those of the element-by-element form it replaced (restated here as `_reference`): failures,
ratios and the worst element, on outputs with NaN, inf, zeros, empty rows and out-of-bound
elements."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from conformance.judging import harness
from conformance.judging.harness import Verdict, check_types
from conformance.tools.op_count import count_ops
from kernel.emulated.gfx950 import run_emulated
from oracle.bound import Evaluation
from oracle.profiles import GFX950
from strategies.materialize import materialize
from strategies.recipe import Recipe


def _first(mask: torch.Tensor) -> list[int]:
    return [int(x) for x in torch.nonzero(mask)[0].tolist()]


def _ratio(err: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    return torch.where(bound > 0, err / torch.where(bound > 0, bound, 1.0), torch.where(err > 0, float("inf"), 0.0))


def _reference(problem: Any, out: torch.Tensor, lse: torch.Tensor | None, evaluation: Evaluation) -> Verdict:
    """The comparison as it was written before its host reads were batched."""
    verdict = Verdict(failures=check_types(problem, out, lse))
    if verdict.failures:
        return verdict
    mode = evaluation.mode
    got, ref, bound = out.to(torch.float64), evaluation.out, evaluation.out_bound
    bad = ~torch.isfinite(got) & torch.isfinite(ref)
    if bool(bad.any()):
        verdict.failures.append(
            f"[{mode}] out has {int(bad.sum())} non-finite values where the reference is finite, first at (row, head, dim) {_first(bad)}"
        )
    if bool((got == 0).all()):
        zero_outside = (ref != 0) & (ref.abs() > bound)
        if bool(zero_outside.any()):
            verdict.failures.append(
                f"[{mode}] out is all zeros but the reference is not: zero lies outside the bound at "
                f"{int(zero_outside.sum())} elements, first at (row, head, dim) {_first(zero_outside)}"
            )
    ratio = _ratio((got - ref).abs().nan_to_num(nan=float("inf")), bound)
    verdict.out_ratio = float(ratio.max()) if ratio.numel() else 0.0
    over = ratio > 1
    if bool(over.any()):
        verdict.failures.append(
            f"[{mode}] {int(over.sum())} out elements exceed the bound (max |err|/bound = {verdict.out_ratio:.3g}), "
            f"first at (row, head, dim) {_first(over)}"
        )
    if ratio.numel():
        flat = int(torch.argmax(ratio.nan_to_num(nan=float("inf"))))
        row, rest = divmod(flat, ratio.shape[1] * ratio.shape[2])
        head, dim = divmod(rest, ratio.shape[2])
        verdict.worst = {
            "row": row, "head": head, "dim": dim, "mode": mode,
            "out": float(got[row, head, dim]), "ref": float(ref[row, head, dim]), "bound": float(bound[row, head, dim]),
        }  # fmt: skip
    if problem.return_lse and lse is not None:
        got_lse, ref_lse, lse_bound = lse.to(torch.float64), evaluation.lse, evaluation.lse_bound
        empty = torch.isneginf(ref_lse)
        wrong_empty = empty & ~torch.isneginf(got_lse)
        if bool(wrong_empty.any()):
            verdict.failures.append(
                f"[{mode}] lse of an empty row is not -inf, first at (row, head) {_first(wrong_empty)} = "
                f"{float(got_lse[tuple(_first(wrong_empty))])}"
            )
        not_finite = ~empty & ~torch.isfinite(got_lse)
        if bool(not_finite.any()):
            verdict.failures.append(f"[{mode}] lse is not finite where the reference is, first at (row, head) {_first(not_finite)}")
        lse_err = torch.where(empty, 0.0, (got_lse - ref_lse).abs()).nan_to_num(nan=float("inf"))
        lse_ratio = _ratio(lse_err, torch.where(empty, 1.0, lse_bound))
        verdict.lse_ratio = float(lse_ratio.max()) if lse_ratio.numel() else 0.0
        over = lse_ratio > 1
        if bool(over.any()):
            verdict.failures.append(
                f"[{mode}] {int(over.sum())} lse values exceed the bound (max |err|/bound = {verdict.lse_ratio:.3g}), "
                f"first at (row, head) {_first(over)}"
            )
    return verdict


def _case(kind: str, n_q: int, heads: int, seed: int) -> tuple[Any, torch.Tensor, torch.Tensor, Evaluation]:
    """A problem's shapes with synthetic outputs and evaluation of failure kind `kind`."""
    lengths = tuple(1 + (seed * 7 + i) % 5 for i in range(n_q))
    problem = materialize(Recipe(n_q=n_q, heads=heads, row_lengths=lengths, cache_rows=32, seed=seed))
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(n_q, heads, 512, generator=gen, dtype=torch.float64)
    bound = torch.rand(n_q, heads, 512, generator=gen, dtype=torch.float64) * 0.05
    out = (ref + (torch.rand(ref.shape, generator=gen, dtype=torch.float64) - 0.5) * 0.08).to(torch.bfloat16)
    ref_lse = torch.randn(n_q, heads, generator=gen, dtype=torch.float64) * 3
    lse_bound = torch.full((n_q, heads), 1e-3, dtype=torch.float64)
    lse = ref_lse.to(torch.float32)
    if kind == "clean":
        bound += (out.to(torch.float64) - ref).abs()
    if n_q:
        if kind == "nan":
            out[0, 0, 3] = float("nan")
            out[-1, -1, 7] = float("inf")
            lse[0, 0] = float("nan")
        elif kind == "zeros":
            out.zero_()
            bound[0, 0] = ref[0, 0].abs() + 1  # one head admits zero
        elif kind == "zeros-admitted":
            out.zero_()
            bound = ref.abs() + 1
        elif kind == "empty":
            ref_lse[0] = float("-inf")
            ref[0] = 0.0
            lse[0, 0] = 1.0
            lse[0, 1:] = float("-inf")
        elif kind == "zero-bound":
            bound[0, 0, :4] = 0.0
            lse_bound[0, 0] = 0.0
            lse[0, 0] += 1e-3
        elif kind == "nan-bound":
            bound[0, 0, 0] = float("nan")
            out[0, 0, 0] = float("nan")
            ref[0, 0, 1] = float("inf")
            bound[0, 0, 1] = float("inf")
            out[0, 0, 1] = float("inf")
        elif kind == "lse-over":
            lse += 1.0
    evaluation = Evaluation(
        out=ref, lse=ref_lse, out_bound=bound, lse_bound=lse_bound, window=torch.zeros(n_q, heads, dtype=torch.float64),
        mode="exact-steps", profile="test",
    )  # fmt: skip
    return problem, out, lse, evaluation


def _as_json(v: Verdict) -> str:
    return json.dumps({"failures": v.failures, "out": v.out_ratio, "lse": v.lse_ratio, "worst": v.worst}, sort_keys=True)


@pytest.mark.parametrize("kind", ["clean", "nan", "zeros", "zeros-admitted", "empty", "zero-bound", "nan-bound", "lse-over"])
@pytest.mark.parametrize(("n_q", "heads"), [(3, 2), (1, 16), (0, 4)])
def test_compare_gives_the_verdicts_of_the_element_by_element_form(kind: str, n_q: int, heads: int) -> None:
    problem, out, lse, evaluation = _case(kind, n_q, heads, seed=n_q * 3 + heads)
    want = _reference(problem, out, lse, evaluation)
    got = harness.compare(problem, out, lse, evaluation)
    assert _as_json(got) == _as_json(want)
    if kind != "clean" and n_q:
        assert not want.ok or kind == "zeros-admitted"
    problem.return_lse = False
    assert _as_json(harness.compare(problem, out, None, evaluation)) == _as_json(_reference(problem, out, None, evaluation))


def test_a_passing_comparison_reads_the_host_once_for_both_modes() -> None:
    problem, out, lse, evaluation = _case("clean", 4, 8, seed=3)
    other = Evaluation(**{**evaluation.__dict__, "mode": "float64"})
    counter = count_ops(lambda: harness._compare_modes(problem, out, lse, [evaluation, other]))
    assert counter.syncs == {"tolist": 1}, counter.syncs


def _as_slices(evaluations: list[Evaluation]) -> list[Evaluation]:
    """The evaluations rewritten as consecutive slices of stacked buffers, as evaluate_modes returns them."""
    fields = ("out", "lse", "out_bound", "lse_bound", "window")
    stacked = {name: torch.stack([getattr(e, name) for e in evaluations]) for name in fields}
    return [Evaluation(**{name: stacked[name][m] for name in fields}, mode=e.mode, profile=e.profile) for m, e in enumerate(evaluations)]


@pytest.mark.parametrize("kinds", [("clean", "nan"), ("zeros", "lse-over"), ("empty", "zero-bound"), ("nan-bound", "clean")])
@pytest.mark.parametrize(("n_q", "heads"), [(3, 2), (0, 4)])
def test_modes_compared_together_give_each_mode_its_verdict_alone(kinds: tuple[str, str], n_q: int, heads: int) -> None:
    """Each mode's evaluation (here two of different failure kinds on the same outputs) gets,
    compared in one stacked pass, the verdict it gets alone, whether its tensors are slices of
    one buffer per field (evaluate_modes) or tensors of their own."""
    problem, out, lse, first = _case(kinds[0], n_q, heads, seed=n_q + 11)
    _, _, _, second = _case(kinds[1], n_q, heads, seed=n_q + 11)
    evaluations = [first, Evaluation(**{**second.__dict__, "mode": "float64"})]
    alone = [_as_json(_reference(problem, out, lse, e)) for e in evaluations]
    for given in (evaluations, _as_slices(evaluations)):
        assert [_as_json(v) for v in harness._compare_modes(problem, out, lse, given)] == alone


def test_slices_of_one_buffer_are_compared_without_a_copy() -> None:
    evaluations = _as_slices([_case("clean", 2, 3, seed=5)[3]] * 3)
    assert harness._stacked([e.out for e in evaluations]).data_ptr() == evaluations[0].out.data_ptr()
    shuffled = [evaluations[1].out, evaluations[0].out, evaluations[2].out]
    assert torch.equal(harness._stacked(shuffled), torch.stack(shuffled))


def test_judge_compares_evaluate_modes_results_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluate_modes returns each mode's tensors as slices of one buffer per field, in its
    order; judge compares them in that order, so no evaluation is stacked again, and reports
    the exact-steps verdict first."""
    problem = materialize(Recipe(n_q=3, heads=4, row_lengths=(5, 0, 9), cache_rows=64, seed=3, return_lse=True))
    out, lse = harness.call_kernel(problem, run_emulated)
    stacks: list[int] = []
    compare_modes = harness._compare_modes

    def counted(*args: Any) -> list[Verdict]:
        verdicts: list[list[Verdict]] = []
        stacks.append(count_ops(lambda: verdicts.append(compare_modes(*args))).ops["stack"])
        return verdicts[0]

    monkeypatch.setattr(harness, "_compare_modes", counted)
    judgement = harness.judge(problem, out, lse, GFX950)
    assert stacks == [1], stacks  # the verdicts' columns only
    assert list(judgement.verdicts) == ["exact-steps", "float64"]
    assert judgement.ok, judgement.messages()
