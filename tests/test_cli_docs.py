"""The design document ships with the repository and every reference points at it (issue 12, item 8)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_design_document_is_in_the_repository() -> None:
    design = REPO / "docs" / "design.md"
    assert design.is_file() and design.read_text(encoding="utf-8").startswith("# Design:")
    assert "](docs/design.md)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_nothing_points_outside_the_repository() -> None:
    for path in [REPO / "README.md", REPO / "TOLERANCES.md", *sorted((REPO / "docs").glob("*.md"))]:
        assert "../shared" not in path.read_text(encoding="utf-8"), path


def test_profile_options_are_named_the_same_everywhere() -> None:
    from conformance.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("fuzz", "mutation-score"):
        options = {o: a.dest for a in sub[command]._actions for o in a.option_strings}
        assert options["--hypothesis-profile"] == "hypothesis_profile", command
        assert options["--profile"] == "numerics_profile", command
    replay = {o: a.dest for a in sub["replay"]._actions for o in a.option_strings}
    assert replay["--profile"] == "profile" and "--hypothesis-profile" not in replay
