"""Only the product in the tree: no tracked file narrates how the project was built.

Code, docs, tests and data describe the present state. A numbered issue or work session, a
before/after of a change, a driver script named after a run, the people who ran it: that is
history, and history lives in git (and, for users, in CHANGELOG.md, the one file exempt).
Measurements live in docs with their command and date (docs/reference/measurements.md), which
this guard allows: a date is not narration.

`narration(lines)` names every line that matches one of PATTERNS; `narrating_name(path)` a file
whose name is a run's (`s07b.sh`, `camp12.sh`, `lead_x.sh`, `final_table.sh`, ...). The test scans
`git ls-files` (text files; JSON, tensors and pictures are data) and fails naming `file:line` and
the kind of each hit. It also holds every Python file but SYS_PATH_ALLOWED (the kernel-spec file loader,
which puts a kernel file's folder on the path while it loads, and the foreign-kernel tool, which
imports a fetched checkout's packages) to no `sys.path.insert`: modules run as
`python -m PACKAGE.MODULE` from the repository root.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()  # the guard's own patterns and samples

#: kind -> pattern of a line that narrates
PATTERNS: dict[str, re.Pattern[str]] = {
    "numbered issue": re.compile(r"\b[Ii]ssues? \d+|\bissue's\b"),
    "numbered session": re.compile(r"\b[Ss]essions? \d+|\b(?:this|second|third|previous|earlier) session\b(?=[,)])"),
    "before/after of a change": re.compile(r"\(this change\)|\b[Bb]efore \(commit"),
    "scripts folder": re.compile(r"\bscripts/"),
    "role": re.compile(r"\blead_s?\d|\bthe lead\b|\blead's\b|\bhelpers' |\bhelper peers\b|\bother agents\b"),
    "round of work": re.compile(r"\bsecond (?:freedom )?round\b|\bround \d+ of\b|\bwave \d+ of work\b"),
    "the seed document": re.compile(r"\bseeds/\d"),
}
#: a file named after a run or a session
RUN_NAME = re.compile(r"(?:^|/)(?:s\d\d[a-z]|camp\d\d|speed\d\d|oracle\d\d|emu\w*\d\d|lead_|final_)\w*\.")
DATA_SUFFIXES = (".json", ".pt", ".png", ".npy", ".safetensors")
EXEMPT = {"CHANGELOG.md", THIS}
SYS_PATH = re.compile(r"\bsys\.path\.insert\(")
#: the file loader of kernel specs (a kernel file's folder while it loads) and the foreign-kernel tool
#: (a fetched FlyDSL checkout's top-level `kernels` package, while it compiles those kernels)
SYS_PATH_ALLOWED = {"kernel/registry.py", "tools/foreign_isa/__main__.py", THIS}


def narration(lines: Iterable[str]) -> list[tuple[int, str, str]]:
    """(line number from 1, kind, the line) of every narrating line."""
    hits = []
    for number, line in enumerate(lines, 1):
        for kind, pattern in PATTERNS.items():
            if pattern.search(line):
                hits.append((number, kind, line.strip()))
                break
    return hits


def narrating_name(path: str) -> bool:
    """Whether a tracked file's name is a run's or a session's."""
    return RUN_NAME.search(path) is not None


def tracked_files() -> list[str]:
    """Every file git tracks, as paths relative to the repository root (present on disk)."""
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listing.returncode != 0:
        pytest.skip(f"not a git checkout: {listing.stderr.decode(errors='replace').strip()}")
    return [p for p in listing.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def _text(path: str) -> list[str] | None:
    try:
        return (ROOT / path).read_text(encoding="utf-8").splitlines()
    except (UnicodeDecodeError, OSError):
        return None


def scan(paths: Iterable[str]) -> list[str]:
    """`file:line: kind: text` for every narrating line, `file: named after a run` for every such file."""
    found = []
    for path in paths:
        if narrating_name(path):
            found.append(f"{path}: named after a run or a session")
        if path in EXEMPT or path.endswith(DATA_SUFFIXES):
            continue
        lines = _text(path)
        if lines is None:
            continue
        found += [f"{path}:{n}: {kind}: {line[:160]}" for n, kind, line in narration(lines)]
    return found


def test_no_tracked_file_narrates_how_the_project_was_built() -> None:
    found = scan(tracked_files())
    assert not found, f"{len(found)} narrating lines or file names (history belongs in git):\n" + "\n".join(found)


def test_only_the_kernel_file_loader_touches_sys_path() -> None:
    found = []
    for path in tracked_files():
        if not path.endswith(".py") or path in SYS_PATH_ALLOWED:
            continue
        lines = _text(path) or []
        found += [f"{path}:{n}" for n, line in enumerate(lines, 1) if SYS_PATH.search(line)]
    assert not found, "sys.path.insert outside kernel/registry.py (run modules with python -m):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("Measured in issue 7 on the GPU.", "numbered issue"),
        ("the issue's goal of 3x", "numbered issue"),
        ("## Session 4 (2000-01-01): timings", "numbered session"),
        ("done in the third session, above", "numbered session"),
        ("### After (this change)", "before/after of a change"),
        ("### Before (commit 0123abc)", "before/after of a change"),
        ("python scripts/timing.py --repeat 5", "scripts folder"),
        ("`lead_s1x.sh` alone on the GPU", "role"),
        ("that run is the lead's", "role"),
        ("a busy machine because of other agents", "role"),
        ("The second round of the table added two rows", "round of work"),
        ("read `seeds/001_example.txt` for facts", "the seed document"),
    ],
)
def test_each_kind_of_narration_is_caught(line: str, kind: str) -> None:
    assert narration([line]) == [(1, kind, line)]


@pytest.mark.parametrize(
    "line",
    [
        "pytest's session: one `pytest` invocation and its workers (conformance/suite/session.py)",
        "a session that does not ask for the suite changes nothing",
        "the 32 tr8 immediates in issue order",
        "2026-12-04, `python -m conformance bench --n-q 1,64,1024,4096` on one H200",
        "Recipe(seed=0, n_q=1, heads=1, row_lengths=[1], cache_rows=1)",
        "the original kernel's documentation lists the preconditions",
    ],
)
def test_the_present_state_is_not_narration(line: str) -> None:
    assert narration([line]) == []


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("scripts/gpu/s07b.sh", True),
        ("scripts/gpu/camp12.sh", True),
        ("scripts/gpu/lead_x.sh", True),
        ("scripts/gpu/final_table.sh", True),
        ("tools/speed12_ops.py", True),
        ("benchmarks/campaign.py", False),
        ("kernel/flydsl/launch_specs/h16_i1_l1.toml", False),
        ("oracle/profile_files/sglang-triton-decode.toml", False),
    ],
)
def test_run_named_files_are_caught(path: str, named: bool) -> None:
    assert narrating_name(path) is named


def test_the_scan_reports_file_line_and_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "notes.md").write_text("present state\nas measured in session 30\n", encoding="utf-8")
    (tmp_path / "data.json").write_text('{"caught": "issue 12"}\n', encoding="utf-8")
    (tmp_path / "CHANGELOG.md").write_text("issue 12 fixed\n", encoding="utf-8")
    found = scan(["notes.md", "data.json", "CHANGELOG.md", "lead_c.sh"])
    assert found == ["notes.md:2: numbered session: as measured in session 30", "lead_c.sh: named after a run or a session"]
