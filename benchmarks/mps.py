"""NVIDIA's Multi-Process Service (MPS) for the many processes of one campaign on one GPU, fail-soft.

Without MPS the GPU time-slices between the processes' contexts: one context's kernels run at a
time, so many processes that each launch thousands of small kernels per example wait on each
other. Under MPS their kernels share the GPU at once through one server context. What it costs: a
fatal GPU fault of one client (an illegal address) ends every client of the server, so use it for
kernels that do not fault (the emulated kernel), not for crash containment of foreign kernels.

`start(logdir)` starts a control daemon with its own pipe folder (short: a Unix socket path) and
checks that a CUDA client gets a server; it returns an `MpsSession` whose `env` the campaign's
processes must be started with, or, on any failure, a one-line reason (str) after stopping what
it started: the campaign then runs without MPS. The GPU's settings are not touched (MPS runs in
the default compute mode). The control program: `control`, else $MPS_CONTROL, else
nvidia-cuda-mps-control on PATH or in /usr/local/nvidia/bin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROL_NAME = "nvidia-cuda-mps-control"
CONTROL_DIRS = ("/usr/local/nvidia/bin",)
CLIENT = "import torch; x = torch.ones(4, device='cuda'); torch.cuda.synchronize(); print(float(x.sum()))"


@dataclass
class MpsSession:
    """A running MPS control daemon: `env` (CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY) for
    the processes started under it, `servers` as the daemon listed them; `stop()` ends it."""

    control: str
    pipe_dir: Path
    log_dir: Path
    servers: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}

    def ask(self, command: str, timeout: float = 10.0) -> str:
        """The daemon's answer to `command` (e.g. get_server_list); "" when it does not answer."""
        try:
            done = subprocess.run(
                [self.control], input=command + "\n", capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env}
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip()

    def stop(self) -> None:
        """Tell the daemon to quit (every server with it); errors are ignored."""
        self.ask("quit", timeout=20.0)
        time.sleep(1.0)
        shutil.rmtree(self.pipe_dir, ignore_errors=True)


def find_control(control: str | None = None) -> str | None:
    """The control program (module docstring), or None."""
    if control:
        return control
    if os.environ.get("MPS_CONTROL"):
        return os.environ["MPS_CONTROL"]
    found = shutil.which(CONTROL_NAME)
    if found:
        return found
    return next((str(Path(d) / CONTROL_NAME) for d in CONTROL_DIRS if (Path(d) / CONTROL_NAME).is_file()), None)


def _tail(path: Path, n: int = 300) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-n:].strip()
    except OSError:
        return ""


def _run(command: list[str], log: Path, timeout: float, env: dict[str, str]) -> int:
    """Run `command` with its output in `log`; its exit code, or -1 (the error in `log`) when it
    cannot start or runs past `timeout` seconds."""
    try:
        with log.open("w") as out:
            return subprocess.run(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, env=env
            ).returncode
    except (OSError, subprocess.SubprocessError) as err:
        log.write_text(f"{type(err).__name__}: {err}")
        return -1


def start(logdir: Path, *, control: str | None = None, python: str = sys.executable) -> MpsSession | str:
    """Start MPS (module docstring): the session, or why not (one line)."""
    ctl = find_control(control)
    if ctl is None:
        return f"no {CONTROL_NAME} on PATH or in {', '.join(CONTROL_DIRS)}"
    if not (os.path.isfile(ctl) and os.access(ctl, os.X_OK)):
        return f"the MPS control program {ctl} is not an executable file"
    logdir.mkdir(parents=True, exist_ok=True)
    session = MpsSession(control=ctl, pipe_dir=Path(tempfile.mkdtemp(prefix="mps-pipe-")), log_dir=logdir)
    env = {**os.environ, **session.env}
    if _run([ctl, "-d"], logdir / "start.txt", 20.0, env) != 0:
        shutil.rmtree(session.pipe_dir, ignore_errors=True)
        return f"'{ctl} -d' failed: {_tail(logdir / 'start.txt')}"
    if _run([python, "-c", CLIENT], logdir / "client.txt", 60.0, env) != 0:  # the server starts on the first CUDA context
        session.stop()
        return f"a CUDA client failed under MPS: {_tail(logdir / 'client.txt')}"
    session.servers = " ".join(session.ask("get_server_list").split())
    if not session.servers:
        session.stop()
        return "the daemon lists no server after a client ran"
    return session
