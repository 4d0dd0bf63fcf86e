"""Summarise conformance run folders: examples per second, distinct strategy features, err/bound.

Reads every `examples-*.jsonl` under the run folders given (as written by conformance.judging.harness:
one line per judged example with its recipe, outcome and out/lse err/bound ratios) and prints,
per folder, one JSON object:
- examples, outcomes (pass / fail / observed), wall span (first to last example, s) and
  examples per second over that span;
- features: the distinct values seen of each strategy feature (row-length classes, index
  pattern, invalid pattern, writer, corruptions, latent, q and rope distributions, softmax_scale
  kind, heads, has_invalid, return_lse, poison, out_pad / q_pad used) and their total count;
- err/bound: max and median of out_ratio and lse_ratio over passing examples.

Usage: python3 scripts/peers_features.py RUN_DIR [RUN_DIR ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

LENGTH_CLASSES = (
    (-(10**9), -1, "negative"),
    (0, 0, "0"),
    (1, 1, "1"),
    (2, 63, "2-63"),
    (64, 64, "64"),
    (65, 127, "65-127"),
    (128, 128, "128"),
    (129, 2047, "129-2047"),
    (2048, 2048, "2048"),
    (2049, 10**12, ">2048"),
)


def length_class(n: int) -> str:
    """The row-length class of a row of n keys (boundaries at the 64 / 128 / 2048 tile sizes)."""
    for low, high, name in LENGTH_CLASSES:
        if low <= n <= high:
            return name
    return "?"


def recipe_features(recipe: dict[str, Any]) -> dict[str, set[str]]:
    """feature name -> the values this recipe exercises."""
    feats: dict[str, set[str]] = {}
    feats["row_length_class"] = {length_class(int(x)) for x in recipe.get("row_lengths", [])}
    for key in (
        "index_pattern",
        "invalid_pattern",
        "writer",
        "latent",
        "q",
        "rope",
        "softmax_scale",
        "heads",
        "has_invalid",
        "return_lse",
        "poison",
    ):
        if key in recipe:
            feats[key] = {str(recipe[key])}
    feats["corruption"] = {str(c.get("kind", c)) if isinstance(c, dict) else str(c) for c in recipe.get("corruptions", [])} or {"none"}
    feats["out_pad"] = {"yes" if recipe.get("out_pad") else "no"}
    feats["q_pad"] = {"yes" if any(recipe.get("q_pad") or []) else "no"}
    return feats


def _finite(values: list[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(float(v))]


def summarise(run_dir: Path) -> dict[str, Any]:
    """The summary of one run folder (module docstring)."""
    lines: list[dict[str, Any]] = []
    for path in sorted(run_dir.glob("examples-*.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                continue
    outcomes = Counter(str(line.get("outcome")) for line in lines)
    features: dict[str, set[str]] = {}
    for line in lines:
        recipe = line.get("recipe")
        if isinstance(recipe, dict):
            for key, values in recipe_features(recipe).items():
                features.setdefault(key, set()).update(values)
    times = [float(line["time"]) for line in lines if isinstance(line.get("time"), (int, float))]
    span = (max(times) - min(times)) if len(times) > 1 else 0.0
    passing = [line for line in lines if line.get("outcome") == "pass"]
    out_r = _finite([line.get("out_ratio") for line in passing])
    lse_r = _finite([line.get("lse_ratio") for line in passing])
    kernels = sorted({str(line.get("kernel")) for line in lines})
    return {
        "run_dir": str(run_dir),
        "kernels": kernels,
        "examples": len(lines),
        "outcomes": dict(outcomes),
        "span_s": round(span, 1),
        "examples_per_s": round(len(lines) / span, 2) if span > 0 else None,
        "features": {k: sorted(v) for k, v in sorted(features.items())},
        "distinct_feature_values": sum(len(v) for v in features.values()),
        "out_ratio": {"max": max(out_r) if out_r else None, "median": statistics.median(out_r) if out_r else None, "n": len(out_r)},
        "lse_ratio": {"max": max(lse_r) if lse_r else None, "median": statistics.median(lse_r) if lse_r else None, "n": len(lse_r)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="also write the summaries as a JSON list")
    args = parser.parse_args(argv)
    summaries = [summarise(d) for d in args.run_dirs if d.is_dir()]
    for s in summaries:
        print(json.dumps(s, sort_keys=True))
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
