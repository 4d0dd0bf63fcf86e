"""What the subcommands share: argparse types (each raises argparse.ArgumentTypeError naming the
value), the `--kernel` option with the built-in kernel catalogue in its help, writing an output
file, and the kernel under test for a recipe read from a file."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conformance.judging.target import Target


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _finite_positive(text: str, what: str, must_be: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be {must_be}, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _finite_positive(text, "a number", "a positive number")


def finite_positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0 (no nan, no inf)."""
    return _finite_positive(text, "a number of seconds", "a finite number of seconds > 0")


def kernel_catalogue() -> str:
    """Every built-in kernel with its one-line description, then the other spec forms: the help
    epilog of a subcommand that takes --kernel (read from kernel.registry.BUILTINS)."""
    from kernel.registry import OTHER_FORMS, builtin_lines

    lines = ["built-in kernels (--kernel NAME):", *(f"  {line}" for line in builtin_lines())]
    lines.append(f"or {OTHER_FORMS} (a relative path is taken from the working directory)")
    return "\n".join(lines)


def add_command(subparsers: Any, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """A subcommand of `subparsers`: `help` its line in the parent's list, `doc` (its module's
    docstring) the text of its own --help, shown as written (line breaks and tables kept)."""
    return subparsers.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_kernel_option(parser: argparse.ArgumentParser, *, when_absent: str = "", lead: str = "kernel", **kwargs: Any) -> None:
    """Add `--kernel` to `parser`: its help (`lead: ...`) names every built-in kernel and the other
    spec forms (kernel.registry.kernel_spec_help; `when_absent` says what applies without the
    option), and the parser's epilog lists the built-in kernels with their descriptions
    (kernel_catalogue). kwargs go to add_argument (required, default, action, metavar, ...)."""
    from kernel.registry import kernel_spec_help

    kwargs.setdefault("metavar", "KERNEL")
    parser.add_argument("--kernel", help=kernel_spec_help(when_absent, lead), **kwargs)
    parser.epilog = "\n\n".join(text for text in (parser.epilog, kernel_catalogue()) if text)
    if parser.formatter_class is argparse.HelpFormatter:  # keep the catalogue's lines
        parser.formatter_class = argparse.RawDescriptionHelpFormatter


def output_file(text: str) -> str:
    """argparse type: a path a report can be written to: not a folder, its folder exists and is
    writable. (A full device is only seen when writing: see `write_output`.)"""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file path")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {parent} does not exist")
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text}: folder {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: not writable")
    return text


class OutputError(OSError):
    """A report file could not be written; the message names the file and why, in one line."""


def write_output(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path`, atomically for regular files (a temporary file next to it,
    then renamed), directly for device files such as /dev/stdout. OutputError (one line) when
    that fails: a folder, a missing folder, no permission, a full device."""
    from conformance.durability.wal import atomic_write_text

    target = Path(path)
    try:
        if target.exists() and not target.is_file():
            if target.is_dir():
                raise IsADirectoryError(21, "is a folder", str(target))
            with open(target, "w", encoding="utf-8") as handle:  # a device or FIFO: no rename possible
                handle.write(text)
        else:
            atomic_write_text(target, text)
    except OSError as err:
        raise OutputError(f"cannot write {target}: {err.strerror or err}") from err


def target_for_recipe(
    command: str, kernel: str | None, profile: str | None, device: str | None, recipe: Any, source: object
) -> Target | None:
    """The Target of `kernel` (conformance.judging.target.build_target) once the recipe read from
    `source` fits its device's memory (strategies.materialize.check_memory); None after printing
    `<command>: <why>` to stderr when either refuses (the caller exits with a usage error)."""
    from conformance.judging.target import TargetError, build_target
    from strategies.materialize import check_memory
    from strategies.recipe import RecipeError

    try:
        target = build_target(kernel, profile=profile, device=device)
    except TargetError as err:
        print(f"{command}: {err}", file=sys.stderr)
        return None
    try:
        check_memory(recipe, target.device)
    except RecipeError as err:
        print(f"{command}: {source}: {err}", file=sys.stderr)
        return None
    return target
