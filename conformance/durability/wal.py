"""Write-ahead record of the kernel call in flight, so a process that dies mid-call loses nothing.

Before each kernel call the recipe is written atomically to `<run dir>/inflight-<worker>.json`;
after the call returns (or raises) the file is removed. A file left behind means the process
died inside the call (GPU fault, abort, kill): the next run, or the xdist controller when a
worker goes down, turns it into a crash entry of the corpus (see conformance.records.crashes).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (temporary file in the same folder, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
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
    """Record `entry` (recipe, kernel, property, ...) as in flight for the duration of the block."""
    path = inflight_path(run_dir, worker)
    atomic_write_text(path, json.dumps(entry, sort_keys=True))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
