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
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def current_umask() -> int:
    """The process's file mode creation mask: from /proc/self/status where Linux shows it, else
    read by setting it and setting it back (a moment in which another thread's new file would
    get the stand-in mask 0o022)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(path: Path) -> int:
    """The permission bits open(path, "w") would leave `path` with: its own when it is a regular
    file already, else 0o666 & ~umask."""
    try:
        st = os.stat(path)
    except OSError:
        return 0o666 & ~current_umask()
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o666 & ~current_umask()


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    """Write `text` to `path` atomically: a reader sees the old file or the whole new one (a
    temporary file in the same folder, renamed over `path`). The file gets the mode open() would
    give it (new_file_mode: a new file 0o666 & ~umask, not mkstemp's 0o600, which would hide
    reports and corpus entries from everyone but their writer). `durable`: fsync the data
    before the rename, so the new file also survives a machine crash (without: a process crash)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, new_file_mode(path))
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
