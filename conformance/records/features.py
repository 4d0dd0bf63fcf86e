"""What the judged examples of run folders exercised: rates, outcomes, strategy features, err/bound.

Reads every `examples-*.jsonl` of a run folder (conformance.judging.harness.record: one line per
judged example with its property, kernel, outcome, out/lse err/bound ratios, recipe and time) and
summarises it:
- examples, outcomes (pass / fail / observed / ...), per property and per writer;
- the wall span from the first to the last example (s) and examples per second over it;
- strategy features: for every family of conformance.records.coverage, the classes the recipes
  hit and how often (denominator: every class of the family, not what one strategy can draw);
- err/bound: largest and median out_ratio and lse_ratio over passing examples (finite ones).
A line cut short by a killed process is skipped and counted (`unreadable_lines`); a recipe that no
longer parses counts as an example without features (`recipes_unparsed`).

The command line: `python -m conformance report --features RUN_DIR [RUN_DIR ...]`.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from conformance.records.coverage import FAMILIES, features
from strategies.recipe import Recipe, RecipeError


class NoExamples(ValueError):
    """A folder without judged examples (the message names it)."""


def _finite(values: list[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))]


def _stats(values: list[float]) -> dict[str, Any]:
    return {"max": max(values) if values else None, "median": statistics.median(values) if values else None, "n": len(values)}


def read_examples(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The example lines of a run folder and how many lines could not be read; NoExamples when the
    folder holds no examples-*.jsonl file."""
    paths = sorted(run_dir.glob("examples-*.jsonl"))
    if not paths:
        raise NoExamples(f"{run_dir}: no examples-*.jsonl (not a run folder, or nothing judged yet)")
    lines: list[dict[str, Any]] = []
    unreadable = 0
    for path in paths:
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                unreadable += 1
                continue
            if isinstance(line, dict):
                lines.append(line)
            else:
                unreadable += 1
    return lines, unreadable


def summarise(run_dir: Path) -> dict[str, Any]:
    """The summary of one run folder (the module docstring); NoExamples when it has no examples."""
    lines, unreadable = read_examples(run_dir)
    counts = {f.key: Counter[str]() for f in FAMILIES}
    unparsed = 0
    per_property: dict[str, Counter[str]] = defaultdict(Counter)
    per_writer: dict[str, Counter[str]] = defaultdict(Counter)
    for line in lines:
        outcome = str(line.get("outcome"))
        per_property[str(line.get("property"))][outcome] += 1
        recipe = line.get("recipe")
        writer = recipe.get("writer", "pow2") if isinstance(recipe, dict) else "?"
        per_writer[str(writer)][outcome] += 1
        try:
            parsed = Recipe.from_json_dict(recipe)
        except (RecipeError, TypeError, ValueError):
            unparsed += 1
            continue
        for part in parsed.parts or (parsed,):  # a pack: its parts' features
            for key, classes in features(part).items():
                counts[key].update(classes)
    times = _finite([line.get("time") for line in lines])
    span = (max(times) - min(times)) if len(times) > 1 else 0.0
    passing = [line for line in lines if line.get("outcome") == "pass"]
    families = {
        f.key: {"hit": sum(1 for c in f.classes if counts[f.key][c]), "classes": len(f.classes), "counts": dict(counts[f.key])}
        for f in FAMILIES
    }
    return {
        "run_dir": str(run_dir),
        "kernels": sorted({str(line.get("kernel")) for line in lines}),
        "examples": len(lines),
        "unreadable_lines": unreadable,
        "recipes_unparsed": unparsed,
        "outcomes": dict(Counter(str(line.get("outcome")) for line in lines)),
        "per_property": {k: dict(v) for k, v in sorted(per_property.items())},
        "per_writer": {k: dict(v) for k, v in sorted(per_writer.items())},
        "span_s": round(span, 1),
        "examples_per_s": round(len(lines) / span, 2) if span > 0 else None,
        "features": families,
        "features_hit": sum(f["hit"] for f in families.values()),
        "feature_classes": sum(f["classes"] for f in families.values()),
        "out_ratio": _stats(_finite([line.get("out_ratio") for line in passing])),
        "lse_ratio": _stats(_finite([line.get("lse_ratio") for line in passing])),
    }


def _ratio_text(stats: dict[str, Any]) -> str:
    if not stats["n"]:
        return "none"
    return f"max {stats['max']:.3g}, median {stats['median']:.3g} (n {stats['n']})"


def render(summary: dict[str, Any]) -> str:
    """One folder's summary as text."""
    rate = "-" if summary["examples_per_s"] is None else f"{summary['examples_per_s']:.2f}"
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary["outcomes"].items()))
    lines = [
        f"{summary['run_dir']}: kernels {', '.join(summary['kernels'])}",
        f"  examples {summary['examples']} ({outcomes}) over {summary['span_s']} s: {rate} examples/s",
    ]
    for name, table in (("property", summary["per_property"]), ("writer", summary["per_writer"])):
        cells = "; ".join(f"{k}: " + ", ".join(f"{o} {n}" for o, n in sorted(v.items())) for k, v in table.items())
        lines.append(f"  per {name}: {cells}")
    lines.append(f"  strategy features hit: {summary['features_hit']}/{summary['feature_classes']} classes")
    for f in FAMILIES:
        family = summary["features"][f.key]
        drawn = ", ".join(f"{c} {family['counts'][c]}" for c in f.classes if family["counts"].get(c))
        lines.append(f"    {f.title} {family['hit']}/{family['classes']}: {drawn or '-'}")
    lines.append(f"  err/bound of passing examples: out {_ratio_text(summary['out_ratio'])}; lse {_ratio_text(summary['lse_ratio'])}")
    skipped = [f"{summary[k]} {what}" for k, what in (("unreadable_lines", "unreadable lines"), ("recipes_unparsed", "unparsed recipes"))]
    if summary["unreadable_lines"] or summary["recipes_unparsed"]:
        lines.append("  skipped: " + ", ".join(skipped))
    return "\n".join(lines)
