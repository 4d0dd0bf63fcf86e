"""Progress of long property tests: one line now and then while a test runs many kernel calls.

`conformance.judging.harness.run_kernel` calls `tick()` once per kernel call; a front end that wants
progress installs a listener with `listen(fn)` (the pytest plugin does, in suite sessions). The
listener gets the number of calls since `reset()` and the seconds since then. Nothing here
imports torch or pytest.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
