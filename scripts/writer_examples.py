"""Count the judged examples of conformance run folders by kernel, property, writer and outcome.

Reads every `examples-*.jsonl` (conformance.judging.harness.record: one line per judged example
with its recipe) under the folders given and prints one JSON object: for each kernel, per
property, per writer, the outcomes (pass / fail / observed / raised / skipped) and, for the
sglang writer, the precondition kinds its examples violated (the `observed` field of the
preconditions property) and the largest err/bound of its passing examples.

Usage: python3 scripts/writer_examples.py STATE_DIR [STATE_DIR ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def count(folders: list[Path]) -> dict[str, Any]:
    """{kernel: {property: {writer: {"outcomes": {...}, "kinds": {...}, "max_out_ratio": x}}}}."""
    table: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for folder in folders:
        for path in sorted(folder.rglob("examples-*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a killed process
                    continue
                writer = row.get("recipe", {}).get("writer", "?")
                cell = table[row.get("kernel", "?")][row.get("property", "?")].setdefault(
                    writer, {"outcomes": Counter(), "kinds": Counter(), "max_out_ratio": None}
                )
                cell["outcomes"][row.get("outcome", "?")] += 1
                for kind in (row.get("observed") or {}).get("kinds", []):
                    cell["kinds"][kind] += 1
                ratio = row.get("out_ratio")
                if row.get("outcome") == "pass" and isinstance(ratio, int | float) and math.isfinite(ratio):
                    cell["max_out_ratio"] = ratio if cell["max_out_ratio"] is None else max(cell["max_out_ratio"], ratio)
    return json.loads(json.dumps(table))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        print(f"writer_examples: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    table = count(args.folders)
    text = json.dumps(table, indent=1, sort_keys=True)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
