"""Processes standing in for a fleet's runners, each with its own folder and state, sharing a real
redis-server (tests/conformance/fleet/fleet_server.py): a pytest runner replays another's failure from the store,
a correct kernel's runner leaves another kernel's stored failures alone, a store lost mid-session
or one that never answers costs no verdict and is said, sharded fuzz campaigns push every failure
the moment they find it (one killed mid-shrink loses nothing), `corpus collect` turns it all into
one pending entry per failure group and `corpus push` sends what a run could not.

Kept cheap: a tiny differential property (one query row, one head, at most 4 keys) in the pytest
runners; as the broken kernel, a kernel file in each runner's folder that raises on every call
(its failure costs no reference and little shrinking; the fleet names it by its relative path, so
every runner's copy shares one namespace; one runner's copy hangs once it shrinks, so that it is
killed mid-shrink at a known point); emulated as the correct kernel; all on the CPU. The
catalogue's lse_base2 on the real suite is `python -m benchmarks fleet`'s. No assertion depends
on how fast anything runs (timeouts are backstops)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.fleet import LocalRedis, NeverAnswers
from conformance.durability.state import scrubbed_env
from conformance.fleet import inbox
from conformance.fleet.database import count_examples
from conformance.fleet.store import Store, parse_address
from tests.conformance.fleet.fleet_server import need_redis_py, redis_server  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[3]
RAISING = "raising_kernel.py:kernel"
CORRECT = "emulated"
BACKSTOP_S = 600

TINY = '''
import os
import signal

from hypothesis import given

from conformance.judging.checks import differential
from strategies.hypothesis_recipes import recipes


def test_store_goes_away():
    """Kills the store when the session asks for it (a store lost mid-session)."""
    pid = os.environ.get("KILL_STORE_PID")
    if pid:
        os.kill(int(pid), signal.SIGKILL)


@given(recipe=recipes(max_n_q=1, max_row=4, max_total_keys=4, max_heads=1))
def test_tiny_differential(target, recipe):
    differential(target, recipe, "tiny_differential")
'''


RAISING_KERNEL = '''
"""A kernel broken on purpose: every call raises; with RAISING_KERNEL_HANGS set, every call after
the first hangs instead (a runner stuck while it shrinks its failure, until it is killed)."""
import os
import time

CALLS = []


def kernel(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
    CALLS.append(1)
    if len(CALLS) > 1 and os.environ.get("RAISING_KERNEL_HANGS"):
        time.sleep(3600)
    raise RuntimeError("broken on purpose")


kernel.profile = "gfx950"
'''


def _runner(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "test_tiny.py").write_text(TINY)
    (folder / "raising_kernel.py").write_text(RAISING_KERNEL)
    return folder


def _env(folder: Path, **extra: str) -> dict[str, str]:
    env = scrubbed_env(dict(os.environ), ("CONFORMANCE_PENDING_DIR", "CONFORMANCE_SHARED_STORE", "CONFORMANCE_SHARD"))
    env.update(PYTHONPATH=str(ROOT), CONFORMANCE_DIR=str(folder / ".conformance"), HYPOTHESIS_STORAGE_DIRECTORY=str(folder / ".hypothesis"))
    env.update({"CONFORMANCE_FLEET_EXAMPLES": "20", "PYTHONUNBUFFERED": "1", **extra})
    return env


def _pytest(folder: Path, kernel: str, store_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_tiny.py", "--conformance-kernel", kernel]
    command += ["--conformance-device", "cpu", "--hypothesis-profile", "fleet", "--conformance-shared-store", store_url]
    command += ["--hypothesis-show-statistics", *args]
    return subprocess.run(command, cwd=folder, env=_env(folder, **env), capture_output=True, text=True, timeout=BACKSTOP_S)


def _pending(folder: Path) -> list[Path]:
    return sorted((folder / ".conformance" / "pending").rglob("*.json"))


def _reuse_phase(stdout: str) -> str:
    found = re.search(r"during reuse phase.*?\n(?:.*\n){0,2}?\s*- (\d+ passing, \d+ failing)", stdout)
    return found.group(1) if found else ""


def _namespace(kernel: str) -> object:
    """The examples namespace of a runner's kernel (a kernel file: as the fleet names it, by its relative path)."""
    import hypothesis
    import torch

    from conformance.fleet.namespace import Namespace, device_architecture, namespace_for
    from conformance.judging.target import build_target

    if kernel == RAISING:
        return Namespace(RAISING, "gfx950", device_architecture(torch.device("cpu")), hypothesis.__version__)
    return namespace_for(kernel, build_target(kernel, device="cpu", check_only=True).profile.name, torch.device("cpu"))


@pytest.mark.long
def test_a_runner_replays_anothers_failure_and_a_correct_kernel_deletes_none(redis_server: LocalRedis, tmp_path: Path) -> None:  # noqa: F811
    store = Store(parse_address(redis_server.url, "test"))
    a = _runner(tmp_path, "runner-a")
    first = _pytest(a, RAISING, redis_server.url, "-k", "tiny")
    assert first.returncode == 1, first.stdout[-3000:]
    assert "examples read and written" in first.stdout and "failures pushed to its inbox" in first.stdout
    assert _reuse_phase(first.stdout) in ("", "0 passing, 0 failing")  # nothing to replay yet
    stored = count_examples(store, _namespace(RAISING))  # type: ignore[arg-type]
    assert stored >= 1
    [found_by_a] = _pending(a)
    pulled = inbox.pull(store)
    assert pulled is not None and [r.hash for r in pulled] == [found_by_a.stem] and pulled[0].shrunk

    b = _runner(tmp_path, "runner-b")
    second = _pytest(b, RAISING, redis_server.url, "-k", "tiny")
    assert second.returncode == 1, second.stdout[-3000:]
    assert _reuse_phase(second.stdout) == "0 passing, 1 failing", second.stdout[-3000:]
    assert [p.name for p in _pending(b)] == [found_by_a.name]  # the same minimal recipe, replayed
    assert len(inbox.pull(store)[0].finders) == 2  # type: ignore[index]

    c = _runner(tmp_path, "runner-c")
    third = _pytest(c, CORRECT, redis_server.url, "-k", "tiny", CONFORMANCE_FLEET_EXAMPLES="5")
    assert third.returncode == 0, third.stdout[-3000:]
    assert count_examples(store, _namespace(RAISING)) == stored  # type: ignore[arg-type]
    assert _reuse_phase(third.stdout) in ("", "0 passing, 0 failing")


def test_a_store_lost_mid_session_costs_no_verdict_and_is_said(redis_server: LocalRedis, tmp_path: Path) -> None:  # noqa: F811
    assert redis_server.process is not None
    runner = _runner(tmp_path, "runner")
    done = _pytest(runner, CORRECT, redis_server.url, KILL_STORE_PID=str(redis_server.process.pid), CONFORMANCE_FLEET_EXAMPLES="5")
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"shared store {redis_server.url}: examples read and written" in done.stdout  # reachable at the start
    assert "unreachable (" in done.stdout and "this run uses local state only" in done.stdout  # lost, and said at the end
    assert "2 passed" in done.stdout
    required = _pytest(runner, CORRECT, redis_server.url, "--conformance-require-shared-store")
    assert required.returncode == 4 and "unreachable" in required.stderr and "--conformance-require-shared-store" in required.stderr


def _fuzz(folder: Path, store_url: str, shard: str, *args: str, kernel: str = RAISING) -> list[str]:
    command = [sys.executable, "-m", "conformance", "fuzz", "--kernel", kernel, "--device", "cpu", "--hypothesis-profile", "ci"]
    command += ["--property", "differential", "--max-chunks", "1", "--chunk-examples", "20", "--seconds", "300", "--shard", shard]
    return [*command, "--shared-store", store_url, *args]


def _popen(command: list[str], folder: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(command, cwd=folder, env=_env(folder, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _summary(folder: Path) -> dict[str, object]:
    [path] = (folder / ".conformance" / "runs").glob("fuzz-*/fuzz-summary.json")
    return json.loads(path.read_text())


def test_sharded_campaigns_push_every_failure_and_collect_makes_one_entry_per_group(
    redis_server: LocalRedis,  # noqa: F811
    tmp_path: Path,
) -> None:
    store = Store(parse_address(redis_server.url, "test"))
    client = store.client
    # shard 2/2 finds the bug and holds its group's lease while shrinking; it is killed mid-shrink
    killed, survivor = _runner(tmp_path, "runner-2"), _runner(tmp_path, "runner-1")
    victim = _popen(_fuzz(killed, redis_server.url, "2/2", "--shrink-seconds", "600", kernel=RAISING), killed, RAISING_KERNEL_HANGS="1")
    give_up = time.monotonic() + BACKSTOP_S

    def found_and_leased() -> bool:
        finders = [f for key in client.smembers(inbox.INDEX_KEY) for f in client.smembers(inbox.finders_key(key.decode()))]
        return any(b"shard 2/2" in f for f in finders) and bool(client.keys("conformance:failures:*lease:*"))

    while not found_and_leased():
        assert victim.poll() is None and time.monotonic() < give_up, "shard 2/2 ended or found nothing"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=BACKSTOP_S)
    [raw] = _pending(killed)
    assert json.loads(raw.read_text())["provenance"]["unshrunk"] is True
    assert inbox.count_queued(killed / ".conformance") == 0  # pushed before it was killed
    [record] = inbox.pull(store)  # type: ignore[misc]
    assert record.hash == raw.stem and not record.shrunk
    [lease_key] = client.keys("conformance:failures:*lease:*")
    assert b"shard 2/2" in client.get(lease_key)
    client.pexpire(lease_key, 1)  # its lease runs out: the next finder takes it

    process = _popen(_fuzz(survivor, redis_server.url, "1/2", "--shrink-seconds", "3", kernel=RAISING), survivor)
    out, err = process.communicate(timeout=BACKSTOP_S)
    assert process.returncode == 1, out[-3000:] + err[-3000:]
    assert _summary(survivor)["seeds"] == [0]  # ci, chunk 0 of shard 1/2 (shard 2/2's is 1)
    assert "lease: shrinking it here" in out and "pushed to the store's inbox (shrunk)" in out
    pulled = inbox.pull(store)
    assert pulled is not None and any(r.shrunk for r in pulled)
    groups = {(r.finding["kind"], r.finding["subject"]) for r in pulled}
    by_hash = {r.hash: r for r in pulled}
    for folder, tag in ((killed, "shard 2/2"), (survivor, "shard 1/2")):
        for path in _pending(folder):  # every failure a runner kept was pushed, with it as a finder
            assert any(tag in f for f in by_hash[path.stem].finders), (path, by_hash[path.stem].finders)

    pending = tmp_path / "collected"
    collected = subprocess.run(
        [sys.executable, "-m", "conformance", "corpus", "collect", "--shared-store", redis_server.url, "--pending", str(pending)]
        + [str(killed / ".conformance"), str(survivor / ".conformance"), "--device", "cpu", "--minimise-seconds", "30"],
        cwd=survivor,  # the kernel file's folder: the fleet names it by its path relative to here
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=BACKSTOP_S,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    entries = sorted(pending.rglob("*.json"))
    assert len(entries) == len(groups) >= 1, collected.stdout
    finders = {f for e in entries for f in json.loads(e.read_text())["provenance"]["finders"]}
    assert all(any(tag in f for f in finders) for tag in ("shard 1/2", "shard 2/2")), finders
    assert client.scard(inbox.INDEX_KEY) == 0 and not client.keys("conformance:failures:*lease:*")  # drained


def test_a_store_that_never_answers_leaves_the_failures_for_corpus_push(redis_server: LocalRedis, tmp_path: Path) -> None:  # noqa: F811
    need_redis_py()
    runner = _runner(tmp_path, "runner")
    with NeverAnswers() as listener:
        url = listener.url + "?socket_timeout=0.5"
        done = subprocess.run(
            _fuzz(runner, url, "1/1", "--shrink-seconds", "2", kernel=RAISING),
            cwd=runner,
            env=_env(runner),
            capture_output=True,
            text=True,
            timeout=BACKSTOP_S,
        )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "unreachable (TimeoutError" in done.stdout and "this run uses local state only" in done.stdout
    waiting = inbox.count_queued(runner / ".conformance")
    assert waiting >= 1 and f"{waiting} entr" in done.stdout and "unpushed (python -m conformance corpus push)" in done.stdout
    pushed = subprocess.run(
        [sys.executable, "-m", "conformance", "corpus", "push", "--shared-store", redis_server.url],
        cwd=runner,
        env=_env(runner),
        capture_output=True,
        text=True,
        timeout=BACKSTOP_S,
    )
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert f"pushed {waiting} entr" in pushed.stdout and inbox.count_queued(runner / ".conformance") == 0
    assert len(inbox.pull(Store(parse_address(redis_server.url, "test"))) or []) == waiting
