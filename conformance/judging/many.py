"""Several kernel calls judged at once: one reference-and-bound pass (oracle.batch.evaluate_many)
and one comparison pass over every call's outputs, with the verdicts conformance.judging.harness
.judge gives each call alone.

`judge_many(problems, outputs, profile)` returns per call a Judgement whose verdicts all pass,
with the numbers judge() reports for it (largest err / bound of out and lse per mode, the worst
out element), or None where the call must be judged alone: a verdict that fails, a comparison
that needs judge()'s own reading (non-finite values where the reference is finite, an all-zero
output, an lse of an empty row, an element beyond its bound), or a call whose reference breaks
a precondition. None is never a verdict: the caller judges that call with judge(), whose
message, triage and finding are then exactly today's.

The comparison is elementwise over every call's outputs concatenated (heads as rows of one
[N, 512] tensor per mode), then reduced per (row, head) on the device, read back once, and
reduced per call on the host: maxima, counts and the first worst element are the same numbers
as judge()'s per-call reductions (a maximum is exact in any order; NaN propagates as in
torch.max; the worst element is the first largest in the call's (row, head, dim) order, as
torch.argmax's).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from conformance.judging.harness import Judgement, Verdict, _ratio, check_types
from kernel.record import LATENT_DIM
from oracle.batch import Call, evaluate_many
from oracle.bound import MODES, Evaluation, Mode
from oracle.profiles import NumericsProfile
from strategies.materialize import Problem

# per (row, head) fields of the out comparison, read back for every call
_OUT_FIELDS = ("bad", "all_zero", "zero_outside", "ratio", "over", "worst_value", "worst_dim", "got", "ref", "bound")
_LSE_FIELDS = ("wrong_empty", "not_finite", "lse_ratio", "lse_over")


def judge_many(
    problems: Sequence[Problem],
    outputs: Sequence[tuple[torch.Tensor, torch.Tensor | None]],
    profile: NumericsProfile,
    *,
    modes: tuple[Mode, ...] = MODES,
) -> list[Judgement | None]:
    """Per call (problems[i] with its kernel outputs outputs[i] = (out, lse), types checked by
    the caller: check_types), a passing Judgement or None (module docstring). Every problem on
    one device."""
    if len(problems) != len(outputs):
        raise ValueError(f"judge_many: {len(problems)} problems but {len(outputs)} outputs")
    if not problems:
        return []
    for problem, (out, lse) in zip(problems, outputs, strict=True):
        if check_types(problem, out, lse):
            raise ValueError("judge_many takes outputs whose types check_types accepts")
    ordered = tuple(sorted(modes, key=lambda m: m != "exact-steps"))
    calls = [Call(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, p.has_invalid) for p in problems]
    outcomes = evaluate_many(calls, profile=profile, modes=modes)
    judged = [i for i, o in enumerate(outcomes) if isinstance(o, dict)]
    results: list[Judgement | None] = [None] * len(problems)
    if not judged:
        return results
    evaluations = {i: outcomes[i] for i in judged}
    verdicts = _compare(
        [problems[i] for i in judged],
        [outputs[i] for i in judged],
        [[evaluations[i][m] for m in ordered] for i in judged],  # type: ignore[index]
        ordered,
    )
    for i, call_verdicts in zip(judged, verdicts, strict=True):
        if call_verdicts is not None:
            results[i] = Judgement(
                verdicts=dict(zip(ordered, call_verdicts, strict=True)),
                evaluations={m: evaluations[i][m] for m in ordered},  # type: ignore[index]
            )
    return results


def _flat(t: torch.Tensor, width: int) -> torch.Tensor:
    """t [n, H, width] or [n, H] as rows [n * H, width] (or [n * H]); a copy only for strided t."""
    return t.reshape(-1, width) if width else t.reshape(-1)


def _compare(
    problems: list[Problem],
    outputs: list[tuple[torch.Tensor, torch.Tensor | None]],
    evaluations: list[list[Evaluation]],
    modes: tuple[Mode, ...],
) -> list[list[Verdict] | None]:
    """Per call, its passing verdicts (one per mode, in `modes` order) or None (module docstring)."""
    sizes = [int(p.q.shape[0]) * int(p.q.shape[1]) for p in problems]
    got = torch.cat([_flat(out, LATENT_DIM) for out, _ in outputs]).to(torch.float64)
    not_finite = ~torch.isfinite(got)
    zero_rows = (got == 0).all(dim=1)
    with_lse = [i for i, (p, (_, lse)) in enumerate(zip(problems, outputs, strict=True)) if p.return_lse and lse is not None]
    got_lse = torch.cat([_flat(outputs[i][1], 0) for i in with_lse]).to(torch.float64) if with_lse else None  # type: ignore[arg-type]
    fields: list[torch.Tensor] = []
    for m in range(len(modes)):
        ref = torch.cat([_flat(e[m].out, LATENT_DIM) for e in evaluations]).to(got.device)
        bound = torch.cat([_flat(e[m].out_bound, LATENT_DIM) for e in evaluations]).to(got.device)
        bad = torch.isfinite(ref).logical_and_(not_finite).sum(dim=1)
        zero_outside = ((ref != 0) & (ref.abs() > bound)).any(dim=1)
        err = torch.sub(got, ref).abs_().nan_to_num_(nan=float("inf"))
        ratio = _ratio(err, bound)
        over = (ratio > 1).sum(dim=1)
        ranked = ratio.nan_to_num(nan=float("inf"))
        worst_dim = torch.argmax(ranked, dim=1, keepdim=True)
        columns = [
            bad,
            zero_rows,
            zero_outside,
            ratio.amax(dim=1),
            over,
            torch.gather(ranked, 1, worst_dim).squeeze(1),
            worst_dim.squeeze(1),
            torch.gather(got, 1, worst_dim).squeeze(1),
            torch.gather(ref, 1, worst_dim).squeeze(1),
            torch.gather(bound, 1, worst_dim).squeeze(1),
        ]
        fields.append(torch.stack([c.to(torch.float64) for c in columns]))
        if got_lse is not None:
            ref_lse = torch.cat([_flat(evaluations[i][m].lse, 0) for i in with_lse]).to(got.device)
            lse_bound = torch.cat([_flat(evaluations[i][m].lse_bound, 0) for i in with_lse]).to(got.device)
            empty = torch.isneginf(ref_lse)
            wrong_empty = empty & ~torch.isneginf(got_lse)
            lse_not_finite = ~empty & ~torch.isfinite(got_lse)
            lse_err = torch.where(empty, 0.0, (got_lse - ref_lse).abs()).nan_to_num_(nan=float("inf"))
            lse_ratio = _ratio(lse_err, torch.where(empty, 1.0, lse_bound))
            fields.append(torch.stack([c.to(torch.float64) for c in (wrong_empty, lse_not_finite, lse_ratio, lse_ratio > 1)]))
    host = torch.cat([f.reshape(-1) for f in fields]).cpu().numpy()  # the one host read
    n_rows, n_lse = got.shape[0], got_lse.numel() if got_lse is not None else 0
    per_mode: list[tuple[np.ndarray, np.ndarray | None]] = []
    at = 0
    for _ in modes:
        out_part = host[at : at + len(_OUT_FIELDS) * n_rows].reshape(len(_OUT_FIELDS), n_rows)
        at += len(_OUT_FIELDS) * n_rows
        lse_part = None
        if got_lse is not None:
            lse_part = host[at : at + len(_LSE_FIELDS) * n_lse].reshape(len(_LSE_FIELDS), n_lse)
            at += len(_LSE_FIELDS) * n_lse
        per_mode.append((out_part, lse_part))

    lse_offsets = {}
    at = 0
    for i in with_lse:
        lse_offsets[i] = at
        at += sizes[i]
    verdicts: list[list[Verdict] | None] = []
    start = 0
    for i, (problem, size) in enumerate(zip(problems, sizes, strict=True)):
        call: list[Verdict] | None = []
        for mode, (out_part, lse_part) in zip(modes, per_mode, strict=True):
            lse_rows = None
            if lse_part is not None and i in lse_offsets:
                lse_rows = lse_part[:, lse_offsets[i] : lse_offsets[i] + size]
            verdict = _verdict(out_part[:, start : start + size], lse_rows, mode, problem)
            if verdict is None:
                call = None
                break
            call.append(verdict)
        verdicts.append(call)
        start += size
    return verdicts


def _verdict(rows: np.ndarray, lse: np.ndarray | None, mode: str, problem: Problem) -> Verdict | None:
    """One call's passing verdict in `mode` from its per-(row, head) fields, or None where
    judge() must read it (module docstring)."""
    v = dict(zip(_OUT_FIELDS, rows, strict=True))
    numel = rows.shape[1] * LATENT_DIM
    all_zero = bool(v["all_zero"].all())  # (got == 0).all() of the whole output (True when empty)
    if v["bad"].any() or v["over"].any() or (all_zero and v["zero_outside"].any()):
        return None
    verdict = Verdict()
    if numel:
        ratio = v["ratio"]
        verdict.out_ratio = float("nan") if np.isnan(ratio).any() else float(ratio.max())
        first = int(np.argmax(v["worst_value"]))  # the first (row, head) holding the largest ratio
        row, head = divmod(first, int(problem.q.shape[1]))
        verdict.worst = {
            "row": row,
            "head": head,
            "dim": int(v["worst_dim"][first]),
            "mode": mode,
            "out": float(v["got"][first]),
            "ref": float(v["ref"][first]),
            "bound": float(v["bound"][first]),
        }
    if lse is not None:
        w = dict(zip(_LSE_FIELDS, lse, strict=True))
        if w["wrong_empty"].any() or w["not_finite"].any() or w["lse_over"].any():
            return None
        ratio = w["lse_ratio"]
        if numel:
            verdict.lse_ratio = float("nan") if np.isnan(ratio).any() else float(ratio.max())
    return verdict
