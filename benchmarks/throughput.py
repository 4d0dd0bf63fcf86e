"""Examples per second of fuzz campaigns in this tree and in another revision, side by side, with
the bare kernel's limit beside each row, where the time goes, and the shapes of the calls.

    python -m benchmarks throughput --out DIR --against REV_OR_DIR [--variant NAME=FUZZ_ARGS ...]
                                    [--kernels K,...] [--procs N] [--seconds S] [--stage-seconds S]
                                    [--mps] [--device cuda|cpu]

--against: a git revision (checked out with `git worktree add` into DIR/against-tree) or a folder
holding a checkout of it (a machine without the repository's .git: carry the checkout there).
The rows: "against" (that tree), then one per --variant of this tree: NAME and the extra
arguments of every `fuzz` process (default: "this" with none, and "lists" with
`--recipes-per-example 16`). For each row, in this order:
1. `python -m benchmarks campaign` run from its tree (its own code): every kernel of --kernels
   (default: emulated and each peer that runs here) with --procs processes each, --seconds
   each, the nightly profile, under MPS with --mps (fail-soft) -> DIR/<row>/campaign;
2. `python -m benchmarks campaign_stages --timers --ops` (and --sync on a GPU) of one emulated
   process for --stage-seconds -> DIR/<row>/stages (stages.txt, ops.txt).
Then, in this process (this tree's code, the other tree's records read as plain JSON):
3. the bare-kernel limit of each row: up to --limit-sample of the calls that campaign judged
   (recipes from its example records, drawn evenly over the run) materialised and called
   back to back in one process (conformance.judging.harness.call_kernel, synchronised; one
   torch thread on a CPU, as each campaign process; a call that raises counts its time), after
   --warmup calls: calls and recipes per second of one stream (DIR/limits.json; a packed call
   holds several recipes); the table's limit is recipes per second times the row's processes
   (one stream each: on a shared GPU an upper estimate);
4. the calls' shapes side by side (benchmarks.batch_shapes) -> DIR/shapes.txt.
The table (DIR/throughput.txt and .json, also printed): kernel, tree, processes, examples/s
(the campaign's, summed over its processes), distinct recipes judged per second (a recipe
judged twice counts once), examples per kernel call (from the summaries' per-property calls; "-"
for a tree whose summary does not count them), the bare-kernel limit, examples/s / limit, and
the ratio to the "against" row per kernel; then each row's stage table.

On one H200 (16 cores) the defaults (15 emulated processes, or 15 split over the kernels, 60 s
campaigns, 30 s stage runs, three rows) take about 7 minutes; every step prints its wall time.
Exit codes: 0 done, 1 a step failed (the others still run; its file says why), 2 bad options or
no usable --against tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import parse, positive

ROOT = Path(__file__).resolve().parents[1]
PEERS = ("torch-sdpa", "flashmla", "flashmla-prefill", "sglang-decode", "vllm-decode", "vllm-sparse")


def _log(text: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", flush=True)


def against_tree(spec: str, out: Path) -> Path:
    """The checkout of --against: the folder itself, or a worktree of the revision (ValueError: neither)."""
    folder = Path(spec)
    if folder.is_dir() and (folder / "benchmarks" / "campaign.py").exists():
        return folder.resolve()
    tree = (out / "against-tree").resolve()
    if tree.exists() and (tree / "benchmarks" / "campaign.py").exists():
        return tree
    try:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), spec], check=True, capture_output=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", b"") or b""
        raise ValueError(
            f"--against {spec!r}: not a checkout folder, and no git worktree of it ({detail.decode(errors='replace').strip() or err})"
        ) from None
    return tree


def available_kernels(device: str) -> list[str]:
    """emulated and each peer that runs on `device` here (conformance.judging.target.build_target)."""
    from conformance.judging.target import TargetError, build_target

    found = ["emulated"]
    for name in PEERS:
        try:
            build_target(name, device=device, check_only=True)
        except TargetError:
            continue
        found.append(name)
    return found


def run_campaign(tree: Path, out: Path, args: argparse.Namespace, kernels: list[str], fuzz_args: list[str]) -> int:
    """benchmarks campaign from `tree` (its code); its exit code (output in out/campaign.log)."""
    command = [sys.executable, "-m", "benchmarks", "campaign", "--kernels", ",".join(kernels), "--procs", str(args.procs)]
    command += ["--seconds", str(args.seconds), "--hypothesis-profile", "nightly", "--out", str(out / "campaign")]
    command += ["--device", args.device] + (["--mps"] if args.mps else []) + [f"--fuzz-arg={a}" for a in fuzz_args]
    return _run(command, tree, out / "campaign.log")


def run_stages(tree: Path, out: Path, args: argparse.Namespace, fuzz_args: list[str]) -> int:
    """benchmarks campaign_stages --timers --ops of one emulated process from `tree`."""
    command = [sys.executable, "-m", "benchmarks", "campaign_stages", "--out", str(out / "stages"), "--timers", "--ops"]
    command += ["--sync"] if args.device == "cuda" else []
    command += ["--", "--kernel", "emulated", "--device", args.device, "--seconds", str(args.stage_seconds)]
    command += ["--hypothesis-profile", "nightly", "--shrink-seconds", "20", *fuzz_args]
    env = {"CONFORMANCE_DIR": str(out / "stages" / "state"), "CONFORMANCE_PENDING_DIR": str(out / "stages" / "pending")}
    return _run(command, tree, out / "stages.log", env)


def _run(command: list[str], tree: Path, log: Path, env: dict[str, str] | None = None) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    # the tree's own packages first (python -m from its folder), then whatever the caller put on
    # the path (engines installed with pip --target, for instance)
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    with open(log, "wb") as handle:
        return subprocess.run(command, cwd=tree, stdout=handle, stderr=subprocess.STDOUT, env=environment, check=False).returncode


def sample_recipes(folder: Path, kernel: str, count: int) -> list[Any]:
    """Up to `count` recipes of the calls `kernel`'s campaign judged under `folder`, evenly over its records."""
    from strategies.recipe import Recipe

    recipes = []
    for path in sorted(folder.rglob(f"state/{kernel}-*/runs/*/examples-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("mode") != "float64":
                recipes.append(record["recipe"])
    step = max(1, len(recipes) // count) if count else 1
    return [Recipe.from_json_dict(r) for r in recipes[::step][:count]]


def bare_limit(kernel: str, recipes: list[Any], device: str, warmup: int) -> dict[str, Any]:
    """Calls per second of `kernel` alone on `recipes` (module docstring, step 3), and recipes per
    second (a packed call holds several: strategies.recipe, "Packs")."""
    import torch

    from conformance.judging.harness import call_kernel
    from conformance.judging.target import build_target
    from strategies.materialize import materialize
    from strategies.recipe import RecipeError

    target = build_target(kernel, device=device)
    if target.device.type == "cpu":
        torch.set_num_threads(1)  # as each campaign process (OMP_NUM_THREADS=1)
    problems, held = [], 0
    for recipe in recipes:
        try:
            problem = materialize(recipe, target.device)
        except RecipeError:
            continue
        if target.backend.supports(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale).ok:
            problems.append(problem)
            held += len(recipe.parts) or 1

    def sync() -> None:
        if target.device.type == "cuda":
            torch.cuda.synchronize(target.device)

    def call(problem: Any) -> bool:
        """The call; False where it raised (a violating recipe the kernel refuses: its time still counts)."""
        try:
            call_kernel(problem, target.backend)
        except Exception:  # noqa: BLE001 - the campaign judged this call too
            return False
        return True

    for problem in problems[:warmup]:
        call(problem)
    sync()
    seconds, raised = 0.0, 0
    for problem in problems:
        sync()
        start = time.perf_counter()
        raised += not call(problem)
        sync()
        seconds += time.perf_counter() - start
    rate = len(problems) / seconds if seconds > 0 else None
    recipes_rate = held / seconds if seconds > 0 else None
    return {
        "calls": len(problems),
        "recipes": held,
        "raised": raised,
        "seconds": seconds,
        "calls_per_s": rate,
        "recipes_per_s": recipes_rate,
    }


def _rates(folder: Path) -> dict[str, dict[str, Any]]:
    """kernel -> its merged campaign row (benchmarks.campaign's campaigns.json), with
    distinct_per_s: the distinct recipes its example records hold per second of the campaign (a
    packed call's record holds its parts)."""
    path = folder / "campaign" / "campaigns.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for row in rows:
        distinct = set()
        for records in sorted((folder / "campaign").rglob(f"state/{row['kernel']}-*/runs/*/examples-*.jsonl")):
            for line in records.read_text(encoding="utf-8").splitlines():
                recipe = json.loads(line)["recipe"]
                distinct.update(json.dumps(part, sort_keys=True) for part in recipe.get("parts") or [recipe])
        row["distinct_per_s"] = len(distinct) / row["seconds"] if row.get("seconds") else None
        out[row["kernel"]] = row
    return out


def table(names: list[str], rates: dict[str, dict[str, Any]], limits: dict[str, dict[str, Any]], kernels: list[str]) -> str:
    """The examples/s table with the bare-kernel limit beside each row (module docstring)."""
    columns = ("procs", 5), ("examples/s", 11), ("distinct/s", 11), ("ex/call", 8), ("bare limit/s", 13), ("of limit", 9), ("x against", 10)
    head = f"{'kernel':<18} {'row':<10} " + " ".join(f"{name:>{width}}" for name, width in columns)
    lines = [head]
    for kernel in kernels:
        base = rates.get(names[0], {}).get(kernel, {}).get("examples_per_s")
        for name in names:
            row = rates.get(name, {}).get(kernel)
            stream = limits.get(name, {}).get(kernel, {}).get("recipes_per_s")
            limit = stream * row["processes"] if stream and row else None  # one stream per process
            if row is None:
                lines.append(f"{kernel:<18} {name:<10} {'-':>5} {'no summary':>11}")
                continue
            rate = row["examples_per_s"]
            distinct = row.get("distinct_per_s")
            counted = [v for v in row.get("per_property", {}).values() if v.get("calls")]  # summaries that count their calls
            per_call = sum(v["examples"] for v in counted) / sum(v["calls"] for v in counted) if counted else None
            cells = [
                f"{distinct:.2f}" if distinct else "-",
                f"{per_call:.2f}" if per_call else "-",
                f"{limit:.1f}" if limit else "-",
                f"{rate / limit:.3f}" if limit else "-",
                f"{rate / base:.2f}" if base else "-",
            ]
            padded = " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, columns[2:], strict=True))
            lines.append(f"{kernel:<18} {name:<10} {row['processes']:>5} {rate:>11.2f} {padded}")
    return "\n".join(lines)


def _variant(text: str) -> tuple[str, list[str]]:
    name, sep, extra = text.partition("=")
    if not sep or not name or name == "against" or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAME=FUZZ_ARGS (NAME not 'against', no '/'), got {text!r}")
    return name, extra.split()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks throughput", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="results folder")
    p.add_argument("--against", required=True, metavar="REV_OR_DIR", help="the other tree: a git revision or a checkout folder")
    p.add_argument(
        "--variant",
        dest="variants",
        type=_variant,
        action="append",
        default=None,
        metavar="NAME=FUZZ_ARGS",
        help="a row of this tree: its name and its fuzz processes' extra arguments, space-separated (repeatable; "
        "default: this= and lists=--recipes-per-example 16)",
    )
    p.add_argument("--kernels", default=None, metavar="K,K,...", help="kernels (default: emulated and every peer that runs here)")
    p.add_argument(
        "--procs",
        type=positive,
        default=None,
        metavar="N",
        help="processes per kernel (default: 15 split over the kernels on cuda, 2 on cpu)",
    )
    p.add_argument("--seconds", type=positive, default=60, metavar="S", help="each campaign process's budget (default 60)")
    p.add_argument("--stage-seconds", type=positive, default=30, metavar="S", help="the stage profile's campaign (default 30)")
    p.add_argument(
        "--limit-sample", type=positive, default=200, metavar="N", help="calls per kernel timed for the bare limit (default 200)"
    )
    p.add_argument("--warmup", type=int, default=10, metavar="N", help="untimed calls before the bare limit's (default 10)")
    p.add_argument("--mps", action="store_true", help="the campaigns' GPU processes under NVIDIA MPS (benchmarks.mps, fail-soft)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="(default: cuda when there is one)")
    return p


def main(argv: list[str]) -> int:
    """The routine (module docstring); the exit code."""
    args = parse(parser(), argv)
    if isinstance(args, int):
        return args
    import torch

    started = time.monotonic()
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        other = against_tree(args.against, args.out)
    except ValueError as err:
        print(f"throughput: {err}", file=sys.stderr)
        return 2
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()] if args.kernels else available_kernels(args.device)
    if args.procs is None:
        args.procs = max(1, 15 // len(kernels)) if args.device == "cuda" else 2
    variants = args.variants or [("this", []), ("lists", ["--recipes-per-example", "16"])]
    rows: dict[str, tuple[Path, list[str]]] = {"against": (other, []), **{name: (ROOT, extra) for name, extra in variants}}
    trees = {name: tree for name, (tree, _) in rows.items()}
    _log(f"kernels {', '.join(kernels)}, {args.procs} processes each on {args.device}; against {other}", started)
    failed = False
    for name, (tree, extra) in rows.items():
        code = run_campaign(tree, args.out / name, args, kernels, extra)
        _log(f"{name}: campaign exit {code}", started)
        code_stages = run_stages(tree, args.out / name, args, extra)
        _log(f"{name}: stage profile exit {code_stages}", started)
        failed |= bool(code or code_stages)
    limits: dict[str, dict[str, Any]] = {}
    for name in trees:
        limits[name] = {}
        for kernel in kernels:
            recipes = sample_recipes(args.out / name / "campaign", kernel, args.limit_sample)
            try:
                limits[name][kernel] = bare_limit(kernel, recipes, args.device, args.warmup)
            except Exception as err:  # noqa: BLE001 - reported in the table's file
                limits[name][kernel] = {"error": f"{type(err).__name__}: {err}"}
                failed = True
        _log(f"{name}: bare-kernel limits {json.dumps(limits[name])}", started)
    (args.out / "limits.json").write_text(json.dumps(limits, indent=1) + "\n")
    shapes = _run(
        [sys.executable, "-m", "benchmarks", "batch_shapes", "--json", str(args.out / "shapes.json")]
        + [a for name in trees for a in ("--set", f"{name}={args.out / name / 'campaign'}")],
        ROOT,
        args.out / "shapes.txt",
    )
    failed |= bool(shapes)
    rates = {name: _rates(args.out / name) for name in trees}
    text = table(list(trees), rates, limits, kernels)
    for name in trees:
        stages = args.out / name / "stages" / "stages.txt"
        text += f"\n\n{name} ({trees[name]} {' '.join(rows[name][1])}): stage profile\n"
        text += stages.read_text() if stages.exists() else "(none: see stages.log)\n"
    (args.out / "throughput.txt").write_text(text + "\n")
    (args.out / "throughput.json").write_text(
        json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "rates": rates, "limits": limits}, indent=1) + "\n"
    )
    print(text)
    _log(f"done; shapes in {args.out / 'shapes.txt'}", started)
    return 1 if failed else 0
