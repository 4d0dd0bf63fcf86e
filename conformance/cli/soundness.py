"""`python -m conformance soundness`: the soundness campaign of a profile's bound (conformance.tools.soundness).

A kernel of the profile (default `emulated`) against the float64 oracle on N Hypothesis-drawn
problems, every call judged in both comparison modes; prints the largest error/bound ratio per
output and mode and the violations (ratio > 1). `--merge` combines the JSON summaries of earlier
campaigns (e.g. scripts/soundness_parallel.sh's parts) instead of running one.
Exit codes: 0 no violation, 1 violations, 2 an unreadable summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from conformance.cli.args import add_kernel_option, positive_int


def register(subparsers: Any) -> None:
    """Add the `soundness` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "soundness",
        help="a profile's kernel vs the float64 oracle on N drawn problems: the largest error/bound ratio, the violations",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_kernel_option(p, when_absent="emulated", default="emulated")
    p.add_argument("--problems", type=positive_int, default=1000, help="problems to judge (default 1000)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--max-total-keys", type=positive_int, default=2048, help="keys per recipe, at most (default 2048)")
    p.add_argument("--json", default=None, help="write the summary here")
    p.add_argument(
        "--merge", nargs="+", default=None, metavar="SUMMARY", help="merge summaries of earlier campaigns instead of running one"
    )
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler of `soundness`; returns the exit code."""
    from conformance.tools.soundness import merge, run_campaign

    if args.merge:
        try:
            summaries = [json.loads(open(path, encoding="utf-8").read()) for path in args.merge]
        except (OSError, json.JSONDecodeError) as err:
            print(f"soundness: cannot read a summary: {err}", file=sys.stderr)
            return 2
        stats = merge(summaries)
    else:
        stats = run_campaign(args.kernel, args.problems, device=args.device, max_total_keys=args.max_total_keys, progress=not args.quiet)
    text = json.dumps(stats, indent=2, sort_keys=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            handle.write(text)
    print(json.dumps({k: stats[k] for k in ("problems", "max_ratio", "seconds")}, sort_keys=True))
    print(f"violations: {len(stats['violations'])}")
    return 1 if stats["violations"] else 0
