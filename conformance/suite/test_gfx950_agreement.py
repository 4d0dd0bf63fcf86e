"""Property 2, for kernels of the `gfx950` profile.

(a) Bit-for-bit agreement with the emulated kernel on exact-arithmetic recipes (see
strategies.recipe): every step of the gfx950 algorithm is exact on them, so any correct
implementation returns the emulator's out bits; lse may differ by v_log_f32's documented 1 ulp
carried through three f32 roundings (TOLERANCES.md, "Agreement with emulated").
(b) The documented behaviour under the scale preconditions: with non-power-of-two, above-2^7 or
zero scales the kernel must match the gfx950 scale model (QK takes the exponent, PV the scale
clamped to [2^-149, 2^7]) within the profile's bound.

A failure carries its finding (conformance.judging.finding): a disagreement with the emulated
kernel is first judged against the reference and triaged (a wrong result, a contract violation);
one that stays inside the profile's bound is a precision finding (the kernel rounds where every
step of the algorithm is exact). A departure from the documented scale behaviour is triaged
against that behaviour's reference and bound.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.judging.checks import backend_limits, finding_fields, materialize_for, require_support, run_valid_call
from conformance.judging.finding import CONTRACT, PRECISION, Finding, failure
from conformance.judging.harness import Judgement, compare, record
from conformance.judging.target import Target, judging
from conformance.judging.triage import triage, triage_run
from kernel.emulated.gfx950 import run_emulated
from oracle.bound import evaluate
from strategies.hypothesis_recipes import recipes
from strategies.recipe import Recipe

LSE_AGREEMENT = 2.0**-20  # relative to (|lse| + 16): 1 v_log_f32 ulp of log2(l) <= 2^-23 * 21, x3


def _need_gfx950(target: Target) -> None:
    if target.profile.name != "gfx950":
        pytest.skip(f"kernel {target.name!r} declares profile {target.profile.name!r}, not gfx950")


@given(data=st.data())
def test_bit_exact_agreement_with_emulated(target: Target, data: st.DataObject) -> None:
    _need_gfx950(target)
    if target.name == "emulated":
        pytest.skip("the emulated kernel is the reference of this property")
    recipe = data.draw(recipes(max_n_q=32, max_total_keys=4096, exact=True, **backend_limits(target)), label="recipe")
    with judging(recipe, "gfx950_bit_exact"):
        problem = materialize_for(target, recipe)
        require_support(target, problem)
        out, lse = run_valid_call(target, problem, "gfx950_bit_exact")
        out = out.clone()
        lse = None if lse is None else lse.clone()
        expected, expected_lse = run_emulated(
            *problem.args,
            has_invalid=problem.has_invalid,
            return_lse=problem.return_lse,
        )
        same = out.view(torch.int16) == expected.view(torch.int16)
        problems = []
        if not bool(same.all()):
            where = [int(x) for x in torch.nonzero(~same)[0].tolist()]
            problems.append(
                f"{int((~same).sum())} out elements differ from the emulated kernel on an exact-arithmetic recipe; "
                f"first at (row, head, dim) {where}: kernel {float(out[tuple(where)])}, emulated {float(expected[tuple(where)])}"
            )
        if problem.return_lse and not problems:
            if lse is None or expected_lse is None:
                problems.append("return_lse=True but the kernel returned no lse")
            else:
                empty = torch.isneginf(expected_lse)
                diff = torch.where(empty, 0.0, (lse.double() - expected_lse.double()).abs())
                allowed = LSE_AGREEMENT * (expected_lse.double().abs().nan_to_num(0.0, neginf=0.0) + 16)
                if not bool((torch.isneginf(lse) == empty).all()):
                    problems.append("lse -inf positions differ from the emulated kernel")
                elif not bool((diff <= allowed).all()):
                    problems.append(f"lse differs from the emulated kernel by {float(diff.max()):.3g} (allowed {float(allowed.max()):.3g})")
        if problems:
            finding = _disagreement(target, problem, out, lse, problems[0])
            record("gfx950_bit_exact", target.name, problem, outcome="fail", extra=finding_fields(finding))
            raise failure(finding, problems[0])
        record("gfx950_bit_exact", target.name, problem, outcome="pass")


def _disagreement(target: Target, problem, out: torch.Tensor, lse: torch.Tensor | None, what: str) -> Finding:  # type: ignore[no-untyped-def]
    """The finding of a disagreement with the emulated kernel: the call's triage against the
    reference when it fails the profile's bound, else a precision finding (inside the bound, the
    kernel rounds where every step is exact), or a contract violation for lse's -inf positions
    or a missing lse."""
    triaged = triage_run(problem, out, lse, target.profile)
    if triaged is not None:
        return triaged.finding
    if what.startswith("out"):
        return Finding(PRECISION, "out differs from the emulated kernel where every step is exact", what.split(";")[0])
    if "-inf" in what or "no lse" in what:
        return Finding(CONTRACT, "lse's -inf positions differ from the emulated kernel", what)
    return Finding(PRECISION, "lse differs from the emulated kernel beyond log2's ulp", what)


def _violating(recipe: Recipe, kind: str) -> Recipe:
    fields = recipe.to_json_dict()
    if kind == "raw_writer":
        fields["writer"] = "raw"
    elif kind == "above_cap_latent":
        fields["latent"] = "above_cap"
    else:
        fields["corruptions"] = [{"kind": kind, "count": 3}]
    return Recipe.from_json_dict(fields)


@given(data=st.data())
def test_documented_scale_behaviour(target: Target, data: st.DataObject) -> None:
    _need_gfx950(target)
    base = data.draw(recipes(max_n_q=16, max_total_keys=4096, **backend_limits(target)), label="recipe")
    kind = data.draw(
        st.sampled_from(("raw_writer", "above_cap_latent", "scale_above_cap", "scale_not_pow2", "zero_scale")), label="violation"
    )
    recipe = _violating(base, kind)
    with judging(recipe, "gfx950_scale_behaviour", expect="precondition"):
        problem = materialize_for(target, recipe)
        require_support(target, problem)
        out, lse = run_valid_call(target, problem, "gfx950_scale_behaviour", expect="precondition")
        evaluation = evaluate(
            *problem.args,
            profile=target.profile,
            mode="exact-steps",
            has_invalid=problem.has_invalid,
            scale_model="gfx950",
        )
        verdict = compare(problem, out, lse, evaluation)
        finding = None
        if not verdict.ok:
            judgement = Judgement(verdicts={"exact-steps": verdict}, evaluations={"exact-steps": evaluation})
            found = triage(problem, out, lse, target.profile, judgement, scale_model="gfx950").finding
            finding = Finding(found.kind, found.subject, f"under {kind}: {found.detail}")
        record(
            "gfx950_scale_behaviour",
            target.name,
            problem,
            outcome="pass" if verdict.ok else "fail",
            out_ratio=verdict.out_ratio,
            lse_ratio=verdict.lse_ratio,
            extra={"mode": "exact-steps", **(finding_fields(finding) if finding is not None else {})},
        )
        if finding is not None:
            raise failure(finding, f"under {kind} the kernel departs from the gfx950 documented scale behaviour:\n{verdict.message()}")
        assert math.isfinite(verdict.out_ratio)
