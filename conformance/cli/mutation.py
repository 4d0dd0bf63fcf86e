"""`python -m conformance mutation-score`: the suite's strength, measured on the mutant catalogue.

Runs the conformance suite (pytest in a subprocess, `-x`) against every broken kernel of
`conformance.mutation.catalogue.CATALOGUE` and once against the unbroken `emulated` kernel, which must
pass. Reports, per mutant: killed or survived, the test that killed it, the examples run until
the first failure and the seconds to it. See conformance.mutation for the details and
docs/reference/measurements.md for measured numbers.

Output: one progress line per finished run on stderr; the table and summary on stdout;
--json / --markdown write the same report to files.

Exit codes: 0 every selected mutant killed and every baseline (emulated, the correct variants) passed,
1 otherwise, 2 usage error
(unknown mutant name, bad option), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.args import OutputError, add_command, output_file, positive_float, positive_int, write_output
from conformance.mutation import score as scoring

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `mutation-score` subcommand to an argparse subparsers object."""
    p = add_command(subparsers, "mutation-score", "run the suite against every catalogued broken kernel and report which it kills", __doc__)
    p.add_argument(
        "--hypothesis-profile",
        dest="hypothesis_profile",
        default="ci",
        metavar="NAME",
        help="Hypothesis profile of the suite runs (default: ci)",
    )
    p.add_argument(
        "--profile",
        dest="numerics_profile",
        default=None,
        metavar="NAME",
        help="numerics profile passed to every suite run (the suite's --conformance-profile; default: what each kernel declares)",
    )
    p.add_argument("--only", metavar="NAME,...", help="only these mutants (comma-separated catalogue names; at least one)")
    p.add_argument(
        "--jobs", type=positive_int, default=os.cpu_count() or 1, metavar="N", help="suite runs in parallel (default: number of CPUs)"
    )
    p.add_argument("--json", type=output_file, metavar="PATH", help="write the report as JSON here (a file; its folder must exist)")
    p.add_argument(
        "--markdown", type=output_file, metavar="PATH", help="write the report as a Markdown table here (a file; its folder must exist)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=scoring.DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"wall-clock seconds per suite run; past it a mutant is 'survived (timeout)' (default {scoring.DEFAULT_TIMEOUT_S:.0f})",
    )
    p.add_argument("--device", default=None, help="--device of the suite runs (cpu or cuda; default: the suite's choice)")
    p.add_argument("--no-baseline", action="store_true", help="skip the runs that must pass (emulated and the correct variants)")
    p.add_argument(
        "--shrink", action="store_true", help="keep Hypothesis's shrink phase (off by default: it only minimises a failure already found)"
    )
    p.add_argument("--keep", metavar="DIR", help="keep each run's folder (state, events, pytest log) under DIR")
    p.add_argument(
        "--pytest-arg",
        action="append",
        default=[],
        metavar="ARG",
        help=(
            "extra argument for every suite run, after the runner's own "
            "(repeatable; e.g. --pytest-arg=--ignore=conformance/suite/test_corpus.py)"
        ),
    )
    p.add_argument("--list", action="store_true", help="list the catalogue and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler of `mutation-score`; returns the exit code."""
    specs = scoring.catalogue_specs()
    if args.list:
        for name, spec in specs.items():
            print(f"{name}\t{spec}")
        return EXIT_OK
    only = None
    if args.only is not None:
        only = [n.strip() for n in args.only.split(",") if n.strip()]
        if not only:
            print(f"mutation-score: --only {args.only!r} names no mutant (give NAME,...; --list shows the catalogue)", file=sys.stderr)
            return EXIT_USAGE
    extra = list(args.pytest_arg)
    if args.numerics_profile is not None:
        from oracle.profiles import load_profile

        try:
            load_profile(args.numerics_profile)
        except (KeyError, TypeError, ValueError, OSError) as err:  # ProfileError is a ValueError
            hint = (
                f" (for the Hypothesis profile use --hypothesis-profile {args.numerics_profile})"
                if args.numerics_profile in ("ci", "dev", "nightly")
                else ""
            )
            print(f"mutation-score: --profile: {err.args[0] if err.args else err}{hint}", file=sys.stderr)
            return EXIT_USAGE
        extra = ["--conformance-profile", args.numerics_profile, *extra]
    try:
        runs = scoring.select_runs(only, baseline=not args.no_baseline, specs=specs, baselines=scoring.baseline_specs())
    except KeyError as err:
        print(f"mutation-score: {err.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    if not runs:
        print("mutation-score: nothing to run", file=sys.stderr)
        return EXIT_USAGE
    command_line = "python -m conformance mutation-score " + shlex.join(_rebuild(args))
    print(
        f"mutation-score: {len(runs)} suite runs ({sum(r.role == 'mutant' for r in runs)} mutants"
        f"{', ' + str(sum(r.role == 'baseline' for r in runs)) + ' baselines that must pass' if not args.no_baseline else ''}), "
        f"Hypothesis profile {args.hypothesis_profile}, {args.jobs} at a time",
        file=sys.stderr,
        flush=True,
    )
    score = scoring.run_mutation_score(
        runs,
        hypothesis_profile=args.hypothesis_profile,
        jobs=args.jobs,
        timeout_s=args.timeout,
        device=args.device,
        shrink=args.shrink,
        progress=sys.stderr,
        extra=extra,
        keep=Path(args.keep) if args.keep else None,
        command_line=command_line.strip(),
    )
    sys.stdout.write(scoring.format_table(score))
    try:
        if args.json:
            write_output(args.json, json.dumps(score.to_json(), indent=2, sort_keys=True) + "\n")
        if args.markdown:
            write_output(args.markdown, scoring.format_markdown(score))
    except OutputError as err:
        print(f"mutation-score: {err}", file=sys.stderr)
        return EXIT_USAGE
    return score.exit_code


def _rebuild(args: argparse.Namespace) -> list[str]:
    """The options that change the measurement, as a command line that reproduces it."""
    out = ["--hypothesis-profile", args.hypothesis_profile, "--jobs", str(args.jobs), "--timeout", f"{args.timeout:g}"]
    if args.numerics_profile:
        out += ["--profile", args.numerics_profile]
    if args.only:
        out += ["--only", args.only]
    if args.device:
        out += ["--device", args.device]
    if args.no_baseline:
        out.append("--no-baseline")
    if args.shrink:
        out.append("--shrink")
    out += [f"--pytest-arg={a}" for a in args.pytest_arg]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m conformance.cli.mutation [options]`: the same as `python -m conformance
    mutation-score [options]` (same options and exit codes), through the shared dispatcher."""
    from conformance import cli

    return cli.main(["mutation-score", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
