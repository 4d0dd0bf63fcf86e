"""Regenerate the generated tables of docs/reference/cli.md and docs/how-to/benchmark.md.

The tables come from the parsers themselves: the suite's pytest options
(conformance.suite.options.add_options), every `python -m conformance` subcommand and its options
(conformance.cli.build_parser), and the `python -m benchmarks` routines (benchmarks.__main__.ROUTINES).
Run from the repository root after an option changes:

    python -m tools.cli_reference            # rewrite the tables in place
    python -m tools.cli_reference --check    # exit 1 naming the files whose tables are out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI_DOC = ROOT / "docs" / "reference" / "cli.md"
BENCH_DOC = ROOT / "docs" / "how-to" / "benchmark.md"
ROUTINE_HEAD = "| routine | measures |"
_KERNEL_HELP = (
    (
        r"kernel: a built-in name \([^)]*\), package\.module:attr or path/to/file\.py:attr",
        "kernel spec: a built-in name ([kernels.md](kernels.md)), package.module:attr or path/to/file.py:attr",
    ),
    (
        r"the kernel it fails with: a built-in name \([^)]*\), package\.module:attr or path/to/file\.py:attr",
        "the kernel it fails with: a kernel spec",
    ),
    (r"a built-in name \(emulated, [^)]*\), package\.module:attr or path/to/file\.py:attr", "a kernel spec"),
)


def _escape(text: str | None) -> str:
    return (text or "").replace("%%", "%").replace("|", "\\|")


def _subparsers(parser: argparse.ArgumentParser) -> Any:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)  # noqa: SLF001 - argparse has no public walk


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction) or action.dest == "help":  # noqa: SLF001
            continue
        name = ", ".join(f"`{s}`" for s in action.option_strings) if action.option_strings else f"`{action.metavar or action.dest}`"
        if action.option_strings and action.nargs != 0:
            choices = ("{" + ",".join(map(str, action.choices)) + "}") if action.choices else action.dest.upper()
            name += f" {action.metavar or choices}"
        rows.append(f"| {name} | {_escape(action.help)} |")
    return rows


def _table(rows: list[str]) -> str:
    return "| option | meaning |\n|---|---|\n" + "\n".join(rows) + "\n"


def commands_text() -> str:
    """Every subcommand (and sub-subcommand) of `python -m conformance` with its options."""
    from conformance.cli import build_parser

    top = _subparsers(build_parser())
    helps = {a.dest: a.help for a in top._choices_actions}  # noqa: SLF001
    parts: list[str] = []
    for name, parser in top.choices.items():
        parts.append(f"### `python -m conformance {name}`\n\n{_escape(helps.get(name, ''))}\n")
        if rows := _option_rows(parser):
            parts.append(_table(rows))
        inner = _subparsers(parser)
        if inner is None:
            continue
        inner_helps = {a.dest: a.help for a in inner._choices_actions}  # noqa: SLF001
        seen: set[int] = set()
        for action_name, sub in inner.choices.items():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            alias = [k for k, v in inner.choices.items() if v is sub and k != action_name]
            also = f" (also `{alias[0]}`)" if alias else ""
            parts.append(f"#### `python -m conformance {name} {action_name}`{also}\n\n{_escape(inner_helps.get(action_name))}\n")
            if rows := _option_rows(sub):
                parts.append(_table(rows))
    text = "\n".join(parts)
    for pattern, replacement in _KERNEL_HELP:
        text = re.sub(pattern, replacement, text)
    return text.strip() + "\n\n"


class _Group:
    def __init__(self) -> None:
        self.rows: list[str] = []

    def addoption(self, name: str, **kwargs: Any) -> None:
        metavar = kwargs.get("metavar")
        cell = f"`{name}`" + (f" {metavar}" if metavar and kwargs.get("action") != "store_true" else "")
        self.rows.append(f"| {cell} | {_escape(kwargs.get('help'))} |")


class _Parser:
    """Stands in for pytest's parser: collects the rows add_options registers."""

    def __init__(self) -> None:
        self.group = _Group()

    def getgroup(self, *args: Any, **kwargs: Any) -> _Group:
        return self.group


def pytest_rows() -> str:
    from conformance.durability.state import DEFAULT_CALL_TIMEOUT_S
    from conformance.suite import options

    parser = _Parser()
    options.add_options(parser, DEFAULT_CALL_TIMEOUT_S)  # type: ignore[arg-type]
    return "\n".join(parser.group.rows)


def routine_rows() -> str:
    from benchmarks.__main__ import ROUTINES

    return "\n".join(f"| `{name}` | {_escape(what)} |" for name, what in ROUTINES.items())


def _replace(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def rendered() -> dict[Path, str]:
    """Each generated file's full text as it should be."""
    cli = CLI_DOC.read_text(encoding="utf-8")
    a = cli.index("| option | meaning |", cli.index("## pytest options"))
    cli = _replace(cli, a, cli.index("\n\n", a), "| option | meaning |\n|---|---|\n" + pytest_rows())
    a = cli.index("### `python -m conformance ")
    cli = _replace(cli, a, cli.index("## `python -m benchmarks ROUTINE`"), commands_text())
    out = {CLI_DOC: cli, BENCH_DOC: BENCH_DOC.read_text(encoding="utf-8")}
    for path in out:
        text = out[path]
        a = text.index(ROUTINE_HEAD)
        out[path] = _replace(text, a, text.index("\n\n", a), ROUTINE_HEAD + "\n|---|---|\n" + routine_rows())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cli_reference", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming the files whose tables are out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        if path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(
            "out of date (python -m tools.cli_reference rewrites them): " + ", ".join(str(p.relative_to(ROOT)) for p in stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
