"""The examples database a fleet shares: Hypothesis's own RedisExampleDatabase, namespaced and fail-soft.

`FailSoftDatabase(store, namespace)` is an ExampleDatabase over Hypothesis's stock
`hypothesis.extra.redis.RedisExampleDatabase`, its keys under the namespace's examples prefix
(conformance.fleet.namespace), every call through the store's breaker (conformance.fleet.store):
while the store answers it behaves as the RedisExampleDatabase does; the first call that fails
(refused, timed out) opens the breaker, says so once, and from then on fetch answers nothing and
save / delete / move do nothing. Hypothesis itself raises on a store that is down (even inside a
MultiplexedDatabase) and waits forever on one that never answers; this layer is what keeps a
test's verdict independent of the store. It relays no change events from the store (its
listening is off): a runner learns of the others' examples when a test starts, by fetching.

The namespace may be a callable, resolved on first use: an xdist worker knows its device's
architecture only once it has its GPU. A namespace that cannot be resolved (the kernel cannot be
built here: the tests say why) leaves the database empty and silent.

The suite's Hypothesis profiles (conformance.judging.hypothesis_profiles) put it behind the local
folder: read and written under `fleet`, read-only under `dev`, absent under `ci`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hypothesis.database import ExampleDatabase

from conformance.fleet.namespace import Namespace
from conformance.fleet.store import Store


class FailSoftDatabase(ExampleDatabase):
    """Hypothesis examples in the shared store under one namespace, fail-soft (module docstring)."""

    def __init__(self, store: Store, namespace: Namespace | Callable[[], Namespace]) -> None:
        super().__init__()
        self.store = store
        self._namespace = namespace
        self._inner: Any = None
        self.unresolved = ""  # why the namespace could not be resolved ("" while it can)

    def __repr__(self) -> str:
        return f"FailSoftDatabase({self.store.address.shown})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FailSoftDatabase) and other.store is self.store and other._namespace == self._namespace

    __hash__ = object.__hash__

    @property
    def namespace(self) -> Namespace | None:
        """The resolved namespace (resolving it now), or None when it cannot be resolved."""
        if isinstance(self._namespace, Namespace):
            return self._namespace
        if self.unresolved:
            return None
        try:
            self._namespace = self._namespace()
        except Exception as err:  # noqa: BLE001 - the target's own tests report it
            self.unresolved = f"{type(err).__name__}: {err}"
            return None
        return self._namespace

    def _redis_db(self) -> Any:
        if self._inner is None:
            namespace = self.namespace
            if namespace is None:
                return None
            from hypothesis.extra.redis import RedisExampleDatabase

            prefix = namespace.examples_prefix
            self._inner = RedisExampleDatabase(self.store.client, key_prefix=prefix, listener_channel=(prefix + b"changes").decode())
        return self._inner

    def _call(self, what: str, fn: Callable[[Any], Any], default: Any) -> Any:
        if self.store.down:
            return default
        inner = self._redis_db()
        if inner is None:
            return default
        return self.store.call(what, lambda _client: fn(inner), default)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return iter(self._call("fetch", lambda db: list(db.fetch(key)), []))

    def save(self, key: bytes, value: bytes) -> None:
        self._call("save", lambda db: db.save(key, value), None)

    def delete(self, key: bytes, value: bytes) -> None:
        self._call("delete", lambda db: db.delete(key, value), None)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._call("move", lambda db: db.move(src, dest, value), None)

    def _start_listening(self) -> None:
        """No change events from the store (module docstring)."""

    def _stop_listening(self) -> None:
        """Nothing to stop."""


SUB_KEYS = (b".secondary", b".pareto")  # Hypothesis's keys beside a test's failures: other interesting and target-best examples


def count_examples(store: Store, namespace: Namespace, *, failures_only: bool = False) -> int:
    """How many example values the store holds under `namespace`: every Hypothesis key (a test's
    failures, its secondary and pareto examples), or with `failures_only` the failures' keys alone
    (what a later run replays first and deletes when they no longer fail); -1 when the store
    does not answer."""

    def count(client: Any) -> int:
        total = 0
        for key in client.scan_iter(match=namespace.examples_prefix + b"*", count=1000):
            if failures_only and key.endswith(SUB_KEYS):
                continue
            if client.type(key) == b"set":
                total += int(client.scard(key))
        return total

    return store.call("count", count, -1)
