"""The documentation stays true to the tree: links resolve, the kernels table is the catalogue, the
command-line reference names every pytest option, subcommand, option and benchmark routine, the
commands the docs show use options that exist, and the glossary defines its words.

The documents checked are README.md, TOLERANCES.md, CHANGELOG.md, examples/README.md and every
Markdown file under docs/. A relative link must name a file or folder of the checkout, and an
anchor (`#...`) a heading of the Markdown file it points into, by GitHub's rule for heading ids.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import build_parser
from conformance.suite import options
from kernel.registry import BUILTINS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*```")
INLINE_CODE = re.compile(r"`([^`]+)`")
#: the words whose one meaning the glossary fixes (docs/reference/glossary.md)
GLOSSARY_WORDS = ("profile", "probe", "seed", "target", "kernel", "mutant", "mutation")
#: pytest options of the suite before they were prefixed: a pytest command in the docs must not use them
UNPREFIXED = re.compile(r"(?<![\w-])--(kernel|profile|device|workers-per-gpu|no-capture-corpus|call-timeout)(?![\w-])")


def documents() -> list[Path]:
    """The Markdown files the checks cover."""
    fixed = [ROOT / "README.md", ROOT / "TOLERANCES.md", ROOT / "CHANGELOG.md", ROOT / "examples" / "README.md"]
    return [p for p in fixed if p.is_file()] + sorted(DOCS.rglob("*.md"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The heading ids of a Markdown file (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    ids = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = anchor(match.group(2))
        count = seen.get(base, 0)
        ids.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return ids


def broken_links(path: Path) -> list[str]:
    """`file:line: target (why)` for every relative link of `path` that does not resolve."""
    broken = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file_part, _, fragment = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                broken.append(f"{_rel(path)}:{number}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{_rel(path)}:{number}: {target} (no heading #{fragment} in {_rel(dest)})")
    return broken


def test_every_relative_link_resolves() -> None:
    broken = [b for path in documents() for b in broken_links(path)]
    assert not broken, "links that do not resolve:\n" + "\n".join(broken)


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# The `other` page: a title\n\n## Kinds\n", encoding="utf-8")
    page.write_text(
        "[ok](other.md#the-other-page-a-title) [ok](other.md#kinds) [gone](missing.md) [bad](other.md#nope) "
        "[web](https://example.com) `[code](not-a-link.md)`\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert broken_links(page) == ["page.md:1: missing.md (no such file)", "page.md:1: other.md#nope (no heading #nope in other.md)"]


def _tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of `text`: rows of cells (header first, the separator row left out)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def test_the_kernels_table_is_the_catalogue() -> None:
    tables = _tables((REFERENCE / "kernels.md").read_text(encoding="utf-8"))
    catalogue = next(t for t in tables if t[0] == ["name", "what", "module"])
    rows = [(name.strip("`"), what, module.strip("`")) for name, what, module in catalogue[1:]]
    assert rows == [(k.name, k.description, k.module) for k in BUILTINS.values()]
    where = next(t for t in tables if t[0] == ["name", "profile", "runs on"])
    assert [row[0].strip("`") for row in where[1:]] == list(BUILTINS)


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def command_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command path such as "corpus add", parser) for every subcommand, nested ones included (an
    alias of a subcommand is listed once, under its first name)."""

    def walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        sub = _subparsers(parser)
        if sub is None:
            return
        seen: set[int] = set()
        for name, child in sub.choices.items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            child_path = f"{path} {name}".strip()
            yield child_path, child
            yield from walk(child, child_path)

    yield from walk(build_parser(), "")


def _sections(text: str) -> dict[str, str]:
    """Heading text -> the text up to the next heading (any level)."""
    sections: dict[str, str] = {}
    title, body = "", []
    for _, line in _prose_lines(text):
        match = HEADING.match(line)
        if match:
            sections[title] = "\n".join(body)
            title, body = match.group(2).replace("`", ""), []
        else:
            body.append(line)
    sections[title] = "\n".join(body)
    return sections


def _names(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string and positional metavar of a parser (help left out)."""
    names = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names += action.option_strings or [action.metavar or action.dest]
    return names


def test_the_cli_reference_names_every_subcommand_and_option() -> None:
    sections = _sections((REFERENCE / "cli.md").read_text(encoding="utf-8"))
    missing = []
    for path, parser in command_parsers():
        title = f"python -m conformance {path}"
        heading = next((h for h in sections if h == title or h.startswith(title + " ")), None)
        if heading is None:
            missing.append(f"no section `python -m conformance {path}`")
            continue
        missing += [f"{path}: {name}" for name in _names(parser) if f"`{name}`" not in sections[heading]]
    assert not missing, "docs/reference/cli.md lacks:\n" + "\n".join(missing)


def suite_options() -> list[str]:
    """The plugin's pytest options (conformance.suite.options: every one is a module constant)."""
    return sorted({v for v in vars(options).values() if isinstance(v, str) and v.startswith("--conformance-")})


def test_the_cli_reference_names_every_pytest_option_and_benchmark_routine() -> None:
    from benchmarks.__main__ import ROUTINES

    text = (REFERENCE / "cli.md").read_text(encoding="utf-8")
    sections = _sections(text)
    assert len(suite_options()) >= 7
    assert [o for o in suite_options() if f"`{o}`" not in sections["pytest options"]] == []
    assert [r for r in ROUTINES if f"`{r}`" not in sections["python -m benchmarks ROUTINE"]] == []


def _commands(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, command text) of every command shown in a document: a line of a fenced or
    indented code block, or an inline code span."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            yield number, line.strip()
        else:
            for span in INLINE_CODE.findall(line):
                yield number, span


def misused_options(path: Path) -> list[str]:
    """`file:line: problem` for each command of `path` that names a subcommand, a routine or an
    option that does not exist, or gives pytest an option of the suite without its prefix."""
    from benchmarks.__main__ import ROUTINES

    parsers = dict(command_parsers())
    suite = set(suite_options())
    problems = []
    for number, command in _commands(path):
        where = f"{_rel(path)}:{number}"
        for match in re.finditer(r"python -m conformance ([a-z][\w-]*)(?: ([a-z][\w-]*))?(.*)", command):
            first, second, rest = match.groups()
            nested = f"{first} {second}" if second and f"{first} {second}" in parsers else None
            key = nested or first
            if first not in parsers:
                problems.append(f"{where}: no subcommand {first!r}")
                continue
            known = set(_names(parsers[key])) | set(_names(parsers[first]))
            tail = rest if nested else f"{second or ''}{rest}"
            problems += [f"{where}: {key} has no option {o}" for o in re.findall(r"(?<![\w-])--[a-z][\w-]*", tail) if o not in known]
        for routine in re.findall(r"python -m benchmarks ([a-z_]+)", command):
            if routine not in ROUTINES:
                problems.append(f"{where}: no benchmark routine {routine!r}")
        pytest_part = re.search(r"\bpytest\b(.*)", command)
        if pytest_part and "python -m conformance" not in command:
            rest = pytest_part.group(1)
            problems += [f"{where}: pytest takes --conformance-{m}, not --{m}" for m in UNPREFIXED.findall(rest)]
            problems += [f"{where}: no pytest option {o}" for o in re.findall(r"--conformance-[\w-]+", rest) if o not in suite]
    return problems


def test_the_commands_shown_use_options_that_exist() -> None:
    problems = [p for path in documents() if path.name != "CHANGELOG.md" for p in misused_options(path)]
    assert not problems, "commands in the docs that would not run as shown:\n" + "\n".join(problems)


def test_the_command_check_catches_a_wrong_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "`python -m conformance replay E.json --kernel emulated`\n"
        "`python -m conformance replay E.json --kernels emulated`\n"
        "```\npytest --pyargs conformance --kernel emulated\npython -m conformance nosuch\n```\n"
        "    python -m benchmarks nosuch\n"
        "`pytest conformance --conformance-kernal x`\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert misused_options(page) == [
        "page.md:2: replay has no option --kernels",
        "page.md:4: pytest takes --conformance-kernel, not --kernel",
        "page.md:5: no subcommand 'nosuch'",
        "page.md:7: no benchmark routine 'nosuch'",
        "page.md:8: no pytest option --conformance-kernal",
    ]


@pytest.mark.parametrize("word", GLOSSARY_WORDS)
def test_the_glossary_defines_its_words(word: str) -> None:
    text = (REFERENCE / "glossary.md").read_text(encoding="utf-8")
    defined = {cell.strip("*").strip() for table in _tables(text) for row in table[1:] for cell in row[:1] for cell in cell.split(",")}
    assert word in {d.strip("* ") for d in defined}, f"docs/reference/glossary.md does not define {word!r}"


def test_the_generated_cli_tables_are_current() -> None:
    """docs/reference/cli.md's and docs/how-to/benchmark.md's tables equal what the parsers give
    (`python -m tools.cli_reference` rewrites them after an option changes)."""
    from tools.cli_reference import main

    assert main(["--check"]) == 0, "run `python -m tools.cli_reference` and commit the docs"
