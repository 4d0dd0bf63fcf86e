"""`corpus push`: send the outbox's records (failures a run could not push) to the store's inbox.

Each record is pushed as the run would have pushed it (conformance.fleet.inbox.push: the same
transaction, so pushing twice is harmless) and leaves the outbox once the store took it. The
first failure stops the drain (the store's breaker is open): what is left stays for a later push.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.fleet import inbox
from conformance.fleet.store import Store


@dataclass
class PushResult:
    """What a drain did: records pushed, left in the outbox, unreadable files, and why it stopped."""

    pushed: int = 0
    left: int = 0
    unreadable: list[Path] = field(default_factory=list)
    stopped: str = ""


def push_outbox(store: Store, state: Path | None = None) -> PushResult:
    """Drain the outbox of the state folder `state` (default: the current one) into `store`."""
    result = PushResult()
    for path, record in inbox.queued(state):
        if record is None:
            result.unreadable.append(path)
            continue
        if store.down or not inbox.push(store, record):
            result.left += 1
            result.stopped = store.breaker.reason
            continue
        path.unlink(missing_ok=True)
        result.pushed += 1
    return result
