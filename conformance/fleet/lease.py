"""A lease per failure group: one runner shrinks a bug, the others go on searching.

The key `<failures prefix>lease:<group digest>` (conformance.fleet.namespace) is taken with
SET NX PX: the first runner to find a failure of a group holds it for `ttl_s` seconds and spends
its shrink window on it; another runner that finds the same group pushes what it found (marked
unshrunk, with itself as finder) and does not shrink it. A holder that finishes marks the lease
done (`done:<holder>`, kept DONE_TTL_S, so later finders of the group do not shrink it again:
`collect` has the shrunk entry); a holder that dies leaves its lease to expire, and the next
finder after that takes it. A holder asking again gets its own lease back (a second failure
message of the same group). With the store down every runner shrinks what it finds itself, as a
runner without a store does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.fleet.namespace import group_digest
from conformance.fleet.store import Store

DONE = "done:"
DONE_TTL_S = 8 * 24 * 3600.0


@dataclass(frozen=True)
class Lease:
    """The answer to a request: `granted` (shrink it), else who holds it and whether it is done."""

    granted: bool
    holder: str
    done: bool = False
    local: bool = False  # granted because the store did not answer

    def describe(self) -> str:
        if self.granted:
            return "shrinking it here" + (" (store unreachable: no lease)" if self.local else "")
        if self.done:
            return f"already shrunk by {self.holder}: not shrunk again"
        return f"{self.holder} holds its lease: left to that runner"


def lease_key(prefix: str, group: tuple[str, str] | list[str]) -> str:
    return f"{prefix}lease:{group_digest(group)}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def acquire(store: Store, key: str, holder: str, ttl_s: float) -> Lease:
    """Take the lease `key` for `holder` for `ttl_s` seconds (module docstring)."""
    ttl_ms = max(1, int(ttl_s * 1000))

    def take(client: Any) -> Lease:
        for _ in range(3):  # a lease that expires between the SET and the GET is taken on the next turn
            if client.set(key, holder, nx=True, px=ttl_ms):
                return Lease(True, holder)
            current = client.get(key)
            if current is None:
                continue
            text = _text(current)
            if text == holder:
                client.pexpire(key, ttl_ms)
                return Lease(True, holder)
            if text.startswith(DONE):
                return Lease(False, text.removeprefix(DONE), done=True)
            return Lease(False, text)
        return Lease(False, "another runner")

    return store.call("lease", take, Lease(True, holder, local=True))


def finish(store: Store, key: str, holder: str) -> bool:
    """Mark the lease done by `holder` (module docstring); False when the store did not answer."""
    return bool(store.call("lease", lambda c: c.set(key, DONE + holder, px=int(DONE_TTL_S * 1000)), False))


def clear(store: Store, keys: list[str]) -> bool:
    """Delete leases (collect, once their group is in the pending folder)."""
    if not keys:
        return True
    return bool(store.call("lease", lambda c: c.delete(*keys) >= 0, False))
