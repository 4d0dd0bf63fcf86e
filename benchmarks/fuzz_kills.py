"""How fast a fuzz campaign kills the mutant catalogue: one `python -m conformance fuzz` process per
mutant and variant, each stopping at its first failure; the examples and seconds until then.

    python -m benchmarks fuzz_kills --out DIR [--variant NAME=FUZZ_ARGS ...] [--only NAME,...]
                                    [--seconds S] [--jobs N] [--device cpu|cuda] [--hypothesis-profile P]

The mutants: every kernel of `conformance.mutation.score.catalogue_specs()` (the catalogued emulator
mutants, then the precision defects), or --only's. The variants: NAME and the extra arguments of
each of its fuzz processes (repeatable; default one variant, "this", with none), e.g. `--variant
"plain=--pack 1" --variant "pack64=--pack 64"`. Every process is `python -m conformance fuzz --kernel SPEC
--seconds S --hypothesis-profile P --max-failures 1 --shrink-seconds 1 --no-save --device D` plus
the variant's arguments, with its own state folder (DIR/state/VARIANT-MUTANT), one CPU thread
(OMP_NUM_THREADS=1), --jobs at a time (default: the number of CPUs). The ci profile (the default)
seeds its chunks 0, 1, 2, ...: a rerun draws the same examples. A mutant is killed when its
campaign found a failure within S seconds; the fuzz summary's `found` gives the property that
found it, the seconds from the campaign's start (after its set-up: imports and the kernel's
resolution are not in it) and the campaign's examples until then (every property, the failing
one included). Wall-clock seconds depend on the machine and its load; the examples do not.

Writes DIR/kills.json, DIR/kills.txt and DIR/kills.md (the table, also printed: per mutant and
variant, the property and examples / seconds to the kill; per variant, how many were killed and
the median examples and seconds over the killed ones) and each process's output as
DIR/logs/VARIANT-MUTANT.txt. One progress line per finished process on stderr.

Exit codes: 0 done (survivors are results, not errors); 1 a process wrote no summary (see its
log); 2 bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from benchmarks.campaign import fuzz_env
from benchmarks.common import parse, positive
from benchmarks.throughput import _variant

GRACE_S = 60  # past the budget: the failure's 1 s shrink, the report and the summary, then the process is killed


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated mutant names, got {text!r}")
    return names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks fuzz_kills", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True, help="results folder")
    p.add_argument(
        "--variant",
        type=_variant,
        action="append",
        metavar="NAME=FUZZ_ARGS",
        help="a variant: its name and its fuzz processes' extra arguments (repeatable; default: this=)",
    )
    p.add_argument("--only", type=_names, metavar="NAME,...", help="only these mutants (catalogue names)")
    p.add_argument("--seconds", type=positive, default=120, help="each campaign's budget (default 120)")
    p.add_argument("--jobs", type=positive, default=os.cpu_count() or 1, help="processes at a time (default: the number of CPUs)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="the campaigns' device (default cpu)")
    p.add_argument("--hypothesis-profile", default="ci", help="the campaigns' Hypothesis profile (default ci: fixed seeds)")
    return p


def command(spec: str, args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The fuzz command of one mutant and variant (module docstring)."""
    return [
        sys.executable, "-m", "conformance", "fuzz", "--kernel", spec, "--seconds", str(args.seconds),
        "--hypothesis-profile", args.hypothesis_profile, "--max-failures", "1", "--shrink-seconds", "1",
        "--no-save", "--device", args.device, *extra,
    ]  # fmt: skip


def run_one(spec: str, label: str, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """Run one campaign; its result: killed, property, examples, seconds (None when not killed),
    examples_run (all of the campaign's), error (why there is no summary, else "")."""
    state = args.out / "state" / label
    state.mkdir(parents=True, exist_ok=True)
    env = fuzz_env(state, state / "pending", "" if args.device == "cpu" else None)
    log = args.out / "logs" / f"{label}.txt"
    started = time.monotonic()
    with open(log, "wb") as out:
        try:
            subprocess.run(
                command(spec, args, extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=args.seconds + GRACE_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pass
    summaries = sorted(state.glob("runs/*/fuzz-summary.json"))
    result: dict[str, Any] = {
        "killed": False,
        "property": None,
        "examples": None,
        "seconds": None,
        "examples_run": None,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if not summaries:
        return {**result, "error": f"no fuzz summary (see {log})"}
    summary = json.loads(summaries[-1].read_text())
    found = summary.get("found") or []
    result["examples_run"] = summary.get("examples")
    if found:
        first = found[0]
        result.update(killed=True, property=first["property"], examples=first["examples"], seconds=first["seconds"])
    return {**result, "error": ""}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per variant: mutants, killed, survivors and errors (names: a campaign that ran without a
    failure; a process that wrote no summary, neither killed nor survived), median examples and
    seconds to a kill (over the killed ones)."""
    out = {}
    for variant, by_mutant in results.items():
        killed = [r for r in by_mutant.values() if r["killed"]]
        out[variant] = {
            "mutants": len(by_mutant),
            "killed": len(killed),
            "survivors": [name for name, r in by_mutant.items() if not r["killed"] and not r["error"]],
            "errors": [name for name, r in by_mutant.items() if r["error"]],
            "median_examples": _median([r["examples"] for r in killed]),
            "median_seconds": _median([r["seconds"] for r in killed]),
        }
    return out


def _cell(result: dict[str, Any]) -> str:
    if result.get("error"):
        return "error"
    if not result["killed"]:
        return f"survived ({result['examples_run']} ex)"
    return f"{result['examples']} ex, {result['seconds']:.1f} s ({result['property']})"


def table(results: dict[str, dict[str, dict[str, Any]]], summary: dict[str, dict[str, Any]], *, markdown: bool = False) -> str:
    """The per-mutant table, then one line per variant."""
    variants = list(results)
    mutants = list(next(iter(results.values()))) if results else []
    rows = [["mutant", *variants]] + [[name, *(_cell(results[v][name]) for v in variants)] for name in mutants]
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])] + ["| " + " | ".join(r) + " |" for r in rows[1:]]
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append("")
    for variant, s in summary.items():
        med_ex = "-" if s["median_examples"] is None else f"{s['median_examples']:g}"
        med_s = "-" if s["median_seconds"] is None else f"{s['median_seconds']:.1f}"
        survivors = f"; survived: {', '.join(s['survivors'])}" if s["survivors"] else ""
        errors = f"; no summary: {', '.join(s['errors'])}" if s["errors"] else ""
        lines.append(f"{variant}: killed {s['killed']}/{s['mutants']}; median to a kill {med_ex} examples, {med_s} s{survivors}{errors}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse(parser(), argv)
    if isinstance(args, int):
        return args
    from conformance.mutation.score import catalogue_specs

    specs = catalogue_specs()
    unknown = [name for name in args.only or [] if name not in specs]
    if unknown:
        print(f"fuzz_kills: unknown mutant(s) {', '.join(unknown)} (catalogue: {', '.join(specs)})", file=sys.stderr)
        return 2
    if args.only:
        specs = {name: specs[name] for name in args.only}
    variants = dict(args.variant or [("this", [])])
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    jobs = [(variant, name) for variant in variants for name in specs]
    results: dict[str, dict[str, dict[str, Any]]] = {variant: {} for variant in variants}
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            pool.submit(run_one, specs[name], f"{variant}-{name}", args, variants[variant]): (variant, name) for variant, name in jobs
        }
        for done, future in enumerate(as_completed(futures), 1):
            variant, name = futures[future]
            result = future.result()
            results[variant][name] = result
            print(
                f"[{time.monotonic() - started:6.0f} s] {done}/{len(jobs)} {variant} {name}: {_cell(result)}", file=sys.stderr, flush=True
            )
    results = {variant: {name: results[variant][name] for name in specs} for variant in variants}
    summary = summarise(results)
    settings = {
        "seconds": args.seconds,
        "device": args.device,
        "hypothesis_profile": args.hypothesis_profile,
        "jobs": args.jobs,
        "variants": variants,
    }
    (args.out / "kills.json").write_text(json.dumps({"settings": settings, "results": results, "summary": summary}, indent=1) + "\n")
    text = table(results, summary)
    (args.out / "kills.txt").write_text(text + "\n")
    (args.out / "kills.md").write_text(table(results, summary, markdown=True) + "\n")
    print(text)
    return 1 if any(r["error"] for by in results.values() for r in by.values()) else 0
