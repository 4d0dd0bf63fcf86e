"""Usage errors a newcomer meets first: one line, exit 4 (pytest) / 2 (CLI), before any test.

- an unusable $CONFORMANCE_DIR (a path under a file) stops the suite and `fuzz` before anything runs;
- an unknown `--hypothesis-profile` is a usage error naming the known profiles (not an INTERNALERROR).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.durability.state import scrubbed_env

REPO = Path(__file__).resolve().parents[3]


def _pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**scrubbed_env(dict(os.environ)), **env}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "--pyargs",
            "conformance",
            "--conformance-kernel",
            "emulated",
            *args,
        ],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_state_dir_under_a_file_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = _pytest(tmp_path, "-k", "edge-single-key", CONFORMANCE_DIR=str(blocker / "state"))
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "ERROR: conformance: state folder" in done.stderr and "CONFORMANCE_DIR" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "passed" not in done.stdout and "failed" not in done.stdout


def test_unknown_hypothesis_profile_is_a_usage_error(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-k", "edge-single-key", "--hypothesis-profile", "nosuch")
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "unknown Hypothesis profile 'nosuch'" in done.stderr and "dev" in done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr


def test_fuzz_with_unusable_state_dir_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CONFORMANCE_DIR", str(blocker / "state"))
    monkeypatch.delenv("CONFORMANCE_RUN_ID", raising=False)
    assert cli_main(["fuzz", "--kernel", "emulated", "--seconds", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fuzz: state folder") and err.count("\n") == 1
