"""The documentation a user reads: the design document ships with the repository and every
reference points at it; the command line's help lists every subcommand with its one-line
description, and every `--kernel` option's help names every built-in kernel."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import SUBCOMMAND_MODULES, build_parser, main
from kernel.registry import BUILTINS

REPO = Path(__file__).resolve().parents[2]


def test_design_document_is_in_the_repository() -> None:
    design = REPO / "docs" / "explanation" / "design.md"
    assert design.is_file() and design.read_text(encoding="utf-8").startswith("# Design:")
    assert "](docs/explanation/design.md)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_nothing_points_outside_the_repository() -> None:
    for path in [REPO / "README.md", REPO / "TOLERANCES.md", *sorted((REPO / "docs").rglob("*.md"))]:
        assert "../shared" not in path.read_text(encoding="utf-8"), path


def test_profile_options_are_named_the_same_everywhere() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("fuzz", "mutation-score"):
        options = {o: a.dest for a in sub[command]._actions for o in a.option_strings}
        assert options["--hypothesis-profile"] == "hypothesis_profile", command
        assert options["--profile"] == "numerics_profile", command
    replay = {o: a.dest for a in sub["replay"]._actions for o in a.option_strings}
    assert replay["--profile"] == "profile" and "--hypothesis-profile" not in replay


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _all_parsers(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command path, parser) for every parser under `parser`, nested subcommands included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub is not parser:
                    yield from _all_parsers(sub, f"{path} {name}".strip())


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_top_level_help_lists_every_subcommand_with_its_description(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # no line wrapping inside a description
    assert main(["--help"]) == 0
    text = _squash(capsys.readouterr().out)
    helps = {a.dest: a.help for a in _subparsers(build_parser())._choices_actions}
    assert len(helps) == len(SUBCOMMAND_MODULES) and "probe" in helps and "soundness" in helps
    for name, description in helps.items():
        assert description and "\n" not in description, name
        assert f"{name} {_squash(description)}" in text, name


def test_every_kernel_option_names_every_builtin_kernel() -> None:
    seen = []
    for path, parser in _all_parsers(build_parser()):
        kernel = next((a for a in parser._actions if "--kernel" in a.option_strings), None)
        if kernel is None:
            continue
        seen.append(path)
        text = parser.format_help()
        for name, entry in BUILTINS.items():
            if path == "corpus add":  # records who found a bare recipe; names no kernel to run
                continue
            assert name in (kernel.help or ""), (path, name)
            assert re.search(rf"^\s+{re.escape(name)}\s+{re.escape(entry.description)}$", text, re.M), (path, name)
        if path != "corpus add":
            assert "path/to/file.py:attr" in (kernel.help or ""), path
    assert {"fuzz", "replay", "probe", "bench", "soundness", "corpus minimise"} <= set(seen), seen
