"""The breaker of the shared store: after the first failed call, no call is tried again in this process.

A store that is down makes every call fail (redis-py raises at once on a refused connection);
one that accepts and never answers makes every call wait for its timeout. Either way a run that
kept trying would spend its budget on the store: the first failure opens the breaker, says so
once (each listener is called once, with one line), and every later call is answered locally
(as if the store held nothing) for the rest of the process. The verdict never depends on it: the
store only ever held what the local state folder holds too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

Listener = Callable[[str], None]


class Breaker:
    """Closed until `trip`; then open for good. `reason` is the one line said when it opened."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reason = ""
        self.opened_at: float | None = None
        self.failed_calls = 0
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    def listen(self, listener: Listener) -> None:
        """Call `listener(line)` when the breaker opens (at once when it is open already)."""
        with self._lock:
            self._listeners.append(listener)
            already = self.reason if self.open else None
        if already is not None:
            listener(already)

    def trip(self, err: BaseException, during: str) -> None:
        """Record a failed call; the first one opens the breaker and tells the listeners once."""
        with self._lock:
            self.failed_calls += 1
            if self.open:
                return
            self.opened_at = time.time()
            detail = " ".join(str(err).split())[:200]
            self.reason = f"{self.name} unreachable ({type(err).__name__}: {detail}, during {during}); this run uses local state only"
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(self.reason)
            except Exception:  # noqa: BLE001 - saying so must never be what fails
                pass
