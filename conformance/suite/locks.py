"""Machine-wide locks for cases that must not run concurrently (caches over 4 GiB).

`exclusive(name)` holds an advisory lock (fcntl.flock) on `<state dir>/locks/<name>.lock` for the
duration of the block, so xdist workers, and concurrent sessions sharing a state folder, take
turns. The lock is released when the block ends or when its process dies.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager

from conformance.durability.state import state_dir


@contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold the machine-wide lock `name` for the duration of the block (blocks until free)."""
    folder = state_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.lock").open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
