"""`python -m conformance SUBCOMMAND ...`: the suite's command line.

Each subcommand lives in its own module exposing ``register(subparsers) -> None``, which adds an
argparse sub-parser and sets its handler with ``parser.set_defaults(func=handler)``, where
``handler(args: argparse.Namespace) -> int`` returns the process exit code.

To add a subcommand, write ``conformance/cli_<name>.py`` with ``register`` and append its module
name to SUBCOMMAND_MODULES below (planned: replay, fuzz, corpus, report, bench, mutation-score).
Exit codes, common to all subcommands: 0 success / clean, 1 the checked thing failed (violations,
test failures), 2 unusable input or a usage error (argparse's own convention), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Sequence

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "conformance.cli_preconditions",
    "conformance.cli_replay",
    "conformance.cli_fuzz",
    "conformance.cli_corpus",
    "conformance.cli_report",
    "conformance.cli_bench",
    "conformance.cli_mutation",
)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="python -m conformance", description="Differential fuzzing and conformance suite for sparse MLA kernels over fp8_ds_mla KV records.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse argv (sys.argv[1:] when None), run the subcommand and return its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help gives 0, usage errors 2
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped (e.g. `| head`)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
