"""Property 3: metamorphic relations, judged without the reference's values.

- permuting each row's keys changes out and lse by at most the two runs' a-priori bounds;
- splitting every row in two and merging the halves with their lse reproduces the full row
  within the bounds of the three calls (TOLERANCES.md, "Split and merge");
- a row computed alone equals the same row in a batch, bit for bit;
- two runs are bit-identical;
- strided q and a preallocated strided out give the bits of contiguous tensors.
The bounds come from oracle.bound (the error model, computed from the inputs); the reference's
out and lse are not used to decide. A relation that fails is then explained: each of its runs is
judged against the reference and triaged (conformance.judging.triage), and the failure carries
the worse run's finding; when every run lies inside its bound, the relation broke a promise the
bound does not cover (batch invariance: a contract violation) or, for a relation that follows
from the bounds (permutation, split and merge), the suite itself is wrong (a suite error).
Two runs that differ and strided tensors that change the bits are contract violations.
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.judging.checks import backend_limits, finding_fields, materialize_for, require_support, run_valid_call
from conformance.judging.finding import CONTRACT, SUITE_ERROR, Finding, failure, worse
from conformance.judging.flag_support import require_flags
from conformance.judging.harness import record
from conformance.judging.target import Target, judging
from conformance.judging.triage import triage_run
from oracle.bound import evaluate
from strategies import rng
from strategies.hypothesis_recipes import recipes
from strategies.materialize import Problem
from strategies.recipe import Recipe

SMALL = {"max_n_q": 16, "max_total_keys": 4096}


def _draw_problem(target: Target, data: st.DataObject, prop: str, **overrides: object) -> Problem:
    require_flags(target, has_invalid=overrides.get("has_invalid"), return_lse=overrides.get("return_lse"))  # type: ignore[arg-type]
    recipe = data.draw(recipes(**SMALL, **backend_limits(target)), label="recipe")
    fields = recipe.to_json_dict()
    fields["row_lengths"] = [max(x, 0) for x in recipe.row_lengths]  # no overlapping rows
    fields.update(overrides)
    recipe = Recipe.from_json_dict(fields)
    with judging(recipe, prop):
        problem = materialize_for(target, recipe)
        require_support(target, problem)
    return problem


def _run(target: Target, problem: Problem, prop: str, **changes: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    variant = dataclasses.replace(problem, **changes) if changes else problem
    out, lse = run_valid_call(target, variant, prop)
    return out.clone(), None if lse is None else lse.clone()


Run = tuple[str, Problem, torch.Tensor, "torch.Tensor | None"]


def _explained(target: Target, runs: list[Run], promise: Finding | None) -> Finding:
    """The finding of a failed relation: the worse of its runs' triage against the reference (the
    run named in the detail); when every run lies inside its bound, `promise` (what the relation
    promises beyond the bound), else a suite error (the relation follows from the bounds)."""
    found = []
    for label, problem, out, lse in runs:
        triaged = triage_run(problem, out, lse, target.profile)
        if triaged is not None:
            finding = triaged.finding
            found.append(Finding(finding.kind, finding.subject, f"{label}: {finding.detail}" if finding.detail else label))
    chosen = worse(*found)
    if chosen is not None:
        return chosen
    if promise is not None:
        return promise
    return Finding(SUITE_ERROR, "a relation that follows from the bounds fails though every run is inside its bound")


def _fail(target: Target, problem: Problem, prop: str, runs: list[Run], promise: Finding | None, message: str) -> AssertionError:
    """Record the failing example and return the AssertionError to raise: its finding's headline,
    then `message`."""
    finding = _explained(target, runs, promise)
    record(prop, target.name, problem, outcome="fail", extra=finding_fields(finding))
    return failure(finding, message)


def _bound(target: Target, problem: Problem, **changes: object):  # type: ignore[no-untyped-def]
    p = dataclasses.replace(problem, **changes) if changes else problem
    return evaluate(
        p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, profile=target.profile, mode="exact-steps", has_invalid=p.has_invalid
    )


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype == torch.bfloat16:
        return bool((a.view(torch.int16) == b.view(torch.int16)).all())
    return bool((a.view(torch.int32) == b.view(torch.int32)).all())


def _permuted_indices(problem: Problem, seed: int) -> torch.Tensor:
    """The index stream with each row's slice shuffled (rows do not overlap here)."""
    indptr = problem.indptr.to("cpu", torch.int64)
    lengths = (indptr[1:] - indptr[:-1]).clamp_min(0)
    rows = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    positions = indptr[:-1][rows] + torch.arange(int(lengths.sum())) - torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    keys = rng.uniform(seed, "permute", torch.arange(positions.numel()))
    order = torch.argsort(rows.to(torch.float64) * 2 + keys)
    permuted = problem.indices.to("cpu").clone()
    permuted[positions] = problem.indices.to("cpu")[positions[order]]
    return permuted.to(problem.indices.device)


@given(data=st.data())
def test_permuting_keys(target: Target, data: st.DataObject) -> None:
    problem = _draw_problem(target, data, "metamorphic_permute", return_lse=True)
    with judging(problem.recipe, "metamorphic_permute"):
        out, lse = _run(target, problem, "metamorphic_permute")
        permuted = _permuted_indices(problem, data.draw(st.integers(0, 2**31), label="permutation"))
        out_p, lse_p = _run(target, problem, "metamorphic_permute", indices=permuted, out=None)
        first, second = _bound(target, problem), _bound(target, problem, indices=permuted)
        tol = (first.out_bound + second.out_bound).to(out.device)
        diff = (out.double() - out_p.double()).abs()
        ok = bool((diff <= tol).all())
        assert lse is not None and lse_p is not None
        empty = torch.isneginf(lse)
        lse_ok = bool((empty == torch.isneginf(lse_p)).all()) and bool(
            (torch.where(empty, 0.0, (lse.double() - lse_p.double()).abs()) <= (first.lse_bound + second.lse_bound).to(lse.device)).all()
        )
        if not (ok and lse_ok):
            message = (
                f"permuting keys moved out by {float((diff - tol).max()):.3g} beyond the two bounds"
                if not ok
                else "permuting keys moved lse beyond the two bounds (or changed -inf positions)"
            )
            runs: list[Run] = [
                ("the original order", problem, out, lse),
                ("the permuted order", dataclasses.replace(problem, indices=permuted, out=None), out_p, lse_p),
            ]
            raise _fail(target, problem, "metamorphic_permute", runs, None, message)
        record("metamorphic_permute", target.name, problem, outcome="pass")


@given(data=st.data())
def test_split_and_merge(target: Target, data: st.DataObject) -> None:
    problem = _draw_problem(target, data, "metamorphic_split", return_lse=True, out_pad=None, out_layout="rows")
    with judging(problem.recipe, "metamorphic_split"):
        out, lse = _run(target, problem, "metamorphic_split")
        assert lse is not None
        indptr = problem.indptr.to("cpu", torch.int64)
        lengths = indptr[1:] - indptr[:-1]
        cut_share = data.draw(st.integers(0, 1000), label="cut_permille")
        cut = indptr[:-1] + lengths * cut_share // 1000
        split_ptr = torch.stack((indptr[:-1], cut), dim=1).reshape(-1)
        split_ptr = torch.cat((split_ptr, indptr[-1:])).to(torch.int32).to(problem.indptr.device)
        # rows are contiguous, so row q's halves are [indptr[q], cut[q]) and [cut[q], indptr[q + 1])
        q2 = problem.q.repeat_interleave(2, dim=0)
        halves = dataclasses.replace(problem, q=q2, indptr=split_ptr, out=None)
        half_out, half_lse = _run(target, halves, "metamorphic_split")
        assert half_lse is not None
        full_b = _bound(target, problem)
        half_b = _bound(target, halves)
        o = half_out.double().view(-1, 2, *half_out.shape[1:])
        ls = half_lse.double().view(-1, 2, half_lse.shape[1])
        ob = half_b.out_bound.to(o.device).view(-1, 2, *half_out.shape[1:])
        lb = half_b.lse_bound.to(o.device).view(-1, 2, half_lse.shape[1])
        merged_lse = torch.logaddexp(ls[:, 0], ls[:, 1])
        safe = torch.where(torch.isneginf(merged_lse), 0.0, merged_lse)
        weights = torch.where(torch.isneginf(ls), 0.0, torch.exp(ls - safe.unsqueeze(1)))  # [n_q, 2, H]
        merged = (weights.unsqueeze(-1) * o).sum(dim=1)
        drift = torch.exp(lb.sum(dim=1)).unsqueeze(-1)  # e^(lb_a + lb_b)
        w_prod = (weights[:, 0] * weights[:, 1]).unsqueeze(-1)
        # drift may be inf (huge lse bounds at extreme scores): a term whose other factor is exactly 0
        # is 0, never inf * 0 = NaN
        spread = (weights.unsqueeze(-1) * ob).sum(dim=1)
        cross = (o[:, 0] - o[:, 1]).abs() * w_prod
        tol = (
            full_b.out_bound.to(o.device)
            + torch.where(spread > 0, drift * spread, 0.0)
            + torch.where(cross > 0, cross * (drift - 1) * drift, 0.0)
        )
        # The merge itself is evaluated in float64 (logaddexp, exp, a 2-term sum), whose rounding is
        # not in any kernel bound: per weight a relative error of at most (|ls_i| + 5 |L| + 8) * 2^-53
        # (|L| the merged lse; exp and logaddexp within 2 ulps on every device), plus 2 * 2^-53 for
        # the products and the sum (TOLERANCES.md, section 9).
        eps = 2.0**-53
        scale = (ls.abs().nan_to_num(posinf=0.0, neginf=0.0).amax(dim=1) + 5 * safe.abs() + 10).unsqueeze(-1)
        evaluation = eps * scale * (weights.unsqueeze(-1) * o.abs()).sum(dim=1)
        tol = tol + evaluation
        diff = (out.double() - merged).abs()
        lse_tol = full_b.lse_bound.to(o.device) + lb.amax(dim=1) + 4 * eps * (1 + safe.abs())
        empty = torch.isneginf(lse)
        lse_ok = bool((empty == torch.isneginf(merged_lse)).all()) and bool(
            (torch.where(empty, 0.0, (lse.double() - merged_lse).abs()) <= lse_tol).all()
        )
        ok = bool((diff <= tol).all())
        if not (ok and lse_ok):
            message = (
                f"merging the two halves misses the full row by {float((diff - tol).max()):.3g} beyond the bounds"
                if not ok
                else "merged lse of the halves misses the full row's lse beyond the bounds"
            )
            runs = [("the full rows", problem, out, lse), ("the halves", halves, half_out, half_lse)]
            raise _fail(target, problem, "metamorphic_split", runs, None, message)
        record("metamorphic_split", target.name, problem, outcome="pass")


@given(data=st.data())
def test_row_alone_equals_row_in_batch(target: Target, data: st.DataObject) -> None:
    problem = _draw_problem(target, data, "metamorphic_alone")
    with judging(problem.recipe, "metamorphic_alone"):
        out, lse = _run(target, problem, "metamorphic_alone")
        row = data.draw(st.integers(0, problem.q.shape[0] - 1), label="row")
        alone = dataclasses.replace(problem, q=problem.q[row : row + 1], indptr=problem.indptr[row : row + 2].clone(), out=None)
        out_1, lse_1 = _run(target, alone, "metamorphic_alone")
        if target.backend.batch_invariant:
            ok = _bits_equal(out[row : row + 1], out_1) and (lse is None or lse_1 is None or _bits_equal(lse[row : row + 1], lse_1))
            how = "bit for bit"
        else:  # declared batch-dependent (split-KV schedules): both results within the bound
            bound = _bound(target, alone)
            ok = bool(((out[row : row + 1].double() - out_1.double()).abs() <= 2 * bound.out_bound.to(out.device)).all())
            if lse is not None and lse_1 is not None:
                empty = torch.isneginf(lse_1)
                ok = (
                    ok
                    and bool((torch.isneginf(lse[row : row + 1]) == empty).all())
                    and bool(
                        (
                            torch.where(empty, 0.0, (lse[row : row + 1].double() - lse_1.double()).abs())
                            <= 2 * bound.lse_bound.to(lse.device)
                        ).all()
                    )
                )
            how = "within twice the bound (the backend declares batch-dependent results)"
        if not ok:
            promise = (
                Finding(
                    CONTRACT,
                    "a row computed alone differs from the same row in a batch",
                    f"row {row}; the backend promises batch invariance",
                )
                if target.backend.batch_invariant
                else None
            )
            runs = [("the batch", problem, out, lse), (f"row {row} alone", alone, out_1, lse_1)]
            raise _fail(
                target,
                problem,
                "metamorphic_alone",
                runs,
                promise,
                f"row {row} computed alone differs from the same row in the batch (expected {how})",
            )
        record("metamorphic_alone", target.name, problem, outcome="pass")


@given(data=st.data())
def test_two_runs_bit_identical(target: Target, data: st.DataObject) -> None:
    problem = _draw_problem(target, data, "metamorphic_repeat")
    with judging(problem.recipe, "metamorphic_repeat"):
        out, lse = _run(target, problem, "metamorphic_repeat")
        again, lse_again = _run(target, problem, "metamorphic_repeat")
        ok = _bits_equal(out, again) and (lse is None or lse_again is None or _bits_equal(lse, lse_again))
        if not ok:
            finding = Finding(CONTRACT, "two runs on the same inputs differ", _first_difference(out, again, lse, lse_again))
            record("metamorphic_repeat", target.name, problem, outcome="fail", extra=finding_fields(finding))
            raise failure(finding)
        record("metamorphic_repeat", target.name, problem, outcome="pass")


@given(data=st.data())
def test_strided_equals_contiguous(target: Target, data: st.DataObject) -> None:
    pads = st.tuples(st.integers(1, 64), st.integers(1, 64)).map(list)
    overrides = {"q_pad": data.draw(pads, label="q_pad")}
    if target.backend.accepts_out:
        overrides["out_pad"] = data.draw(pads, label="out_pad")
    problem = _draw_problem(target, data, "metamorphic_strides", **overrides)
    with judging(problem.recipe, "metamorphic_strides"):
        out, lse = _run(target, problem, "metamorphic_strides")
        plain_out, plain_lse = _run(target, problem, "metamorphic_strides", q=problem.q.contiguous(), out=None)
        ok = _bits_equal(out.contiguous(), plain_out) and (lse is None or plain_lse is None or _bits_equal(lse, plain_lse))
        if not ok:
            finding = Finding(
                CONTRACT,
                "strided q or a preallocated strided out changes the bits",
                _first_difference(out.contiguous(), plain_out, lse, plain_lse),
            )
            record("metamorphic_strides", target.name, problem, outcome="fail", extra=finding_fields(finding))
            raise failure(finding, "strided q / preallocated strided out give different bits from contiguous tensors")
        record("metamorphic_strides", target.name, problem, outcome="pass")


def _first_difference(out: torch.Tensor, other: torch.Tensor, lse: torch.Tensor | None, other_lse: torch.Tensor | None) -> str:
    """Where two results first differ in their bits, with both values."""
    pairs = [("out elements", "(row, head, dim)", out.view(torch.int16), other.view(torch.int16), out, other)]
    if lse is not None and other_lse is not None:
        pairs.append(("lse values", "(row, head)", lse.view(torch.int32), other_lse.view(torch.int32), lse, other_lse))
    for what, axes, bits, other_bits, values, other_values in pairs:
        differ = bits != other_bits
        if bool(differ.any()):
            at = tuple(int(x) for x in torch.nonzero(differ)[0].tolist())
            return f"{int(differ.sum())} {what} differ, first at {axes} {list(at)}: {float(values[at])} and {float(other_values[at])}"
    return "the results differ"
