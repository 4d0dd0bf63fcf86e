"""Cost of oracle.preconditions.check_call per call: aten ops, host reads and ms, on typical
calls of the `preconditions` fuzz property.

Problems: the first --examples recipes of strategies.hypothesis_recipes.violating_recipes (as the
fuzz campaign draws them for the property: allow_out_of_range, at most 4096 keys; derandomized,
so the same list every run) plus one valid recipe, materialised on --device. For each
implementation (this tree's, and with --against REV the module as committed at git revision REV:
benchmarks.revisions), per problem: ops (aten ops dispatched, conformance.tools.op_count),
host reads (ops that read device data back: scalar reads, nonzero, unique, tolist, ...) and the
median ms of --iters calls (conformance.tools.bench.call_ms: CUDA events on a GPU, process CPU
time on the CPU, with one torch thread unless --threads). Prints one line per implementation
(medians over the problems, and the valid call's own numbers) and, with --json PATH, writes
every number. Also checks that both implementations return the same findings on every problem
(exit 1 if not).

    python -m benchmarks preconditions [--device cuda] [--against REV] [--examples 40] [--iters 30] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import add_against, add_device, add_json, parse, positive, resolve_device, write_json
from benchmarks.revisions import module_at
from conformance.tools.bench import call_ms
from conformance.tools.op_count import count_ops

VALID = {"seed": 5, "n_q": 6, "heads": 4, "row_lengths": [300, 0, 128, 700, 5, 40], "cache_rows": 2000}


def _recipes(n: int) -> list[Any]:
    from hypothesis import HealthCheck, Phase, given, settings

    from strategies.hypothesis_recipes import violating_recipes
    from strategies.recipe import Recipe

    got: list[Any] = []

    quiet = list(HealthCheck)

    @settings(max_examples=n, derandomize=True, database=None, phases=[Phase.generate], suppress_health_check=quiet, deadline=None)
    @given(violating_recipes(allow_out_of_range=True, max_total_keys=4096))
    def collect(recipe: Any) -> None:
        got.append(recipe)

    collect()
    return [Recipe.from_json_dict(VALID), *got[:n]]


def main(argv: list[str]) -> int:
    """The routine (module docstring); 1 when the implementations' findings differ."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks preconditions", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_device(parser)
    add_against(parser, "oracle/preconditions.py")
    parser.add_argument("--examples", type=positive, default=40, metavar="N", help="violating recipes (default 40)")
    parser.add_argument("--iters", type=positive, default=30, metavar="N", help="timed calls per problem (default 30)")
    parser.add_argument("--threads", type=positive, default=1, help="torch CPU threads (on the CPU; default 1)")
    add_json(parser)
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    device = resolve_device(args)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)  # process time counts every thread's spinning too

    from oracle import preconditions as new
    from strategies.materialize import materialize

    impls: dict[str, ModuleType] = {"new": new}
    if args.against:
        try:
            impls = {"old": module_at(args.against, "oracle/preconditions.py", "preconditions_old"), "new": new}
        except (subprocess.SubprocessError, OSError) as err:  # e.g. a shallow clone without that revision
            print(f"--against {args.against}: not available here ({err}); timing this tree only", file=sys.stderr)
    problems = [materialize(r, device) for r in _recipes(args.examples)]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in impls}
    same = True
    for i, p in enumerate(problems):
        results = {}
        for name, module in impls.items():

            def call(m: ModuleType = module) -> list[Any]:
                return m.check_call(p.q, p.kv_cache, p.indices, p.indptr, has_invalid=p.has_invalid, softmax_scale=p.softmax_scale)

            results[name] = [f.to_dict() for f in call()]
            counted = count_ops(call)
            for _ in range(2):
                call()
            ms = statistics.median(call_ms(call, device) for _ in range(args.iters))
            kinds = sorted({f["kind"] for f in results[name]})
            rows[name].append({"problem": i, "ops": counted.total, "host_reads": sum(counted.syncs.values()), "ms": ms, "kinds": kinds})
        if len({json.dumps(v, sort_keys=True) for v in results.values()}) > 1:
            same = False
            print(f"problem {i}: findings differ between implementations", file=sys.stderr)
    summary = {}
    for name, rs in rows.items():
        summary[name] = {
            "valid_call": {k: rs[0][k] for k in ("ops", "host_reads", "ms")},
            "median_violating": {k: statistics.median(r[k] for r in rs[1:]) for k in ("ops", "host_reads", "ms")} if len(rs) > 1 else None,
            "max_host_reads": max(r["host_reads"] for r in rs),
        }
        v, m = summary[name]["valid_call"], summary[name]["median_violating"]
        print(
            f"{name:4s} on {device.type}: valid call {v['ops']} ops, {v['host_reads']} host reads, {v['ms']:.3f} ms; "
            + (
                f"violating calls (median of {len(rs) - 1}) {m['ops']:.0f} ops, {m['host_reads']:.0f} host reads, {m['ms']:.3f} ms; "
                if m
                else ""
            )
            + f"max host reads {summary[name]['max_host_reads']}"
        )
    print("identical findings" if same else "FINDINGS DIFFER")
    write_json(args.json, {"device": str(device), "summary": summary, "rows": rows, "identical": same})
    return 0 if same else 1
