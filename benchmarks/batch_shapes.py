"""The shapes of the kernel calls fuzz campaigns made, and their rate over time: from the example
records of run folders (conformance.judging.harness.record), side by side per set of folders.

    python -m benchmarks batch_shapes --set before=DIR[,DIR...] --set after=DIR[,DIR...] [--json PATH]

DIR is a run folder (holding examples-*.jsonl) or any folder above run folders (a campaign's
results folder: every examples-*.jsonl below it is read). Each kernel call counts once (a
differential call writes one record per comparison mode: the exact-steps one, or its contract
record, is counted; a precondition call writes one). Per set, for every property and for all of
them: the share of calls by query rows (the batch size the kernel sees), by total keys, by heads,
with has_invalid and with return_lse, and the calls' count. "calls/s after the ramp" is the calls
whose record was written from the first full-size call on (the largest key count any call of
the set reached / 2: the campaign's size ramp is over), per second of that window.

Shares are percentages of the set's calls; rows that are empty in every set are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import add_json, parse, write_json

N_Q_BINS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256), (257, 1 << 31))
KEY_BINS = ((0, 0), (1, 127), (128, 511), (512, 2047), (2048, 8191), (8192, 32767), (32768, 131071), (131072, 1 << 62))
HEAD_BINS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 15), (16, 16))


def _label(low: int, high: int) -> str:
    if low == high:
        return str(low)
    return f">={low}" if high >= 1 << 31 else f"{low}-{high}"


def _bin(value: int, bins: tuple[tuple[int, int], ...]) -> str:
    for low, high in bins:
        if low <= value <= high:
            return _label(low, high)
    return "other"


def read_calls(folders: list[Path]) -> list[dict[str, Any]]:
    """One dict per kernel call recorded under `folders`: property, n_q, keys, heads, has_invalid,
    return_lse, time (the record's)."""
    calls = []
    for folder in folders:
        paths = [folder] if folder.is_file() else sorted(folder.rglob("examples-*.jsonl"))
        for path in paths:
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("mode") == "float64":
                    continue  # the same call as its exact-steps record
                recipe = record.get("recipe") or {}
                lengths = recipe.get("row_lengths") or []
                calls.append(
                    {
                        "property": str(record.get("property", "?")).removeprefix("fuzz:"),
                        "n_q": int(recipe.get("n_q", len(lengths))),
                        "keys": sum(max(int(x), 0) for x in lengths),
                        "heads": int(recipe.get("heads", 0)),
                        "has_invalid": bool(recipe.get("has_invalid", False)),
                        "return_lse": bool(recipe.get("return_lse", True)),
                        "time": float(record.get("time", 0.0)),
                    }
                )
    return calls


def summarise(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Per property (and "all"): calls, shares by bin (percent) and the flags' shares; the rate after the ramp."""
    out: dict[str, Any] = {}
    groups: dict[str, list[dict[str, Any]]] = {"all": calls}
    for call in calls:
        groups.setdefault(call["property"], []).append(call)
    for name, group in groups.items():
        n = len(group) or 1
        shares = {}
        for field, bins in (("n_q", N_Q_BINS), ("keys", KEY_BINS), ("heads", HEAD_BINS)):
            counted = Counter(_bin(c[field], bins) for c in group)
            shares[field] = {label: 100.0 * counted[label] / n for label in (_label(lo, hi) for lo, hi in bins)}
        shares["flags"] = {
            "has_invalid": 100.0 * sum(c["has_invalid"] for c in group) / n,
            "return_lse": 100.0 * sum(c["return_lse"] for c in group) / n,
        }
        out[name] = {"calls": len(group), "shares": shares}
    out["all"]["calls_per_s_after_ramp"] = _rate_after_ramp(calls)
    return out


def _rate_after_ramp(calls: list[dict[str, Any]]) -> float | None:
    """Calls per second from the first call of at least half the largest key count on: the calls after
    it over the seconds to the last (None: too few)."""
    timed = sorted((c for c in calls if c["time"]), key=lambda c: c["time"])
    if len(timed) < 2:
        return None
    largest = max(c["keys"] for c in timed)
    start = next(c["time"] for c in timed if c["keys"] >= largest / 2)
    window = [c for c in timed if c["time"] >= start]
    span = window[-1]["time"] - start if window else 0.0
    return (len(window) - 1) / span if span > 0 else None


def render(sets: dict[str, dict[str, Any]]) -> str:
    """The side-by-side table (module docstring)."""
    names = list(sets)
    lines = []
    properties = sorted({p for s in sets.values() for p in s if p != "all"}) + ["all"]
    for prop in properties:
        counts = "  ".join(f"{name} {sets[name].get(prop, {}).get('calls', 0)}" for name in names)
        lines.append(f"{prop}: calls {counts}")
        for field in ("n_q", "keys", "heads", "flags"):
            labels: list[str] = []
            for s in sets.values():
                for label in s.get(prop, {}).get("shares", {}).get(field, {}):
                    if label not in labels:
                        labels.append(label)
            for label in labels:
                values = [sets[name].get(prop, {}).get("shares", {}).get(field, {}).get(label, 0.0) for name in names]
                if any(values):
                    cells = "  ".join(f"{v:6.2f}%" for v in values)
                    lines.append(f"  {field:<6} {label:>13}  {cells}")
    rates = "  ".join(
        f"{name} {rate:.2f}" if (rate := sets[name].get("all", {}).get("calls_per_s_after_ramp")) is not None else f"{name} -"
        for name in names
    )
    lines.append(f"calls/s after the ramp (per folder set, all processes' records together): {rates}")
    header = f"columns: {', '.join(names)} (share of the set's calls)"
    return "\n".join([header, *lines])


def _set(text: str) -> tuple[str, list[Path]]:
    name, sep, paths = text.partition("=")
    if not sep or not name or not paths:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR[,DIR...], got {text!r}")
    folders = [Path(p) for p in paths.split(",") if p]
    missing = [str(p) for p in folders if not p.exists()]
    if missing:
        raise argparse.ArgumentTypeError(f"no such folder: {', '.join(missing)}")
    return name, folders


def main(argv: list[str]) -> int:
    """The routine (module docstring); 0, or 2 for bad options or a set without calls."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks batch_shapes", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--set", dest="sets", type=_set, action="append", required=True, metavar="NAME=DIR[,DIR...]")
    add_json(parser)
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    sets = {}
    for name, folders in args.sets:
        calls = read_calls(folders)
        if not calls:
            print(f"batch_shapes: no example records under {', '.join(map(str, folders))}", file=sys.stderr)
            return 2
        sets[name] = summarise(calls)
    print(render(sets))
    write_json(args.json, sets)
    return 0
