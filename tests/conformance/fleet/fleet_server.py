"""The fleet tests' own Redis server: a `redis_server` fixture that starts Debian's redis-server on
a unix socket in a fresh folder (benchmarks.fleet.LocalRedis) and stops it when the test ends.

Where redis-server or redis-py is missing, a test that needs them fails under CI (.ci/run
installs both: CI is set there) and is skipped with the reason elsewhere."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from benchmarks.fleet import LocalRedis


def need(what: str) -> None:
    """Fail under CI, skip elsewhere: `what` is missing."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI installs it: .ci/run)", pytrace=False)
    pytest.skip(what)


def need_redis_py() -> None:
    from conformance.fleet.store import redis_available

    if not redis_available():
        need("redis-py is not installed (the `fleet` extra)")


@pytest.fixture
def redis_server() -> Iterator[LocalRedis]:
    """A running redis-server of this test (unix socket), stopped at the test's end."""
    need_redis_py()
    try:
        server = LocalRedis()
    except FileNotFoundError as err:
        need(str(err))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        from conformance.fleet.store import forget_stores

        forget_stores()
