"""Files written atomically (reports, corpus entries, CLI outputs) get the mode open() would give
them: 0o666 & ~umask for a new file, the file's own mode when it exists; never mkstemp's 0o600."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli.args import write_output
from conformance.durability.wal import atomic_write_text
from conformance.records import crashes

REPO = Path(__file__).resolve().parents[3]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask() -> Iterator[None]:
    """Restores the test process's umask after a test that sets it."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield
    os.umask(previous)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002, 0o077])
def test_new_file_gets_what_open_gives(tmp_path: Path, umask: None, mask: int) -> None:
    os.umask(mask)
    with open(tmp_path / "by-open.txt", "w", encoding="utf-8") as handle:
        handle.write("x")
    atomic_write_text(tmp_path / "atomic.txt", "x")
    atomic_write_text(tmp_path / "fast.json", "{}", durable=False)
    write_output(tmp_path / "cli.md", "x")
    expected = _mode(tmp_path / "by-open.txt")
    assert expected == 0o666 & ~mask
    assert [_mode(tmp_path / n) for n in ("atomic.txt", "fast.json", "cli.md")] == [expected] * 3


def test_existing_file_keeps_its_mode(tmp_path: Path, umask: None) -> None:
    os.umask(0o022)
    path = tmp_path / "entry.json"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o600)
    atomic_write_text(path, "new")
    assert path.read_text(encoding="utf-8") == "new" and _mode(path) == 0o600
    path.chmod(0o664)
    atomic_write_text(path, "newer")
    assert _mode(path) == 0o664


def test_report_files_of_the_cli_are_readable_by_the_group(tmp_path: Path) -> None:
    """`python -m conformance report RUN` under umask 0o027 writes report.json / report.md 0o640."""
    run = tmp_path / "run"
    run.mkdir()
    crashes.mark_session_start(run, kind="pytest")
    crashes.mark_session_finish(run, exitstatus=0)
    line = {"property": "differential", "kernel": "emulated", "outcome": "pass", "recipe": {"seed": 1, "n_q": 1, "heads": 2}}
    (run / "examples-main.jsonl").write_text(json.dumps({**line, "out_ratio": 0.0, "lse_ratio": 0.0, "time": 1.0}) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "CONFORMANCE_"))}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "report", str(run), "--no-plot"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        umask=0o027,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert _mode(run / "report.json") == 0o640 and _mode(run / "report.md") == 0o640
