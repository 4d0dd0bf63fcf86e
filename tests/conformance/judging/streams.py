"""Streams for the progress and status-line tests."""

from __future__ import annotations


class ClosedPipe:
    """A stream whose reader has gone (`2>&1 | head`): every write raises BrokenPipeError."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")
