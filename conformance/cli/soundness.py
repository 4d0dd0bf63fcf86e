"""`python -m conformance soundness`: is a profile's bound sound for its kernel (conformance.tools.soundness).

A kernel of the profile (default `emulated`) against the float64 oracle on N Hypothesis-drawn
problems, every call judged in both comparison modes; prints the largest error/bound ratio per
output and mode and the violations (ratio > 1). `--processes N` splits the problems over N
processes run at once and merges their summaries; `--merge` combines the JSON summaries of earlier
campaigns instead of running one.

`--distribution` answers how tight the bound is instead: N seeded random problems (reproducible:
--seed), the distribution of err/bound per output and mode (n, median, p99, max, violations) and,
for --shares of them, each error term's share of the bound (conformance.tools.bound_distribution).

Exit codes: 0 no violation, 1 violations, 2 an unusable kernel, device or option, or an unreadable
summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from conformance.cli.args import OutputError, add_command, add_kernel_option, non_negative_int, output_file, positive_int, write_output

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `soundness` subcommand to an argparse subparsers object."""
    p = add_command(
        subparsers,
        "soundness",
        "a profile's kernel vs the float64 oracle on N drawn problems: the largest error/bound ratio, the violations",
        __doc__,
    )
    add_kernel_option(p, when_absent="emulated", default="emulated")
    p.add_argument("--problems", type=positive_int, default=None, help="problems to judge (default 1000; 100 with --distribution)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--max-total-keys", type=positive_int, default=2048, help="keys per recipe, at most (default 2048)")
    p.add_argument("--processes", type=positive_int, default=1, metavar="N", help="run the campaign as N processes at once (default 1)")
    p.add_argument("--json", type=output_file, default=None, metavar="PATH", help="write the summary here")
    p.add_argument(
        "--merge", nargs="+", default=None, metavar="SUMMARY", help="merge summaries of earlier campaigns instead of running one"
    )
    p.add_argument("--quiet", action="store_true", help="no progress line")
    d = p.add_argument_group("--distribution: how tight the bound is")
    d.add_argument("--distribution", action="store_true", help="err/bound distributions and term shares instead of the campaign")
    d.add_argument("--profile", default=None, help="profile name or .toml path (default: the kernel's own)")
    d.add_argument("--max-row", type=positive_int, default=1024, metavar="K", help="keys per row, at most (default 1024)")
    d.add_argument("--seed", type=non_negative_int, default=0, help="seed of the problems (default 0)")
    d.add_argument(
        "--shares", type=non_negative_int, default=5, metavar="N", help="problems to compute term shares on (default 5; 0: none)"
    )
    p.set_defaults(func=run)


def _usage_error(args: argparse.Namespace) -> str | None:
    if args.merge and (args.distribution or args.processes > 1):
        return "--merge combines earlier summaries: it takes neither --distribution nor --processes"
    if args.distribution and args.processes > 1:
        return "--processes splits the campaign; --distribution runs in one process"
    if not args.distribution and (args.profile is not None):
        return "--profile applies to --distribution (the campaign judges the kernel under its own profile)"
    return None


def run(args: argparse.Namespace) -> int:
    """Handler of `soundness`; returns the exit code."""
    from conformance.judging.target import TargetError

    problem = _usage_error(args)
    if problem:
        print(f"soundness: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args.distribution:
            return _distribution(args)
        stats = _campaign(args)
    except TargetError as err:
        print(f"soundness: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if stats is None:
        return EXIT_BAD_INPUT
    if not _write_json(args, json.dumps(stats, indent=2, sort_keys=True)):
        return EXIT_BAD_INPUT
    print(json.dumps({k: stats[k] for k in ("problems", "max_ratio", "seconds")}, sort_keys=True))
    print(f"violations: {len(stats['violations'])}")
    return EXIT_VIOLATIONS if stats["violations"] else EXIT_OK


def _campaign(args: argparse.Namespace) -> dict[str, Any] | None:
    from conformance.tools.soundness import merge, run_campaign, run_parallel

    if args.merge:
        try:
            summaries = [json.loads(open(path, encoding="utf-8").read()) for path in args.merge]
            return merge(summaries)
        except (OSError, json.JSONDecodeError) as err:
            print(f"soundness: cannot read a summary: {err}", file=sys.stderr)
        except (KeyError, TypeError, IndexError) as err:
            print(f"soundness: not a soundness summary ({type(err).__name__}: {err})", file=sys.stderr)
        return None
    problems = args.problems or 1000
    common = {"device": args.device, "max_total_keys": args.max_total_keys, "progress": not args.quiet}
    if args.processes > 1:
        return run_parallel(args.kernel, problems, args.processes, **common)
    return run_campaign(args.kernel, problems, **common)


def _distribution(args: argparse.Namespace) -> int:
    from conformance.judging.target import build_target
    from conformance.tools.bound_distribution import distribution

    target = build_target(args.kernel, profile=args.profile, device=args.device)
    summary = distribution(target, args.problems or 100, max_row=args.max_row, seed=args.seed, shares_of=args.shares)
    text = json.dumps(summary, indent=2)
    print(text)
    if not _write_json(args, text + "\n"):
        return EXIT_BAD_INPUT
    violations = sum(r.get("violations", 0) for r in summary["ratios"].values())
    return EXIT_VIOLATIONS if violations else EXIT_OK


def _write_json(args: argparse.Namespace, text: str) -> bool:
    """Write --json (when given); False, with one line on stderr, when that fails."""
    if not args.json:
        return True
    try:
        write_output(args.json, text)
    except OutputError as err:
        print(f"soundness: --json: {err}", file=sys.stderr)
        return False
    return True
