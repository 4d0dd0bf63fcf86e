"""Progress of long runs: kernel-call ticks, and the one status line the front ends write.

`conformance.judging.harness.run_kernel` calls `tick()` once per kernel call; a front end that wants
progress installs a listener with `listen(fn)` (the pytest plugin does, in suite sessions). The
listener gets the number of calls since `reset()` and the seconds since then.

`StatusLine` is the status line of a long command on a stream (stderr): rewritten in place on a
terminal, one line now and then elsewhere, never failing the work it reports on. `rate_text`
formats "label: done/total unit (pct), rate, GiB/s, ETA". Nothing here imports torch or pytest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

GIB = 1 << 30

Listener = Callable[[int, float], None]

_state: dict[str, object] = {"listener": None, "calls": 0, "started": time.monotonic()}


def listen(fn: Listener | None) -> None:
    """Install (or with None remove) the listener called on every tick."""
    _state["listener"] = fn


def reset() -> None:
    """Start counting again (a new test)."""
    _state["calls"], _state["started"] = 0, time.monotonic()


def tick() -> None:
    """One kernel call happened: tell the listener (calls so far, seconds since reset). A listener
    whose write fails (OSError: a closed pipe, `2>&1 | head`) is removed and nothing is raised:
    progress output never fails the judged call that ticks."""
    _state["calls"] = int(_state["calls"]) + 1  # type: ignore[call-overload]
    listener = _state["listener"]
    if listener is not None:
        try:
            listener(int(_state["calls"]), time.monotonic() - float(_state["started"]))  # type: ignore[operator, arg-type]
        except OSError:
            _state["listener"] = None


class StatusLine:
    """A status line on `stream`: rewritten in place on a terminal (at most every 0.2 s), else one
    line per `every` seconds. `tty` overrides what the stream says (None: ask `stream.isatty()`).

    Best effort: a write that fails (a closed pipe, `2>&1 | head`) closes the line for good and
    raises nothing, so it can never end the work it reports on (`closed` says it happened)."""

    def __init__(self, stream: TextIO, *, every: float, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) if tty is None else tty
        self.every = 0.2 if self.tty else every
        self.last = 0.0
        self.width = 0
        self.closed = False

    def _write(self, text: str) -> None:
        if self.closed:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError:  # BrokenPipeError and kin: the reader is gone
            self.closed = True

    def show(self, text: str, *, force: bool = False) -> None:
        """Show `text` unless the last line is more recent than the interval (`force`: show it anyway)."""
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        if self.tty:
            self._write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self._write(text + "\n")

    def done(self) -> None:
        """End the line (on a terminal, move past it)."""
        if self.tty and self.width:
            self._write("\n")
            self.width = 0


def rate_text(label: str, done: int, total: int, unit: str, seconds: float, *, bytes_per_item: int = 0) -> str:
    """ "label: done/total unit (pct%)  rate unit/s  [GiB/s]  [ETA s]" after `seconds` of work (the
    ETA only while done < total, GiB/s only with `bytes_per_item`)."""
    rate = done / max(seconds, 1e-9)
    pct = 100.0 * done / total if total else 100.0
    parts = [f"{label}: {done:,}/{total:,} {unit} ({pct:5.1f}%)", f"{rate:,.0f} {unit}/s"]
    if bytes_per_item:
        parts.append(f"{rate * bytes_per_item / GIB:.2f} GiB/s")
    if done < total and rate > 0:
        parts.append(f"ETA {(total - done) / rate:.0f} s")
    return "  ".join(parts)
