"""The shared store's address and its client: short timeouts, no client retries, one breaker.

The address comes from `--shared-store URL` (pytest: `--conformance-shared-store`) or
$CONFORMANCE_SHARED_STORE: `redis://[user[:password]@]host[:port][/db]`, `rediss://...` (TLS) or
`unix:///path/to/socket[?db=N]`, of a Redis or Valkey server. A password kept out of the URL
(so that it is never printed or stored in shell history) comes from $CONFORMANCE_SHARED_STORE_PASSWORD;
printed addresses never show one (`shown`).

The client (redis-py, the `fleet` extra) connects within CONNECT_TIMEOUT_S and waits at most
TIMEOUT_S for any answer (the URL's `socket_connect_timeout` / `socket_timeout` query options
override both); it never retries a call (redis-py's default retries add seconds per call against
a store that is down). Every call goes through `Store.call`: a failure opens the store's breaker
(conformance.fleet.breaker) and returns the caller's default; after that no call is tried. One
Store per address per process (`open_store`), so the examples database, the inbox and the lease
share its breaker.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from conformance.fleet.breaker import Breaker

STORE_ENV = "CONFORMANCE_SHARED_STORE"
PASSWORD_ENV = "CONFORMANCE_SHARED_STORE_PASSWORD"
SCHEMES = ("redis", "rediss", "unix")
CONNECT_TIMEOUT_S = 1.0
TIMEOUT_S = 2.0
EXTRA_HINT = "pip install 'sparse-mla-conformance[fleet]' (redis-py)"

T = TypeVar("T")


class StoreError(ValueError):
    """A store address that cannot be used (malformed, unknown scheme, redis-py missing); one line."""


@dataclass(frozen=True)
class StoreAddress:
    """Where the store is: `url` (as given) and `shown` (the same without its password)."""

    url: str
    source: str

    @property
    def shown(self) -> str:
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        user = parts.username or ""
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))


def parse_address(text: str, source: str) -> StoreAddress:
    """A StoreAddress from `text`; StoreError naming `source` when it is not a store URL."""
    value = str(text).strip()
    parts = urlsplit(value)
    if parts.scheme not in SCHEMES:
        raise StoreError(f"{source}: expected redis://host[:port][/db], rediss://... or unix:///path/to/socket, got {value!r}")
    if parts.scheme == "unix" and not parts.path:
        raise StoreError(f"{source}: a unix:// address needs the socket's path (unix:///path/to/socket), got {value!r}")
    if parts.scheme != "unix" and not parts.hostname:
        raise StoreError(f"{source}: no host in {value!r}")
    try:
        _ = parts.port
    except ValueError:
        raise StoreError(f"{source}: bad port in {value!r}") from None
    return StoreAddress(value, source)


def address_from(option: str | None, env: Mapping[str, str] | None = None) -> StoreAddress | None:
    """The store's address: the option when given, else $CONFORMANCE_SHARED_STORE, else None."""
    env = os.environ if env is None else env
    if option:
        return parse_address(option, "--shared-store")
    if env.get(STORE_ENV):
        return parse_address(env[STORE_ENV], f"${STORE_ENV}")
    return None


def redis_available() -> bool:
    """Whether redis-py (the `fleet` extra) can be imported."""
    import importlib.util

    return importlib.util.find_spec("redis") is not None


def make_client(address: StoreAddress, env: Mapping[str, str] | None = None) -> Any:
    """A redis-py client for `address` (module docstring: timeouts, no retries, bytes answers)."""
    env = os.environ if env is None else env
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        raise StoreError(f"the shared store {address.shown} needs redis-py: {EXTRA_HINT}") from None
    extra: dict[str, Any] = {}
    if urlsplit(address.url).password is None and env.get(PASSWORD_ENV):
        extra["password"] = env[PASSWORD_ENV]
    try:
        return redis.Redis.from_url(
            address.url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
            retry_on_error=[],
            retry_on_timeout=False,
            health_check_interval=0,
            **extra,
        )
    except ValueError as err:  # redis-py's own reading of the URL (a bad db number, option, ...)
        raise StoreError(f"{address.source}: {address.shown}: {err}") from None


class Store:
    """One store address in this process: its client (made on first use) and its breaker."""

    def __init__(self, address: StoreAddress, client: Any = None) -> None:
        self.address = address
        self.breaker = Breaker(f"shared store {address.shown}")
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = make_client(self.address)
            return self._client

    @property
    def down(self) -> bool:
        return self.breaker.open

    def call(self, what: str, fn: Callable[[Any], T], default: T) -> T:
        """`fn(client)`, or `default` when the breaker is open or the call fails (which opens it).
        StoreError (redis-py missing) is not swallowed: it is a usage error."""
        if self.breaker.open:
            return default
        client = self.client
        try:
            return fn(client)
        except StoreError:
            raise
        except Exception as err:  # noqa: BLE001 - redis errors, socket errors, a malformed answer: all mean "down"
            self.breaker.trip(err, what)
            return default

    def ping(self) -> bool:
        """Whether the store answers (a failure opens the breaker)."""
        return bool(self.call("ping", lambda c: c.ping(), False))

    def status(self) -> str:
        """One line: the address and whether it answered, or why not."""
        if self.breaker.open:
            return self.breaker.reason
        return f"shared store {self.address.shown}"


_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()


def open_store(address: StoreAddress) -> Store:
    """The process's Store for `address` (one per URL; its breaker is shared by every user)."""
    with _STORES_LOCK:
        store = _STORES.get(address.url)
        if store is None:
            store = _STORES[address.url] = Store(address)
        return store


def forget_stores() -> None:
    """Drop the process's Stores (a test that restarts a server at the same address)."""
    with _STORES_LOCK:
        _STORES.clear()
