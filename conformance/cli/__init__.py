"""`python -m conformance SUBCOMMAND ...`: the suite's command line.

Each subcommand lives in its own module exposing ``register(subparsers) -> None``, which adds an
argparse sub-parser and sets its handler with ``parser.set_defaults(func=handler)``, where
``handler(args: argparse.Namespace) -> int`` returns the process exit code.

To add a subcommand, write ``conformance/cli/<name>.py`` with ``register`` and append its module
name to SUBCOMMAND_MODULES below. Shared argparse types: conformance.cli.args. The subcommands
import the core (conformance.*); nothing outside conformance.cli imports them.
Exit codes, common to all subcommands: 0 success / clean, 1 the checked thing failed (violations,
test failures), 2 unusable input or a usage error (argparse's own convention), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "conformance.cli.preconditions",
    "conformance.cli.replay",
    "conformance.cli.fuzz",
    "conformance.cli.corpus",
    "conformance.cli.report",
    "conformance.cli.bench",
    "conformance.cli.mutation",
    "conformance.cli.probe",
    "conformance.cli.soundness",
    "conformance.cli.snapshot",
    "conformance.cli.dumps",
    "conformance.cli.fast_paths",
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance",
        description="Differential fuzzing and conformance suite for sparse MLA kernels over fp8_ds_mla KV records.",
        epilog="python -m conformance COMMAND --help: the command's options and exit codes, and for a command that takes "
        "--kernel the built-in kernels.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Remember a SIGINT during the block and raise KeyboardInterrupt after it, not inside it:
    a KeyboardInterrupt raised inside a C extension's import (torch importing numpy) can be
    swallowed there, and the command would then run on as if never interrupted. Does nothing
    off the main thread or where SIGINT is ignored."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None):
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Parse argv (sys.argv[1:] when None), run the subcommand and return its exit code."""
    try:
        with _sigint_deferred():
            parser = build_parser()  # imports every subcommand, torch among them
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse: --help gives 0, usage errors 2
            return int(exc.code or 0)
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped (e.g. `| head`)
        discard_stdout()
        return 0


def print_result(text: str) -> None:
    """Print a command's final text on stdout; a reader that stopped (`| head`) is no error: the
    rest is discarded (discard_stdout) and the command's exit code stands."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        discard_stdout()


def discard_stdout() -> None:
    """Point stdout at /dev/null (after a closed pipe), so that the interpreter's final flush
    does not fail again."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
