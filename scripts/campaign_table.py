"""The campaign table from fuzz summaries (fuzz-summary.json of `python -m conformance fuzz`).

    python scripts/campaign_table.py SUMMARY.json [...] [--markdown]

Summaries of the same kernel on the same device are one campaign run as several concurrent
processes (each with its own seeds: scripts/h200/final_throughput.sh starts PROCS per kernel, and
CPU_PROCS more of `emulated` on the host's CPU) and are merged into one row:
kernel, device, processes, wall seconds (the longest process), examples (summed), examples/s
overall (the processes' rates summed: examples / wall time each, shrinking included),
examples/s per property (summed over the processes: each its examples / the seconds it spent
judging them), examples per CPU second (all examples / all the processes' CPU seconds, where the
summaries have them), distinct failures (summed: a failure two processes found counts twice),
and the strategy features hit / reachable over every headline family (a class counts as hit when
any process drew it). Then, per kernel, the classes no process drew.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

PROPS = ("differential", "long_rows", "preconditions")


def merge(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One kernel's summaries as one campaign (see the module docstring)."""
    per: dict[str, dict[str, float]] = defaultdict(lambda: {"examples": 0, "examples_per_s": 0.0})
    for data in summaries:
        for prop, values in data.get("per_property", {}).items():
            per[prop]["examples"] += values.get("examples", 0)
            per[prop]["examples_per_s"] += values.get("examples_per_s", 0.0)
    hit: dict[str, set[str]] = defaultdict(set)
    reachable: dict[str, set[str]] = defaultdict(set)
    for data in summaries:
        for family, values in data.get("features", {}).items():
            counts = values.get("counts", {})
            reachable[family].update(counts)
            hit[family].update(c for c, n in counts.items() if n)
    examples = sum(d.get("examples", 0) for d in summaries)
    cpu = [d["cpu_s"] for d in summaries if "cpu_s" in d]
    return {
        "kernel": summaries[0].get("kernel", "?"),
        "device": summaries[0].get("device", "?"),
        "processes": len(summaries),
        "seconds": max(d.get("seconds", 0) for d in summaries),
        "examples": examples,
        "examples_per_s": sum(d.get("examples_per_s", 0.0) for d in summaries),
        "examples_per_cpu_s": examples / sum(cpu) if len(cpu) == len(summaries) and sum(cpu) > 0 else None,
        "per_property": dict(per),
        "failures": sum(d.get("failures", 0) for d in summaries),
        "hit": sum(len(hit[f]) for f in reachable),
        "reachable": sum(len(reachable[f]) for f in reachable),
        "never_hit": {f: sorted(reachable[f] - hit[f]) for f in reachable if reachable[f] - hit[f]},
    }


def row(merged: dict[str, Any]) -> list[str]:
    """The table cells of one kernel's merged campaign."""
    per = merged["per_property"]
    rates = [f"{per[p]['examples_per_s']:.2f} ({per[p]['examples']})" if p in per else "-" for p in PROPS]
    cpu_rate = merged["examples_per_cpu_s"]
    return [
        merged["kernel"],
        merged["device"],
        str(merged["processes"]),
        f"{merged['seconds']:.0f}",
        str(merged["examples"]),
        f"{merged['examples_per_s']:.2f}",
        *rates,
        "-" if cpu_rate is None else f"{cpu_rate:.2f}",
        str(merged["failures"]),
        f"{merged['hit']}/{merged['reachable']}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summaries", nargs="+", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    header = [
        "kernel",
        "device",
        "procs",
        "wall s",
        "examples",
        "ex/s",
        *(f"{p} ex/s (n)" for p in PROPS),
        "ex per CPU s",
        "failures",
        "features hit",
    ]
    by_kernel: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for path in args.summaries:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            print(f"{path}: unreadable ({err})", file=sys.stderr)
            continue
        by_kernel[(str(data.get("kernel", "?")), str(data.get("device", "?")))].append(data)
    merged = [merge(group) for group in by_kernel.values()]
    rows = [row(m) for m in merged]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    for m in merged:
        never = "; ".join(f"{family}: {', '.join(classes)}" for family, classes in m["never_hit"].items())
        print(f"{m['kernel']} ({m['device']}): never hit by any process: {never or 'none'}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
