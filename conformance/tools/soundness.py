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
from conformance.judging.progress import StatusLine, rate_text
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
        fields.update(softmax_scale=scale, has_invalid=has_invalid, q_pad=[0, 0], return_lse=True)
        if recipe.cache_rows > 4096:  # a smaller cache; a paged shape of the old row count no longer fits it
            fields.update(cache_rows=4096, cache_shape=None)
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
    line = StatusLine(sys.stderr, every=10.0) if progress else None

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
        if line is not None:
            ratios = " ".join(f"{k}={v:.3g}" for k, v in stats["max_ratio"].items())
            text = rate_text("soundness", stats["problems"], problems, "problems", time.time() - started)
            line.show(f"{text}  violations {len(stats['violations'])}  max {ratios}")

    torch.manual_seed(seed)
    probe()
    stats["seconds"] = round(time.time() - started, 1)
    if line is not None:
        line.done()
    return stats


def _one_thread() -> None:
    """Worker start-up: one torch thread (the processes share the cores)."""
    torch.set_num_threads(1)


def run_parallel(
    kernel_name: str, problems: int, processes: int, *, device: str = "cpu", max_total_keys: int = 2048, progress: bool = True
) -> dict[str, Any]:
    """`problems` split over `processes` campaigns run at once in spawned processes (one torch
    thread each, seeds 0..processes-1), merged (`merge`); "seconds" is the wall time of the whole.
    The kernel is resolved here first, so a bad name or device raises TargetError before any
    process starts."""
    import concurrent.futures
    import multiprocessing

    build_target(kernel_name, device=device, check_only=True)
    per = -(-problems // processes)
    started = time.time()
    line = StatusLine(sys.stderr, every=10.0) if progress else None
    parts: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=processes, mp_context=context, initializer=_one_thread) as pool:
        futures = [
            pool.submit(run_campaign, kernel_name, per, device=device, max_total_keys=max_total_keys, seed=seed, progress=False)
            for seed in range(processes)
        ]
        for future in concurrent.futures.as_completed(futures):
            parts.append(future.result())
            if line is not None:
                done = sum(part["problems"] for part in parts)
                line.show(f"soundness: {len(parts)}/{processes} processes done, {done:,} problems", force=True)
    if line is not None:
        line.done()
    merged = merge(parts)
    merged["seconds"] = round(time.time() - started, 1)
    return merged


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
