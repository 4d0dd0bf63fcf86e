"""The shared store against a real redis-server (tests/conformance/fleet/fleet_server.py): addresses, the client's
timeouts and retries, the breaker (a store down, one that never answers), the namespaced
fail-soft examples database under Hypothesis itself, the inbox (concurrent pushes keep every
finder), the outbox and push, and leases."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase, MultiplexedDatabase

from benchmarks.fleet import LocalRedis, NeverAnswers, refused_url
from conformance.fleet import inbox, lease
from conformance.fleet.database import FailSoftDatabase, count_examples
from conformance.fleet.namespace import Namespace, fleet_kernel_id
from conformance.fleet.store import TIMEOUT_S, Store, StoreError, address_from, parse_address
from tests.conformance.fleet.fleet_server import need_redis_py, redis_server  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[3]
NS_BROKEN = Namespace("conformance.mutation.catalogue:lse_base2", "gfx950", "cpu-x86_64", "6.0")
NS_CORRECT = Namespace("emulated", "gfx950", "cpu-x86_64", "6.0")


def _store(url: str) -> Store:
    return Store(parse_address(url, "test"))


def test_addresses_are_checked_and_never_shown_with_their_password() -> None:
    assert parse_address("redis://h:6379/2", "x").url == "redis://h:6379/2"
    assert parse_address("unix:///tmp/r.sock", "x").shown == "unix:///tmp/r.sock"
    assert parse_address("redis://default:s3cret@h:6379/0", "x").shown == "redis://default:***@h:6379/0"
    for bad, message in (("http://h", "expected redis://"), ("unix://", "socket's path"), ("redis://h:notaport", "bad port")):
        with pytest.raises(StoreError, match=message):
            parse_address(bad, "--shared-store")
    assert address_from(None, {}) is None
    assert address_from(None, {"CONFORMANCE_SHARED_STORE": "redis://e:1/0"}).source == "$CONFORMANCE_SHARED_STORE"  # type: ignore[union-attr]
    assert address_from("redis://o:1/0", {"CONFORMANCE_SHARED_STORE": "redis://e:1/0"}).url == "redis://o:1/0"  # type: ignore[union-attr]


def test_the_client_has_short_timeouts_and_no_retries() -> None:
    need_redis_py()
    client = _store("redis://127.0.0.1:1/0").client
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == TIMEOUT_S and kwargs["socket_connect_timeout"] <= TIMEOUT_S
    assert client.get_retry().get_retries() == 0
    overridden = _store("redis://127.0.0.1:1/0?socket_timeout=0.25").client
    assert overridden.connection_pool.connection_kwargs["socket_timeout"] == 0.25


def test_a_store_that_is_down_opens_the_breaker_once_and_is_not_called_again() -> None:
    need_redis_py()
    store = _store(refused_url())
    heard: list[str] = []
    store.breaker.listen(heard.append)
    calls: list[int] = []

    def call(client: object) -> str:
        calls.append(1)
        return str(client.ping())  # type: ignore[attr-defined]

    assert store.call("first", call, "local") == "local"
    assert store.call("second", call, "local") == "local"
    assert calls == [1] and store.down and store.breaker.failed_calls == 1
    assert len(heard) == 1 and "unreachable (ConnectionError" in heard[0] and heard[0].endswith("this run uses local state only")
    late: list[str] = []
    store.breaker.listen(late.append)
    assert late == heard


def test_a_store_that_never_answers_costs_one_timeout() -> None:
    need_redis_py()
    with NeverAnswers() as listener:
        store = _store(listener.url + "?socket_timeout=0.2&socket_connect_timeout=0.2")
        answers: list[object] = []
        worker = threading.Thread(target=lambda: answers.append(store.ping()), daemon=True)
        worker.start()
        worker.join(timeout=60)  # a backstop: the store's timeout ends it long before
        assert answers == [False]
        assert "TimeoutError" in store.breaker.reason
        assert store.ping() is False and store.breaker.failed_calls == 1


def test_the_examples_database_is_namespaced_and_fail_soft(redis_server: LocalRedis) -> None:  # noqa: F811
    store = _store(redis_server.url)
    broken, correct = FailSoftDatabase(store, NS_BROKEN), FailSoftDatabase(store, lambda: NS_CORRECT)
    broken.save(b"k", b"v1")
    broken.save(b"k", b"v2")
    correct.save(b"k", b"w")
    assert sorted(broken.fetch(b"k")) == [b"v1", b"v2"] and list(correct.fetch(b"k")) == [b"w"]
    broken.move(b"k", b"k2", b"v1")
    assert list(broken.fetch(b"k2")) == [b"v1"] and count_examples(store, NS_BROKEN) == 2
    correct.delete(b"k", b"w")
    assert count_examples(store, NS_CORRECT) == 0 and count_examples(store, NS_BROKEN) == 2
    redis_server.kill()
    assert list(broken.fetch(b"k")) == [] and broken.save(b"k", b"x") is None and store.down
    unresolved = FailSoftDatabase(_store(redis_server.url), lambda: (_ for _ in ()).throw(RuntimeError("no kernel here")))
    assert list(unresolved.fetch(b"k")) == [] and "no kernel here" in unresolved.unresolved


def _property(database: object, broken: dict[str, bool]) -> object:
    """The same Hypothesis test (one database key) whose 'kernel' is broken or not."""

    def kernel_check(x: int) -> None:
        assert not (broken["on"] and x >= 10), f"kernel fails on {x}"

    return settings(database=database, max_examples=60, deadline=None, derandomize=False)(given(st.integers(0, 1000))(kernel_check))


def _run(test: object) -> bool:
    try:
        test()  # type: ignore[operator]
    except AssertionError:
        return False
    return True


def test_a_correct_kernels_run_leaves_another_kernels_stored_failures(redis_server: LocalRedis) -> None:  # noqa: F811
    """Hypothesis deletes a stored example that no longer fails: namespaced per kernel, the
    correct kernel's run replays nothing of the broken one's; sharing one namespace, it would
    have deleted them."""
    store = _store(redis_server.url)
    broken = {"on": True}

    def database(namespace: Namespace) -> MultiplexedDatabase:
        return MultiplexedDatabase(InMemoryExampleDatabase(), FailSoftDatabase(store, namespace))

    assert _run(_property(database(NS_BROKEN), broken)) is False
    stored = count_examples(store, NS_BROKEN)
    assert stored >= 1
    broken["on"] = False
    assert _run(_property(database(NS_CORRECT), broken)) is True
    assert count_examples(store, NS_BROKEN) == stored
    assert _run(_property(database(NS_BROKEN), broken)) is True  # the same run without namespacing
    assert count_examples(store, NS_BROKEN) < stored


def test_hypothesis_alone_errors_on_a_store_that_is_down_and_the_fail_soft_layer_does_not() -> None:
    need_redis_py()
    from hypothesis.extra.redis import RedisExampleDatabase

    store = _store(refused_url())
    with pytest.raises(Exception, match="Connection refused|Error 111"):
        _property(MultiplexedDatabase(InMemoryExampleDatabase(), RedisExampleDatabase(store.client)), {"on": False})()  # type: ignore[operator]
    assert _run(_property(MultiplexedDatabase(InMemoryExampleDatabase(), FailSoftDatabase(store, NS_CORRECT)), {"on": False}))


_PUSHER = """
import sys
from conformance.fleet import inbox
from conformance.fleet.store import Store, parse_address
store = Store(parse_address(sys.argv[1], "test"))
record = inbox.InboxRecord.from_json_dict(__import__("json").loads(sys.argv[2]))
record.digest, record.finders, record.shrunk = sys.argv[3], {sys.argv[4]}, sys.argv[5] == "1"
sys.exit(0 if inbox.push(store, record) else 1)
"""


def _record(finder: str = "runner-a", shrunk: bool = False) -> inbox.InboxRecord:
    from conformance.records.corpus import new_entry, recipe_hash
    from tests.recipes import tiny

    recipe = tiny(seed=3)
    entry = json.loads(new_entry(recipe, caught="test", kernel="k", property_name="fuzz:differential").to_json())
    return inbox.InboxRecord(
        kernel=fleet_kernel_id("conformance.mutation.catalogue:lse_base2"),
        profile="gfx950",
        entry_json=json.dumps(entry, indent=2, sort_keys=True) + "\n",
        finding={"kind": "wrong result", "subject": "lse outside the bound", "detail": "x"},
        shrunk=shrunk,
        finders={finder},
        digest=recipe_hash(recipe),
    )


def test_runners_pushing_one_failure_at_once_keep_every_finder(redis_server: LocalRedis) -> None:  # noqa: F811
    record = _record()
    data = json.dumps(record.to_json_dict())
    runners = [
        subprocess.Popen(
            [sys.executable, "-c", _PUSHER, redis_server.url, data, record.digest, f"runner-{i}", "1" if i == 5 else "0"],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        for i in range(8)
    ]
    assert [p.wait(timeout=300) for p in runners] == [0] * 8
    store = _store(redis_server.url)
    pulled = inbox.pull(store)
    assert pulled is not None and len(pulled) == 1
    got = pulled[0]
    assert got.finders == {f"runner-{i}" for i in range(8)} and got.shrunk  # runner-5's shrunk mark stays
    assert got.finding == record.finding and got.hash == record.digest
    assert inbox.push(store, _record("runner-9", shrunk=False))  # a late unshrunk push does not undo it
    assert inbox.pull(store)[0].shrunk  # type: ignore[index]
    assert inbox.remove(store, [got.key]) and inbox.pull(store) == []


def test_an_unpushed_failure_waits_in_the_outbox_until_a_push(redis_server: LocalRedis, tmp_path: Path) -> None:  # noqa: F811
    from conformance.fleet.push import push_outbox

    down = _store(refused_url())
    pushed, queued = inbox.send(down, _record("a"), tmp_path)
    assert not pushed and queued is not None and queued.exists()
    inbox.send(down, _record("b", shrunk=True), tmp_path)  # the same hash again: one file, both finders, shrunk
    assert inbox.count_queued(tmp_path) == 1
    (inbox.outbox_dir(tmp_path) / "junk.json").write_text("{}")
    result = push_outbox(_store(redis_server.url), tmp_path)
    assert (result.pushed, result.left, len(result.unreadable)) == (1, 0, 1)
    got = inbox.pull(_store(redis_server.url))
    assert got is not None and got[0].finders == {"a", "b"} and got[0].shrunk
    assert inbox.count_queued(tmp_path) == 1  # only the unreadable file is left


def test_a_lease_keeps_a_second_runner_off_a_failure_group_until_it_expires(redis_server: LocalRedis) -> None:  # noqa: F811
    store = _store(redis_server.url)
    key = lease.lease_key("conformance:failures:k:p:", ("wrong result", "lse outside the bound"))
    first = lease.acquire(store, key, "runner-a", ttl_s=600)
    assert first.granted and not first.local
    second = lease.acquire(store, key, "runner-b", ttl_s=600)
    assert not second.granted and second.holder == "runner-a" and "holds its lease" in second.describe()
    assert lease.acquire(store, key, "runner-a", ttl_s=600).granted  # its holder again
    store.client.pexpire(key, 1)  # the holder died: its lease runs out
    give_up = time.monotonic() + 60
    while store.client.exists(key) and time.monotonic() < give_up:
        time.sleep(0.01)
    assert lease.acquire(store, key, "runner-b", ttl_s=600).granted
    assert lease.finish(store, key, "runner-b")
    done = lease.acquire(store, key, "runner-c", ttl_s=600)
    assert not done.granted and done.done and done.holder == "runner-b"
    assert lease.acquire(_store(refused_url()), key, "runner-d", ttl_s=1).local


def test_profiles_share_the_store_read_write_under_fleet_read_only_under_dev_and_not_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from hypothesis.database import ReadOnlyDatabase

    from conformance.judging import hypothesis_profiles

    need_redis_py()
    current = settings.get_current_profile_name()
    shared = FailSoftDatabase(_store(refused_url()), NS_CORRECT)
    monkeypatch.setenv("CONFORMANCE_FLEET_EXAMPLES", "7")
    try:
        hypothesis_profiles.register_profiles(shared)
        fleet, dev, ci = (settings.get_profile(name) for name in ("fleet", "dev", "ci"))
        assert fleet.max_examples == 7 and isinstance(fleet.database, MultiplexedDatabase)
        assert fleet.database._wrapped[1] is shared  # noqa: SLF001 - the composition is the contract
        assert isinstance(dev.database._wrapped[1], ReadOnlyDatabase) and dev.database._wrapped[1]._wrapped is shared  # noqa: SLF001
        assert ci.database is None
        monkeypatch.setenv("CONFORMANCE_FLEET_EXAMPLES", "0")
        with pytest.raises(ValueError, match="CONFORMANCE_FLEET_EXAMPLES='0'"):
            hypothesis_profiles.register_profiles(shared)
    finally:
        monkeypatch.delenv("CONFORMANCE_FLEET_EXAMPLES")
        hypothesis_profiles.register_profiles()
        settings.load_profile(current)
    assert settings.get_profile("ci").database is None and not isinstance(settings.get_profile("dev").database, MultiplexedDatabase)
