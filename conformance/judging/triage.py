"""Triage of a failing verdict: what kind of failure it is (conformance.judging.finding), judged on a
ladder of weaker assumptions and on the coarsest rounding model of the kernel family.

A failure against the declared profile is a finding about the kernel only when it survives every
legitimate reading of the kernel's arithmetic; how far it lies outside them says what kind of bug
it is. `triage` sorts a failing call into (TOLERANCES.md section 14 derives each model):

- *contract violation* (needs no bound): out non-finite where the reference is finite, lse not
  finite where the row has keys, an empty row whose out is not exactly 0 or whose lse is not
  -inf, a returned out that is not the contract's tensor, or an out element outside
  [min v, max v] of its row's keys (per dimension) by more than the coarsest model's bound (no
  weighting of the keys, rounded however, gives it). Contract violations found outside the bound
  (inputs written, a broken batch invariance, a valid call that raises) are raised where they are
  detected (`contract_failure`).
- *profile too tight*: outside the declared profile, but inside the bound of a rung of LADDER
  ("passes if subnormals flush"): the profile is what is wrong, not the kernel.
- *precision*: outside every rung, but inside the coarsest rounding model (`coarsest`): every
  rung, and every step of COARSENINGS coarsened to the coarsest format a kernel of the family
  uses for it. The detail names the step: the first single coarsening (on top of every rung) that
  admits the call, else the smallest set of them that does ("several steps").
- *wrong result*: outside even the coarsest model; the detail gives the worst err/bound ratio
  against it, with the output (out or lse) and the comparison mode.

The ladder (each rung a weaker, named assumption; cumulative: rung k assumes rungs 1..k):
  1. subnormals flushed: every f32 / bf16 result below 2^-126 may be zero;
  2. exp2, log2 and the reciprocal approximate to a few ulps (exp and log 2^-20 relative, scalar
     arithmetic 2^-21);
  3. any split-KV merge: any row may be split into any number of partitions merged through an
     f32 log2-domain lse;
  4. any summation order with round-toward-zero: every sum (QK, PV, l) as the conservative
     model (sequential or fused without guard bits, toward zero), l from rounded or unrounded P,
     either output cast.
The first cumulative rung that admits the call is found; if that rung alone admits it, the verdict
names it alone, else it names the rungs 1..k it needed.

The coarsenings (each one step, applied on top of every rung), from the one that widens the
bound least to the one that widens it most, so that the step named is the smallest one that
explains the output:
  1. out converted to bf16 toward zero (one bf16 ulp);
  2. P rounded to 16 bits toward zero before PV (bf16's precision, f16's range: f16 or bf16, of P
     or of P * scale_v), l from the rounded or the unrounded P (2^-7 of the weighted |v|);
  3. exp2 and log2 at 16-bit precision (bf16's relative error, f16's range: 2^-8 per key);
  4. the score and the softmax's scalar arithmetic in bf16 (the score after QK, c_log2, the
     scaled score, the running max, alpha, 1/l: 2^-8 of |score| and of the score differences).
Accumulations stay in f32 (rung 4's order and rounding) and Q and K enter QK as the profile
declares: TOLERANCES.md section 14 says why a 16-bit accumulator, a re-rounded operand and an
e4m3 P are not part of the coarsest model.

`triage_run` judges a call and triages it when it fails (the metamorphic properties triage each of
their runs against the reference this way).
"""

from __future__ import annotations

__all__ = [
    "COARSENINGS",
    "LADDER",
    "Rung",
    "Triage",
    "coarsest",
    "contract_failure",
    "outputs_subject",
    "triage",
    "triage_run",
]

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from conformance.judging.finding import CONTRACT, PRECISION, PROFILE, WRONG_RESULT, Finding, failure
from conformance.judging.harness import Judgement, Verdict, compare
from oracle.accumulation import Accumulation
from oracle.bound import MODES, Evaluation, Mode, evaluate_modes
from oracle.profile_schema import ANY16_P, OUT_CASTS, TOWARD_ZERO_CAST, NumericsProfile, SplitModel
from oracle.rows import PreconditionError, iter_chunks
from strategies.materialize import Problem


@dataclass(frozen=True)
class Rung:
    """One named relaxation of a profile: its name (as printed after "passes if" for a rung of
    the ladder, after "admitted once" for a coarsening) and how it relaxes a profile."""

    name: str
    relax: Callable[[NumericsProfile], NumericsProfile]


def _flush(p: NumericsProfile) -> NumericsProfile:
    return dataclasses.replace(p, subnormals="flush")


def _approximate(p: NumericsProfile) -> NumericsProfile:
    loose = 2.0**-20
    return dataclasses.replace(
        p,
        exp_rel_err=max(p.exp_rel_err, loose),
        arith_u=max(p.arith_u, 2.0**-21),
        lse_extra_u=max(p.lse_extra_u, loose),
        split=dataclasses.replace(p.split, exp_rel_err=max(p.split.exp_rel_err, loose), log_abs_err=max(p.split.log_abs_err, 2.0**-17)),
    )


def _any_split(p: NumericsProfile) -> NumericsProfile:
    old = p.split
    merged = SplitModel(
        rows="any",
        max_partials=None,
        lse_base="2",
        lse_format="f32",
        exp_rel_err=max(old.exp_rel_err, 2.0**-20),
        log_abs_err=max(old.log_abs_err, 2.0**-17),
    )
    return dataclasses.replace(p, split=merged)


def _conservative(acc: Accumulation) -> Accumulation:
    return Accumulation(acc.format, "unknown", "toward_zero", 0, acc.terms_per_instruction, acc.product_roundings)


def _any_order(p: NumericsProfile) -> NumericsProfile:
    return dataclasses.replace(
        p,
        qk=_conservative(p.qk),
        pv=_conservative(p.pv),
        l=_conservative(p.l),
        l_partials=1,
        p_rounded_in_l="unknown" if p.p_format != "exact" else p.p_rounded_in_l,
        out_casts=OUT_CASTS,
    )


LADDER: tuple[Rung, ...] = (
    Rung("subnormals flush", _flush),
    Rung("exp2, log2 and the reciprocal are approximate to a few ulps", _approximate),
    Rung("rows are split and merged through an f32 lse", _any_split),
    Rung("sums run in any order with round-toward-zero", _any_order),
)

#: unit roundoff of bf16 (8 significant bits), the coarsest 16-bit precision
BF16_U = 2.0**-8
#: the smallest f16 subnormal: an f16 exp2 result below it rounds to 0 or to it (toward zero: a whole one)
F16_SUBNORMAL = 2.0**-24


def _softmax_bf16(p: NumericsProfile) -> NumericsProfile:
    return dataclasses.replace(p, arith_u=max(p.arith_u, BF16_U), score_roundings=max(p.score_roundings, 3))


def _exp_16bit(p: NumericsProfile) -> NumericsProfile:
    return dataclasses.replace(
        p, exp_rel_err=max(p.exp_rel_err, BF16_U), exp_floor=max(p.exp_floor, F16_SUBNORMAL), lse_extra_u=max(p.lse_extra_u, BF16_U)
    )


def _p_16bit(p: NumericsProfile) -> NumericsProfile:
    return dataclasses.replace(p, p_format=ANY16_P, p_rounding="toward_zero", p_rounded_in_l="unknown")


def _out_toward_zero(p: NumericsProfile) -> NumericsProfile:
    return dataclasses.replace(p, out_casts=tuple(dict.fromkeys((*p.out_casts, TOWARD_ZERO_CAST))))


COARSENINGS: tuple[Rung, ...] = (
    Rung("out is converted to bf16 toward zero", _out_toward_zero),
    Rung("P is rounded to 16 bits toward zero before PV", _p_16bit),
    Rung("exp2 and log2 are evaluated at 16-bit precision", _exp_16bit),
    Rung("the score, c_log2, the scaled score, the running max, alpha and 1/l are rounded to bf16", _softmax_bf16),
)


def _apply(profile: NumericsProfile, relaxations: Sequence[Rung]) -> NumericsProfile:
    for relaxation in relaxations:
        profile = relaxation.relax(profile)
    return profile


def coarsest(profile: NumericsProfile) -> NumericsProfile:
    """The coarsest rounding model of `profile`'s kernel family: every rung and every coarsening."""
    return _apply(profile, (*LADDER, *COARSENINGS))


@dataclass(frozen=True)
class Triage:
    """The finding of one failing call and how it was reached.

    finding: kind, subject, detail (conformance.judging.finding); rungs: the rungs of the ladder
    that admit it (profile too tight); steps: the coarsenings that admit it (precision)."""

    finding: Finding
    rungs: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.finding.kind

    @property
    def headline(self) -> str:
        """The finding's headline, the first line of a failure message."""
        return self.finding.headline


def contract_failure(subject: str, detail: str = "", message: str = "") -> AssertionError:
    """An AssertionError carrying a contract violation found outside the bound (inputs written, a
    broken batch-invariance promise, an empty row's convention): `subject` without numbers,
    `detail` with them, `message` the lines after the headline."""
    return failure(Finding(CONTRACT, subject, detail), message)


def outputs_subject(outputs: Sequence[str]) -> str:
    """The subject of a bound failure on `outputs` ("out", "lse"): "out outside the bound" whenever
    out fails (a defect that moves out usually moves lse too, and a call without lse shows only
    out: one subject for both), else "lse outside the bound"."""
    return "lse outside the bound" if "lse" in outputs and "out" not in outputs else "out outside the bound"


def _hull_violation(problem: Problem, out: torch.Tensor, slack_from: Evaluation) -> str:
    """Where an out element lies outside [min v, max v] of its row's keys (per dimension) widened
    by `slack_from`'s bound (the coarsest model's): '' when none does."""
    got = out.to(torch.float64)
    slack = slack_from.out_bound.to(got.device)
    for chunk in iter_chunks(problem.indices, problem.indptr, problem.kv_cache, has_invalid=problem.has_invalid):
        valid = chunk.valid.unsqueeze(-1)
        values = chunk.latent.to(got.device)
        v_max = values.masked_fill(~valid, float("-inf")).amax(dim=1).unsqueeze(1)  # [R, 1, 512]
        v_min = values.masked_fill(~valid, float("inf")).amin(dim=1).unsqueeze(1)
        rows = chunk.rows.to(got.device)
        keyed = valid.any(dim=1).view(-1, 1, 1)  # rows with at least one valid key
        g, s = got[rows], slack[rows]
        outside = keyed & torch.isfinite(g) & ((g > v_max + s) | (g < v_min - s))
        if bool(outside.any()):
            r, h, d = (int(x) for x in torch.nonzero(outside)[0].tolist())
            row = int(rows[r])
            return (
                f"out[{row}, {h}, {d}] = {float(g[r, h, d]):.6g} lies outside [min v, max v] = "
                f"[{float(v_min[r, 0, d]):.6g}, {float(v_max[r, 0, d]):.6g}] of the row's keys, beyond the coarsest "
                f"rounding model's bound {float(s[r, h, d]):.3g}: no weighting of the keys gives it"
            )
    return ""


def _contract(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, reference: Evaluation) -> Finding | None:
    """A contract violation visible without any bound, None when there is none."""
    got = out.to(torch.float64)
    ref = reference.out.to(got.device)
    empty = torch.isneginf(reference.lse.to(got.device))  # [n_q, H]: rows without a valid key
    bad = ~torch.isfinite(got) & torch.isfinite(ref)
    if bool(bad.any()):
        r, h, d = (int(x) for x in torch.nonzero(bad)[0].tolist())
        return Finding(
            CONTRACT,
            "out is not finite where the reference is",
            f"out[{r}, {h}, {d}] = {float(got[r, h, d])}, reference {float(ref[r, h, d]):.6g}; {int(bad.sum())} such elements",
        )
    nonzero_empty = empty.unsqueeze(-1) & (got != 0)
    if bool(nonzero_empty.any()):
        r, h, d = (int(x) for x in torch.nonzero(nonzero_empty)[0].tolist())
        return Finding(
            CONTRACT, "an empty row's out is not 0", f"row {r} has no valid key, but out[{r}, {h}, {d}] = {float(got[r, h, d]):.6g}"
        )
    if problem.return_lse and isinstance(lse, torch.Tensor):
        got_lse = lse.to(torch.float64)
        wrong_empty = empty & ~torch.isneginf(got_lse)
        if bool(wrong_empty.any()):
            r, h = (int(x) for x in torch.nonzero(wrong_empty)[0].tolist())
            return Finding(
                CONTRACT, "an empty row's lse is not -inf", f"row {r} has no valid key, but lse[{r}, {h}] = {float(got_lse[r, h])}"
            )
        not_finite = ~empty & ~torch.isfinite(got_lse)
        if bool(not_finite.any()):
            r, h = (int(x) for x in torch.nonzero(not_finite)[0].tolist())
            return Finding(CONTRACT, "lse is not finite for a row with keys", f"lse[{r}, {h}] = {float(got_lse[r, h])}")
    return None


def rejudge(
    problem: Problem,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    profile: NumericsProfile,
    modes: tuple[Mode, ...] = MODES,
    *,
    scale_model: str = "stored",
) -> Judgement | None:
    """The judgement of the outputs under `profile` in `modes` (exact-steps first), None where
    the profile promises no bound for this problem (a PreconditionError)."""
    try:
        evaluations = evaluate_modes(
            *problem.args,
            profile=profile,
            modes=modes,
            has_invalid=problem.has_invalid,
            scale_model=scale_model,
        )
    except PreconditionError:
        return None
    ordered = sorted(modes, key=lambda m: m != "exact-steps")
    verdicts = {m: compare(problem, out, lse, evaluations[m]) for m in ordered}
    return Judgement(verdicts=verdicts, evaluations={m: evaluations[m] for m in ordered})  # type: ignore[arg-type]


def _failing(verdict: Verdict) -> list[str]:
    """The outputs a failing verdict is about ("out", "lse")."""
    outputs = []
    if verdict.out_ratio > 1 or math.isnan(verdict.out_ratio) or any("] out is all zeros" in f for f in verdict.failures):
        outputs.append("out")
    if verdict.lse_ratio > 1 or math.isnan(verdict.lse_ratio):
        outputs.append("lse")
    return outputs


def _worst(judgement: Judgement) -> tuple[float, str, str]:
    """(largest err/bound, its output, its mode) over the judgement's failing verdicts."""
    best = (0.0, "out", next(iter(judgement.verdicts), "exact-steps"))
    for mode, verdict in judgement.verdicts.items():
        for output, value in (("out", verdict.out_ratio), ("lse", verdict.lse_ratio)):
            value = math.inf if math.isnan(value) else value
            if value > best[0]:
                best = (value, output, mode)
    return best


def _outputs(judgement: Judgement) -> list[str]:
    found: list[str] = []
    for verdict in judgement.verdicts.values():
        found += [o for o in _failing(verdict) if o not in found]
    return found


def _ratio_of(judgement: Judgement | None, output: str, mode: str) -> float | None:
    """The err/bound of `output` in `mode` of a judgement (None when it has no such mode)."""
    if judgement is None or mode not in judgement.verdicts:
        return None
    verdict = judgement.verdicts[mode]
    return verdict.out_ratio if output == "out" else verdict.lse_ratio


def _against(ratio: float | None, model: str) -> str:
    return f"{ratio:.3g} under {model}" if ratio is not None else f"no bound under {model}"


def triage(
    problem: Problem,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    profile: NumericsProfile,
    judgement: Judgement,
    *,
    scale_model: str = "stored",
) -> Triage:
    """The kind of a failing judgement of `out`, `lse` under `profile` (see the module docstring).

    Re-judges only the failing comparison modes: once per cumulative rung until one admits the
    call (and once more for that rung alone), then under the coarsest model and, when that admits
    it, per coarsening until the step is found. `scale_model`: as for oracle.bound.evaluate_modes
    ("gfx950": the documented behaviour under scale violations)."""
    failing: tuple[Mode, ...] = tuple(mode for mode, verdict in judgement.verdicts.items() if not verdict.ok)  # type: ignore[misc]
    failing = failing or tuple(judgement.verdicts)  # type: ignore[assignment]
    reference = next(iter(judgement.evaluations.values()))
    if not isinstance(out, torch.Tensor) or out.shape != reference.out.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return Triage(Finding(CONTRACT, "out is not the contract's tensor", f"got {shape}, expected {tuple(reference.out.shape)}"))
    broken = _contract(problem, out, lse, reference)
    if broken is not None:
        return Triage(broken)
    _, output, mode = _worst(judgement)
    declared_model = f"the declared profile {profile.name!r}"
    declared = f"{output} err/bound {_against(_ratio_of(judgement, output, mode), declared_model)}, {mode} mode"

    def judged(candidate: NumericsProfile) -> Judgement | None:
        return rejudge(problem, out, lse, candidate, failing, scale_model=scale_model)

    cumulative = profile
    loosest: Judgement | None = None
    for level, rung in enumerate(LADDER):
        cumulative = rung.relax(cumulative)
        result = judged(cumulative)
        if result is None:
            continue
        loosest = result
        if result.ok:
            alone = judged(rung.relax(profile)) if level else result
            names = (rung.name,) if alone is not None and alone.ok else tuple(r.name for r in LADDER[: level + 1])
            return Triage(Finding(PROFILE, "passes if " + " and ".join(names), declared), rungs=names)
    laddered = cumulative
    coarse = judged(_apply(laddered, COARSENINGS))
    slack_from = coarse if coarse is not None else loosest
    if slack_from is not None:
        reason = _hull_violation(problem, out, next(iter(slack_from.evaluations.values())))
        if reason:
            return Triage(Finding(CONTRACT, "out lies outside the keys' [min v, max v]", reason))
    if coarse is None or not coarse.ok:
        basis = coarse or loosest or judgement
        _, output, mode = _worst(basis)
        detail = (
            f"{output} err/bound {_against(_ratio_of(coarse, output, mode), 'the coarsest rounding model')}, "
            f"{_against(_ratio_of(judgement, output, mode), declared_model)}, {mode} mode"
        )
        subject = outputs_subject(_outputs(basis))
        if any("] out is all zeros" in f for v in basis.verdicts.values() for f in v.failures):
            subject = "out is all zeros where the reference is not"
        return Triage(Finding(WRONG_RESULT, subject, detail))
    steps = _steps(judged, laddered)
    what = steps[0] if len(steps) == 1 else "several steps: " + "; ".join(steps)
    return Triage(Finding(PRECISION, outputs_subject(_outputs(judgement)), f"admitted once {what}; {declared}"), steps=steps)


def _steps(judged: Callable[[NumericsProfile], Judgement | None], laddered: NumericsProfile) -> tuple[str, ...]:
    """The first single coarsening (on top of every rung) that admits the call, else the smallest
    set of them, in pipeline order, that does (the coarsest model, all of them, does)."""

    def admits(steps: Sequence[Rung]) -> bool:
        result = judged(_apply(laddered, steps))
        return result is not None and result.ok

    for step in COARSENINGS:
        if admits((step,)):
            return (step.name,)
    chosen = list(COARSENINGS)
    for k in range(1, len(COARSENINGS)):  # the shortest prefix that admits
        if admits(COARSENINGS[:k]):
            chosen = list(COARSENINGS[:k])
            break
    for step in list(chosen):  # then drop each step the rest admits without
        rest = [s for s in chosen if s is not step]
        if len(rest) > 1 and admits(rest):
            chosen = rest
    return tuple(step.name for step in chosen)


def triage_run(
    problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, profile: NumericsProfile, *, scale_model: str = "stored"
) -> Triage | None:
    """Judge one call's outputs against the reference under `profile` (both comparison modes) and
    triage them when they fail; None when they pass. The outputs may be copies: whether the kernel
    returned the out= it was given is not judged here. Raises PreconditionError where the declared
    profile promises no bound."""
    if problem.out is not None:
        problem = dataclasses.replace(problem, out=None)
    evaluations = evaluate_modes(
        *problem.args,
        profile=profile,
        has_invalid=problem.has_invalid,
        scale_model=scale_model,
    )
    ordered = sorted(MODES, key=lambda m: m != "exact-steps")
    judgement = Judgement(
        verdicts={m: compare(problem, out, lse, evaluations[m]) for m in ordered}, evaluations={m: evaluations[m] for m in ordered}
    )
    if judgement.ok:
        return None
    return triage(problem, out, lse, profile, judgement, scale_model=scale_model)
