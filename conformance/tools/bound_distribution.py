"""err/bound distributions of a kernel against its profile's a-priori bound, and each term's share.

Problems are drawn from a seeded `random.Random` (not Hypothesis), so a run is reproducible: row
lengths up to `max_row` keys, 1..4 query rows, 1/4/16 heads, every latent / rope / q distribution
and softmax scale of the recipe vocabulary that meets the gfx950 preconditions (pow2 writers).
For each problem the kernel's |out - ref| / out_bound (per element, elements with a nonzero
bound) and |lse - ref| / lse_bound (per (row, head)) are collected in both comparison modes;
the summary gives n, median, p99, max per output and mode, and violations (ratio > 1).

Term shares (`shares` problems): for problems spread over the run, the bound is recomputed with
one source of error switched off at a time (QK accumulation, softmax stage, exp, P rounding,
o/l accumulation); a term's share is the bound's median relative drop. The output rounding is
what remains. Units: ratios are dimensionless; lse in natural log.

The command line: `python -m conformance soundness --distribution` (conformance.cli.soundness).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Any

import torch

from conformance.judging.harness import call_kernel
from conformance.judging.target import Target
from oracle.accumulation import Accumulation
from oracle.bound import MODES, evaluate, evaluate_modes
from oracle.rows import PreconditionError
from strategies.materialize import materialize
from strategies.recipe import Recipe

LATENTS = ("normal", "heavy", "outliers", "zero_blocks", "tiny_blocks", "max57344", "large")
ROPES = ("normal", "large", "tiny", "zero")
QS = ("normal", "large", "tiny", "zero_blocks", "tiny_blocks")
SCALES = ("default", "peaked", "flat")


def draw_recipe(rng: random.Random, max_row: int) -> Recipe:
    """One random recipe that meets the gfx950 preconditions."""
    n_q = rng.randint(1, 4)
    lengths = tuple(rng.choice((rng.randint(1, 16), rng.randint(1, max_row), max_row)) for _ in range(n_q))
    return Recipe(
        seed=rng.randrange(2**31),
        n_q=n_q,
        heads=rng.choice((1, 4, 16)),
        row_lengths=lengths,
        cache_rows=max(64, 2 * sum(lengths)),
        latent=rng.choice(LATENTS),
        rope=rng.choice(ROPES),
        q=rng.choice(QS),
        softmax_scale=rng.choice(SCALES),
        writer=rng.choice(("pow2", "pow2-floor")),
        index_pattern=rng.choice(("uniform", "clustered", "duplicates", "sorted")),
    )


def _ratios(kernel_out: torch.Tensor, kernel_lse: torch.Tensor | None, ev) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    err = (kernel_out.double().cpu() - ev.out.cpu()).abs()
    bound = ev.out_bound.cpu()
    mask = bound > 0
    out_r = torch.where(mask, err / torch.where(mask, bound, 1.0), torch.where(err > 0, torch.inf, 0.0))[mask | (err > 0)]
    if kernel_lse is None:
        return out_r, torch.empty(0, dtype=torch.float64)
    finite = torch.isfinite(ev.lse.cpu())
    lerr = (kernel_lse.double().cpu() - ev.lse.cpu()).abs()[finite]
    return out_r, lerr / ev.lse_bound.cpu()[finite]


def _summary(values: list[torch.Tensor]) -> dict[str, float]:
    if not values:
        return {}
    allv = torch.cat(values).double()
    if allv.numel() == 0:
        return {}
    srt = allv.sort().values
    return {
        "n": int(srt.numel()),
        "median": float(srt[srt.numel() // 2]),
        "p99": float(srt[min(srt.numel() - 1, int(0.99 * srt.numel()))]),
        "max": float(srt[-1]),
        "violations": int((srt > 1).sum()),
    }


def _term_profiles(profile):  # type: ignore[no-untyped-def]
    """(term, profile with that term switched off) pairs for the shares."""
    exact_acc = Accumulation(format="f64", order="sequential", rounding="nearest", terms_per_instruction=1)
    r = dataclasses.replace
    return [
        ("qk accumulation", r(profile, qk=exact_acc)),
        ("softmax stage (score roundings, subtractions)", r(profile, score_roundings=0, arith_u=2.0**-53)),
        ("exp / exp2", r(profile, exp_rel_err=0.0)),
        ("P rounding before PV", r(profile, p_format="exact")),
        ("o and l accumulation", r(profile, pv=exact_acc, l=exact_acc)),
    ]


def shares(problem, profile, mode: str) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    """Median relative drop of out_bound and lse_bound with each term switched off."""
    args = problem.args
    base = evaluate(*args, profile=profile, mode=mode, has_invalid=problem.has_invalid)
    out: dict[str, dict[str, float]] = {}
    for term, off in _term_profiles(profile):
        ev = evaluate(*args, profile=off, mode=mode, has_invalid=problem.has_invalid)
        res = {}
        for name, b0, b1 in (("out", base.out_bound, ev.out_bound), ("lse", base.lse_bound, ev.lse_bound)):
            mask = b0 > 0
            if bool(mask.any()):
                res[name] = float(((b0 - b1)[mask] / b0[mask]).median())
        out[term] = res
    return out


def distribution(target: Target, problems: int, *, max_row: int = 1024, seed: int = 0, shares_of: int = 5) -> dict[str, Any]:
    """Run `problems` seeded problems through `target`'s kernel; the summary (module docstring):
    kernel, profile, device, counts (skipped_preconditions: the bound refused the problem;
    unsupported: the kernel's `supports` refused it), ratios per output and mode, and
    term_shares_median when `shares_of` > 0."""
    kernel, profile, device = target.backend, target.profile, str(target.device)
    unsupported = 0
    rng = random.Random(seed)
    ratios: dict[str, list[torch.Tensor]] = {f"{q}/{m}": [] for q in ("out", "lse") for m in MODES}
    skipped, start, judged = 0, time.monotonic(), []
    for _ in range(problems):
        recipe = draw_recipe(rng, max_row)
        problem = materialize(recipe, device)
        if hasattr(kernel, "supports") and not kernel.supports(
            *problem.args,
            **problem.options,
        ):
            unsupported += 1
            continue
        try:
            evs = evaluate_modes(
                *problem.args,
                profile=profile,
                has_invalid=problem.has_invalid,
            )
        except PreconditionError:
            skipped += 1
            continue
        out, lse = call_kernel(problem, kernel)
        for mode, ev in evs.items():
            o, l_ = _ratios(out, lse, ev)
            ratios[f"out/{mode}"].append(o)
            ratios[f"lse/{mode}"].append(l_)
        judged.append(problem)
    summary: dict[str, Any] = {
        "kernel": target.name,
        "profile": profile.name,
        "device": device,
        "problems": problems,
        "skipped_preconditions": skipped,
        "unsupported": unsupported,
        "seed": seed,
        "max_row": max_row,
        "wall_s": round(time.monotonic() - start, 1),
        "ratios": {k: _summary(v) for k, v in ratios.items()},
    }
    if shares_of and judged:
        picked = judged[:: max(1, len(judged) // shares_of)][:shares_of]
        per_term: dict[str, dict[str, list[float]]] = {}
        for problem in picked:
            for term, res in shares(problem, profile, "exact-steps").items():
                for q, v in res.items():
                    per_term.setdefault(term, {}).setdefault(q, []).append(v)
        summary["term_shares_median"] = {t: {q: statistics.median(v) for q, v in d.items()} for t, d in per_term.items()}
    return summary
