"""The campaign table from fuzz summaries (fuzz-summary.json of `python -m conformance fuzz`).

    python scripts/campaign_table.py SUMMARY.json [...] [--markdown]

One row per summary: kernel, device, wall seconds, examples, examples/s overall (examples / wall
time, shrinking included), examples/s per property (its examples / the seconds spent judging
them), distinct failures, and the strategy features hit / reachable per headline family; then
each summary's coverage lines as the fuzz summary prints them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PROPS = ("differential", "long_rows", "preconditions")


def row(data: dict[str, Any]) -> list[str]:
    """The table cells of one summary."""
    per = data.get("per_property", {})
    rates = [f"{per[p]['examples_per_s']:.2f} ({per[p]['examples']})" if p in per else "-" for p in PROPS]
    features = data.get("features", {})
    hit = sum(f["hit"] for f in features.values())
    reach = sum(f["reachable"] for f in features.values())
    return [
        data.get("kernel", "?"),
        data.get("device", "?"),
        f"{data.get('seconds', 0):.0f}",
        str(data.get("examples", 0)),
        f"{data.get('examples_per_s', 0):.2f}",
        *rates,
        str(data.get("failures", 0)),
        f"{hit}/{reach}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summaries", nargs="+", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    header = ["kernel", "device", "wall s", "examples", "ex/s", *(f"{p} ex/s (n)" for p in PROPS), "failures", "features hit"]
    rows, lines = [], []
    for path in args.summaries:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            print(f"{path}: unreadable ({err})", file=sys.stderr)
            continue
        rows.append(row(data))
        lines += [f"{data.get('kernel')}: {x}" for x in data.get("summary_lines", [])]
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
    print("\n".join(lines))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
