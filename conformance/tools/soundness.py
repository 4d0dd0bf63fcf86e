"""Soundness campaign of a profile's bound: a kernel of that profile vs the oracle on many problems.

Hypothesis draws batches of recipes that share H, softmax_scale and has_invalid; the batch is
materialized problem by problem and concatenated into one call (rows, caches and index streams
side by side, indices offset), which is legitimate because rows are independent under the
contract. Each recipe counts as one problem. `target()` on the largest error/bound ratio makes
the search climb toward the worst case. Every call is judged in both comparison modes; a
violation (ratio > 1) is kept with the recipe owning the row. The summary records the count,
the violations and the largest ratio per output and mode with the recipe that reached it.

    python -m conformance soundness --problems 100000 --kernel emulated --json soundness.json

(the command line: conformance.cli.soundness)
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis import target as hypothesis_target

from conformance.judging.harness import call_kernel, judge
from conformance.judging.target import build_target
from oracle.bound import MODES
from oracle.rows import row_bounds
from strategies.hypothesis_recipes import recipes
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe

BATCH = 32


@st.composite
def recipe_batches(draw: st.DrawFn, *, size: int, max_total_keys: int) -> list[Recipe]:
    """`size` recipes sharing H, softmax_scale and has_invalid (no padding, lse returned)."""
    heads = draw(st.integers(1, 16), label="heads")
    scale = draw(st.sampled_from(("default", "peaked", "flat")), label="softmax_scale")
    has_invalid = draw(st.booleans(), label="has_invalid")
    batch = []
    for _ in range(size):
        recipe = draw(recipes(max_n_q=4, max_row=2048, max_total_keys=max_total_keys, heads=(heads,), allow_out=False))
        fields = recipe.to_json_dict()
        fields.update(softmax_scale=scale, has_invalid=has_invalid, q_pad=[0, 0], return_lse=True, cache_rows=min(recipe.cache_rows, 4096))
        if not has_invalid:
            fields.update(invalid_pattern="none", invalid_permille=0)
        batch.append(Recipe.from_json_dict(fields))
    return batch


def combine(problems: list[Problem]) -> tuple[Problem, torch.Tensor]:
    """One call holding every problem's rows side by side (each row's slice copied into a fresh
    stream, negative lengths as the empty rows they mean, indices offset into the concatenated
    cache); also the owning problem of each row."""
    caches, streams, lengths, owners = [], [], [], []
    row_offset = 0
    for number, problem in enumerate(problems):
        start, length = row_bounds(problem.indptr)
        rows = torch.repeat_interleave(torch.arange(length.numel(), device=start.device), length)
        within = torch.arange(int(length.sum()), device=start.device) - torch.repeat_interleave(torch.cumsum(length, 0) - length, length)
        entries = problem.indices.to(torch.int64)[start[rows] + within]
        streams.append(torch.where(entries >= 0, entries + row_offset, entries))
        lengths.append(length)
        owners.append(torch.full((problem.q.shape[0],), number, dtype=torch.int64))
        caches.append(problem.kv_cache)
        row_offset += problem.kv_cache.shape[0]
    all_lengths = torch.cat(lengths)
    indptr = torch.cat((torch.zeros(1, dtype=torch.int64, device=all_lengths.device), torch.cumsum(all_lengths, 0)))
    combined = Problem(
        recipe=problems[0].recipe,
        q=torch.cat([p.q.contiguous() for p in problems]),
        kv_cache=torch.cat(caches),
        indices=torch.cat(streams).to(torch.int32),
        indptr=indptr.to(torch.int32),
        softmax_scale=problems[0].softmax_scale,
        has_invalid=problems[0].has_invalid,
        return_lse=True,
        out=None,
        referenced_rows=torch.zeros(0, dtype=torch.int64),
        poison_rows=torch.zeros(0, dtype=torch.int64),
    )
    return combined, torch.cat(owners)


def run_campaign(
    kernel_name: str, problems: int, *, device: str = "cpu", max_total_keys: int = 2048, seed: int = 0, progress: bool = True
) -> dict[str, Any]:
    """Judge `problems` Hypothesis-drawn problems; return the summary (see module docstring)."""
    target = build_target(kernel_name, device=device)
    backend, profile = target.backend, target.profile
    stats: dict[str, Any] = {
        "kernel": kernel_name,
        "profile": profile.name,
        "device": device,
        "problems": 0,
        "violations": [],
        "max_ratio": {f"{o}/{m}": 0.0 for o in ("out", "lse") for m in MODES},
        "worst_recipe": {},
    }
    started = time.time()

    @settings(
        max_examples=max(1, problems // BATCH),
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=("generate", "target"),
    )
    @given(batch=recipe_batches(size=BATCH, max_total_keys=max_total_keys))
    def probe(batch):  # type: ignore[no-untyped-def]
        problem, owners = combine([materialize(recipe, device) for recipe in batch])
        out, lse = call_kernel(problem, backend)
        stats["problems"] += len(batch)
        for mode, verdict in judge(problem, out, lse, profile).verdicts.items():
            for name, value in (("out", verdict.out_ratio), ("lse", verdict.lse_ratio)):
                key = f"{name}/{mode}"
                if math.isfinite(value):
                    hypothesis_target(value, label=key)
                if value > stats["max_ratio"][key]:
                    stats["max_ratio"][key] = value
                    row = verdict.worst.get("row", 0) if name == "out" else 0
                    stats["worst_recipe"][key] = batch[int(owners[row])].to_json_dict()
            if not verdict.ok:
                row = verdict.worst.get("row", 0)
                stats["violations"].append({"mode": mode, "recipe": batch[int(owners[row])].to_json_dict(), "message": verdict.message()})
        if progress:
            rate = stats["problems"] / (time.time() - started)
            ratios = " ".join(f"{k}={v:.3g}" for k, v in stats["max_ratio"].items())
            print(
                f"\r{stats['problems']}/{problems} problems, {rate:.1f}/s, violations {len(stats['violations'])}, max {ratios}",
                file=sys.stderr,
                end="",
                flush=True,
            )

    torch.manual_seed(seed)
    probe()
    stats["seconds"] = round(time.time() - started, 1)
    if progress:
        print(file=sys.stderr)
    return stats


def merge(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary of several campaigns (e.g. parallel processes): counts add, maxima combine."""
    merged: dict[str, Any] = {
        "kernel": summaries[0]["kernel"],
        "profile": summaries[0]["profile"],
        "device": summaries[0]["device"],
        "problems": sum(s["problems"] for s in summaries),
        "violations": [v for s in summaries for v in s["violations"]],
        "max_ratio": {},
        "worst_recipe": {},
        "seconds": max(s.get("seconds", 0.0) for s in summaries),
        "campaigns": len(summaries),
    }
    for key in summaries[0]["max_ratio"]:
        best = max(summaries, key=lambda s: s["max_ratio"][key])
        merged["max_ratio"][key] = best["max_ratio"][key]
        if key in best["worst_recipe"]:
            merged["worst_recipe"][key] = best["worst_recipe"][key]
    return merged
