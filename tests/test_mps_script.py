"""scripts/h200/mps.sh falls back to no MPS, saying why, whenever the service cannot serve a CUDA
client, and stops what it started (fake control programs stand in for NVIDIA's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _start(tmp_path: Path, control: str, python: str = sys.executable) -> tuple[int, str]:
    script = (
        f'. "{ROOT}/scripts/h200/mps.sh"; mps_start "{tmp_path}/log"; rc=$?; '
        'echo "rc=$rc pipe=${CUDA_MPS_PIPE_DIRECTORY:-unset}"; echo "state=$MPS_STATE"'
    )
    env = {**os.environ, "MPS_CONTROL": control, "PYTHON": python, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120, check=True, stdin=subprocess.DEVNULL
    )
    return done.returncode, done.stdout


def _fake(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake-mps-control"
    path.write_text(f"#!/usr/bin/env bash\necho \"$@ $(cat 2>/dev/null)\" >> {tmp_path}/calls\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_missing_control_program_is_named(tmp_path: Path) -> None:
    _, out = _start(tmp_path, str(tmp_path / "nowhere"))
    assert "rc=1 pipe=unset" in out and "is not an executable file" in out


def test_a_daemon_that_does_not_start_is_reported(tmp_path: Path) -> None:
    _, out = _start(tmp_path, str(_fake(tmp_path, 'echo "cannot start: no device" >&2; exit 3')))
    assert "rc=1 pipe=unset" in out and "-d' failed: cannot start: no device" in out


def test_a_client_that_gets_no_server_stops_the_daemon(tmp_path: Path) -> None:
    """The daemon starts but no CUDA client runs (no GPU here, or a python that fails): off, and
    the daemon is told to quit."""
    _, out = _start(tmp_path, str(_fake(tmp_path, "exit 0")), python="false")
    assert "rc=1 pipe=unset" in out and "a CUDA client failed under MPS" in out
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("-d") and calls[-1].strip() == "quit"
