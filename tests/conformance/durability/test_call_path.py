"""The per-call durability of the kernel call path, and what it costs: the write-ahead
record is in the file system (not fsynced) for exactly the duration of the call, and one
persistent watchdog thread serves every limited call, its hard limit still firing after many
quick calls with a later deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conformance.durability import wal
from conformance.durability.watchdog import limit_call

REPO = Path(__file__).resolve().parents[3]


def test_in_flight_record_exists_during_the_block_only_and_is_not_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    path = wal.inflight_path(tmp_path, "main")
    with wal.in_flight(tmp_path, "main", {"recipe": {"seed": 3}, "kernel": "k"}):
        assert json.loads(path.read_text()) == {"recipe": {"seed": 3}, "kernel": "k"}
        assert not list(tmp_path.glob(".*.tmp"))  # written by rename: no temporary left beside it
    assert not path.exists() and synced == []
    wal.atomic_write_text(tmp_path / "kept.json", "{}")  # the default (corpus entries, reports) is durable
    assert len(synced) == 1


def test_a_process_killed_in_the_block_leaves_its_record(tmp_path: Path) -> None:
    code = (
        "import os, signal, pathlib\n"
        "from conformance.durability.wal import in_flight\n"
        f"with in_flight(pathlib.Path({str(tmp_path)!r}), 'main', {{'recipe': 1}}):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert json.loads(wal.inflight_path(tmp_path, "main").read_text()) == {"recipe": 1}


def _watchdogs() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "conformance-call-watchdog"]


def test_one_watchdog_thread_serves_every_call() -> None:
    for _ in range(20):
        with limit_call(600):
            pass
    threads = _watchdogs()
    for _ in range(20):
        with limit_call(600, hard_only=True):
            pass
    assert len(threads) == 1 and _watchdogs() == threads and threads[0].is_alive()


def test_hard_limit_fires_after_quick_calls_with_a_later_deadline(tmp_path: Path) -> None:
    # the thread sleeps toward the 600 s deadline of the earlier calls: arming the 0.5 s call must
    # wake it (without, the hang would outlive the subprocess timeout and the test fail)
    marker = tmp_path / "marker"
    code = (
        "import time, pathlib\n"
        "from conformance.durability.watchdog import limit_call\n"
        "for _ in range(5):\n"
        "    with limit_call(600, hard_only=True):\n"
        "        pass\n"
        f"with limit_call(0.5, lambda s: pathlib.Path({str(marker)!r}).write_text(str(s)), hard_only=True):\n"
        "    time.sleep(300)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert float(marker.read_text()) >= 0.5


def test_a_forked_child_gets_its_own_watchdog(tmp_path: Path) -> None:
    with limit_call(600, hard_only=True):
        pass  # the parent's thread exists
    marker = tmp_path / "marker"
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is gone; a hang must still be cut
        try:
            with limit_call(0.5, lambda s: marker.write_text(str(s)), hard_only=True):
                threading.Event().wait(300)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert float(marker.read_text()) >= 0.5


def test_record_checksums_see_every_byte_at_any_alignment() -> None:
    import torch

    from conformance.durability.input_guard import CPU_CHUNK_RECORDS, record_checksums
    from kernel.record import RECORD_BYTES

    rows = CPU_CHUNK_RECORDS + 5  # two chunks, the last one partial
    kv = torch.randint(0, 256, (rows, RECORD_BYTES), generator=torch.Generator().manual_seed(4), dtype=torch.int32).to(torch.uint8)
    before = record_checksums(kv)
    for byte in range(RECORD_BYTES):  # one bit of one byte, in a different record each time
        row = (byte * 37) % rows
        changed = kv.clone()
        changed[row, byte] ^= 1 << (byte % 8)
        assert torch.nonzero(record_checksums(changed) != before).flatten().tolist() == [row], byte
    for offset in (1, 4):  # a misaligned view of the same bytes
        buf = torch.zeros(rows * RECORD_BYTES + offset, dtype=torch.uint8)
        view = buf[offset:].view(rows, RECORD_BYTES)
        view.copy_(kv)
        assert torch.equal(record_checksums(view), before)
    picked = torch.tensor([rows - 1, 0, 7])
    assert torch.equal(record_checksums(kv, picked), before[picked])
