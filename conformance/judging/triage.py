"""Triage of a failing verdict: which of three classes it is, judged on a ladder of weaker assumptions.

A failure against the declared profile is only a finding about the kernel when it survives every
legitimate reading of the kernel's arithmetic. `triage` sorts a failing call into:

- class 1, *contract violation* (needs no bound): out non-finite where the reference is finite,
  lse not finite where the row has keys, an empty row whose out is not exactly 0 or whose lse is
  not -inf, or an out element outside [min v, max v] of the row's keys in that dimension by more
  than the loosest rung's bound (no reweighting of the keys, rounded however, gives it). Inputs
  written, a broken promise of batch invariance and a crash are class 1 too; they are raised
  where they are detected (`contract_violation`).
- class 2, *profile too tight*: outside the declared profile, but inside the bound of a named
  rung of the ladder below ("passes if subnormals flush"): the profile is what is wrong.
- class 3, *precision bug*: outside every rung, all of them together included.

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
"""

from __future__ import annotations

__all__ = ["CLASS_NAMES", "CONTRACT", "LADDER", "PRECISION", "PROFILE", "Rung", "Triage", "contract_violation", "triage"]

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.judging.finding_class import CLASS_NAMES, CONTRACT, PRECISION, PROFILE
from conformance.judging.harness import Judgement, judge
from oracle.accumulation import Accumulation
from oracle.bound import Evaluation, Mode
from oracle.profile_schema import OUT_CASTS, NumericsProfile, SplitModel
from oracle.rows import PreconditionError, iter_chunks
from strategies.materialize import Problem


@dataclass(frozen=True)
class Rung:
    """One weaker assumption: its name (as printed after "passes if") and how it relaxes a profile."""

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


@dataclass(frozen=True)
class Triage:
    """The class of one failing call and why.

    klass: 1, 2 or 3; reason: one line (what broke the contract, the rungs that admit it, or that
    none does); rungs: names of the rungs that admit it (class 2), empty otherwise."""

    klass: int
    reason: str
    rungs: tuple[str, ...] = ()

    @property
    def headline(self) -> str:
        """The class and its reason, for the first line of a failure message."""
        return f"{CLASS_NAMES[self.klass]}: {self.reason}"


def contract_violation(what: str) -> AssertionError:
    """An AssertionError for a class-1 finding detected outside the bound (inputs written, a
    broken batch-invariance promise, an empty row's convention)."""
    return AssertionError(f"{CLASS_NAMES[CONTRACT]}: {what}")


def _hull_violation(problem: Problem, out: torch.Tensor, loosest: Evaluation) -> str:
    """Where an out element lies outside [min v, max v] of its row's keys (per dimension) widened
    by the loosest rung's bound: '' when none does."""
    got = out.to(torch.float64)
    slack = loosest.out_bound.to(got.device)
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
                f"[{float(v_min[r, 0, d]):.6g}, {float(v_max[r, 0, d]):.6g}] of the row's keys, beyond every rung's bound "
                f"({float(s[r, h, d]):.3g}): no weighting of the keys gives it"
            )
    return ""


def _contract(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, reference: Evaluation) -> str:
    """A class-1 reason visible without any bound, '' when there is none."""
    got = out.to(torch.float64)
    ref = reference.out.to(got.device)
    empty = torch.isneginf(reference.lse.to(got.device))  # [n_q, H]: rows without a valid key
    bad = ~torch.isfinite(got) & torch.isfinite(ref)
    if bool(bad.any()):
        r, h, d = (int(x) for x in torch.nonzero(bad)[0].tolist())
        return f"out[{r}, {h}, {d}] = {float(got[r, h, d])} is not finite where the reference is ({float(ref[r, h, d]):.6g})"
    nonzero_empty = empty.unsqueeze(-1) & (got != 0)
    if bool(nonzero_empty.any()):
        r, h, d = (int(x) for x in torch.nonzero(nonzero_empty)[0].tolist())
        return f"row {r} has no valid key, so out must be exactly 0, but out[{r}, {h}, {d}] = {float(got[r, h, d]):.6g}"
    if problem.return_lse and isinstance(lse, torch.Tensor):
        got_lse = lse.to(torch.float64)
        wrong_empty = empty & ~torch.isneginf(got_lse)
        if bool(wrong_empty.any()):
            r, h = (int(x) for x in torch.nonzero(wrong_empty)[0].tolist())
            return f"row {r} has no valid key, so lse must be -inf, but lse[{r}, {h}] = {float(got_lse[r, h])}"
        not_finite = ~empty & ~torch.isfinite(got_lse)
        if bool(not_finite.any()):
            r, h = (int(x) for x in torch.nonzero(not_finite)[0].tolist())
            return f"lse[{r}, {h}] = {float(got_lse[r, h])} is not finite though the row has keys"
    return ""


def _passes(
    problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, profile: NumericsProfile, modes: tuple[Mode, ...]
) -> Judgement | None:
    """The judgement under `profile`, None where the relaxed profile promises no bound."""
    try:
        return judge(problem, out, lse, profile, modes=modes)
    except PreconditionError:
        return None


def triage(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, profile: NumericsProfile, judgement: Judgement) -> Triage:
    """Classify a failing judgement of `out`, `lse` under `profile` (see the module docstring).

    Re-judges only the failing comparison modes, once per cumulative rung until one admits the
    call, and once more for that rung alone."""
    failing: tuple[Mode, ...] = tuple(mode for mode, verdict in judgement.verdicts.items() if not verdict.ok)  # type: ignore[misc]
    reference = next(iter(judgement.evaluations.values()))
    if not isinstance(out, torch.Tensor) or out.shape != reference.out.shape:
        return Triage(CONTRACT, "the returned out does not have the contract's type and shape")
    reason = _contract(problem, out, lse, reference)
    if reason:
        return Triage(CONTRACT, reason)
    cumulative = profile
    loosest: Judgement | None = None
    for level, rung in enumerate(LADDER):
        cumulative = rung.relax(cumulative)
        result = _passes(problem, out, lse, cumulative, failing)
        if result is None:
            continue
        loosest = result
        if result.ok:
            alone = _passes(problem, out, lse, rung.relax(profile), failing) if level else result
            names = (rung.name,) if alone is not None and alone.ok else tuple(r.name for r in LADDER[: level + 1])
            return Triage(PROFILE, f"outside the declared profile {profile.name!r}, but passes if " + " and ".join(names), names)
    if loosest is not None:
        reason = _hull_violation(problem, out, next(iter(loosest.evaluations.values())))
        if reason:
            return Triage(CONTRACT, reason)
    worst = max((v for v in (loosest or judgement).verdicts.values()), key=lambda v: max(v.out_ratio, v.lse_ratio), default=None)
    ratio = "" if worst is None else f" (max err/bound {max(worst.out_ratio, worst.lse_ratio):.3g} even then)"
    return Triage(PRECISION, "outside every rung of the ladder, all of them together" + ratio)
