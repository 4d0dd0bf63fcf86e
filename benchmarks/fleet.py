"""PLACEHOLDER"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REDIS_SERVER = "redis-server"


class LocalRedis:
    """A throwaway redis-server of this machine: a unix socket in a fresh folder under /tmp (or a
    free loopback port with `tcp`), nothing persisted; `stop` ends it and removes the folder,
    `kill` ends it with SIGKILL (a store lost mid-run). FileNotFoundError when redis-server is not
    installed (Debian: apt-get install redis-server)."""

    def __init__(self, *, tcp: bool = False, binary: str | None = None) -> None:
        self.binary = binary or shutil.which(REDIS_SERVER) or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
        if self.binary is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.tcp = tcp
        self.folder = Path(tempfile.mkdtemp(prefix="cf-redis-", dir="/tmp"))
        self.socket = self.folder / "redis.sock"
        self.port = _free_port() if tcp else 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0" if self.tcp else f"unix://{self.socket}"

    def start(self, timeout_s: float = 30.0) -> LocalRedis:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.folder), "--daemonize", "no", "--loglevel", "warning"]
        if not self.tcp:
            args += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        give_up = time.monotonic() + timeout_s  # a backstop: the loop ends as soon as the server answers
        while not self._answers():
            if self.process.poll() is not None:
                err = (self.process.stderr.read() if self.process.stderr else b"").decode(errors="replace").strip()
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {err[-500:]}")
            if time.monotonic() > give_up:
                self.stop()
                raise RuntimeError(f"redis-server did not answer within {timeout_s:g} s")
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        try:
            if self.tcp:
                conn = socket.create_connection(("127.0.0.1", self.port), timeout=1.0)
            else:
                if not self.socket.exists():
                    return False
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.settimeout(1.0)
                conn.connect(str(self.socket))
            with conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server (the folder stays until stop)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NeverAnswers:
    """A loopback listener that accepts connections and never answers (a store that hangs)."""

    def __init__(self) -> None:
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.held.append(conn)

    def __enter__(self) -> NeverAnswers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.server.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def refused_url() -> str:
    """A loopback address nothing listens on (a store that is down)."""
    return f"redis://127.0.0.1:{_free_port()}/0"


def main(argv: list[str] | None = None) -> int:
    raise SystemExit(os.EX_SOFTWARE)
