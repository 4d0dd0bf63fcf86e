"""Write-ahead record of the kernel call in flight, so a process that dies mid-call loses nothing.

Before each kernel call the recipe is written atomically to `<run dir>/inflight-<worker>.json`;
after the call returns (or raises) the file is removed. A file left behind means the process
died inside the call (GPU fault, abort, kill): the next run, or the xdist controller when a
worker goes down, turns it into a crash entry of the corpus (see conformance.records.crashes).

Durability: the record is in the file system (the kernel's page cache) before the call starts,
which is what a process death needs: the file outlives the process that wrote it, whatever
signal ends it. It is not fsynced (`durable=False`): an fsync per kernel call cost 8 ms of wall
time (and stalled the unlink after it on the journal), and only protects against the machine
itself going down, which also ends the run. Everything meant to be kept (corpus entries,
reports, session markers) is written with `durable=True`, the default.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _own_mode(path: Path) -> int | None:
    """`path`'s permission bits when it is a regular file already, else None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None


def _temporary(folder: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """A new file in `folder` opened for writing, created as open() creates one (mode 0o666, less
    the umask, applied by the kernel: no read of the umask, unlike mkstemp's fixed 0o600, which
    would need one to correct), under a random name no one else has (O_EXCL); (fd, path)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        name = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary name in {folder} after 100 tries")


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    """Write `text` to `path` atomically: a reader sees the old file or the whole new one (a
    temporary file in the same folder, renamed over `path`). The file gets the mode open() would
    give it: a new file 0o666 & ~umask (the temporary is created with that mode),
    an existing regular file its own mode. `durable`: fsync the data before the rename, so the
    new file also survives a machine crash (without: a process crash)."""
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    keep = _own_mode(path)
    fd, tmp = _temporary(path.parent, f".{path.name}.", ".tmp")
    try:
        if keep is not None:
            os.fchmod(fd, keep)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def inflight_path(run_dir: Path, worker: str) -> Path:
    """The write-ahead file of `worker` in `run_dir`."""
    return run_dir / f"inflight-{worker}.json"


@contextmanager
def in_flight(run_dir: Path, worker: str, entry: dict[str, Any]) -> Iterator[None]:
    """Record `entry` (recipe, kernel, property, ...) as in flight for the duration of the block
    (written before the block starts, removed after it ends; see the module docstring)."""
    path = inflight_path(run_dir, worker)
    atomic_write_text(path, json.dumps(entry, sort_keys=True), durable=False)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
