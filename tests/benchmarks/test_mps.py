"""benchmarks.mps falls back to no MPS, saying why, whenever the service cannot serve a CUDA client,
and stops what it started (fake control programs stand in for NVIDIA's)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import mps


def _fake(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake-mps-control"
    path.write_text(f'#!/usr/bin/env bash\ninput=$(cat 2>/dev/null)\necho "$@ $input" >> {tmp_path}/calls\n{body}\n')
    path.chmod(0o755)
    return path


def _calls(tmp_path: Path) -> list[str]:
    return [line.strip() for line in (tmp_path / "calls").read_text().splitlines()]


def test_a_missing_control_program_is_named(tmp_path: Path) -> None:
    reason = mps.start(tmp_path / "log", control=str(tmp_path / "nowhere"))
    assert isinstance(reason, str) and "is not an executable file" in reason


def test_a_daemon_that_does_not_start_is_reported(tmp_path: Path) -> None:
    reason = mps.start(tmp_path / "log", control=str(_fake(tmp_path, 'echo "cannot start: no device" >&2; exit 3')))
    assert isinstance(reason, str) and "-d' failed: cannot start: no device" in reason


def test_a_client_that_gets_no_server_stops_the_daemon(tmp_path: Path) -> None:
    """The daemon starts but no CUDA client runs (a python that fails): off, and the daemon is told to quit."""
    reason = mps.start(tmp_path / "log", control=str(_fake(tmp_path, "exit 0")), python="false")
    assert isinstance(reason, str) and "a CUDA client failed under MPS" in reason
    calls = _calls(tmp_path)
    assert calls[0].startswith("-d") and calls[-1] == "quit"


def test_a_daemon_that_lists_no_server_is_stopped(tmp_path: Path) -> None:
    """A client that runs (here: a Python that exits 0 without CUDA) but no server listed: off."""
    reason = mps.start(tmp_path / "log", control=str(_fake(tmp_path, "exit 0")), python="true")
    assert reason == "the daemon lists no server after a client ran"
    assert _calls(tmp_path)[-1] == "quit"


def test_a_working_daemon_gives_the_clients_environment(tmp_path: Path) -> None:
    body = '[ "$input" = get_server_list ] && echo 4242; exit 0'
    session = mps.start(tmp_path / "log", control=str(_fake(tmp_path, body)), python="true")
    assert isinstance(session, mps.MpsSession) and session.servers == "4242"
    assert session.env["CUDA_MPS_LOG_DIRECTORY"] == str(tmp_path / "log") and Path(session.env["CUDA_MPS_PIPE_DIRECTORY"]).is_dir()
    session.stop()
    assert not session.pipe_dir.exists()
