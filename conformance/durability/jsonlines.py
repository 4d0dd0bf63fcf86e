"""Appending JSON lines to a log file: the run folder's example, failure, not-judged and crash
logs, and the mutation score's event log.

Each call appends its lines in one write of an O_APPEND descriptor, so lines of one call are
never split by another writer's; a new file gets the mode open() gives it (0o666 less the umask).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def append_json_lines(path: Path | str, lines: Sequence[dict[str, Any]], *, durable: bool = False) -> None:
    """Append each of `lines` to `path` as one line of JSON (sorted keys, Python's json: Infinity
    and NaN as written by json.dumps), creating the file when missing. `durable`: fsync before
    returning, so the lines also survive a machine crash. Nothing is written for no lines."""
    if not lines:
        return
    data = memoryview("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode("utf-8"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        while data:  # a regular file takes it in one write; a short write (a signal) goes on where it stopped
            data = data[os.write(fd, data) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
