"""Nothing lost: a kernel that kills its own process leaves a crash entry, with and without xdist.

`suicidal_kernel` (an external `module:attr` kernel, numerics of the emulated gfx950 kernel)
SIGKILLs its process on its first call: the first call anywhere while the file named by
$CONFORMANCE_TEST_SUICIDE_SENTINEL does not exist (it creates the file, then dies); every later
call runs the emulated kernel. The suite runs in a subprocess against it; the crash must then be
in the pending corpus (a temporary one), the write-ahead file gone, and `replay` of the entry
must reproduce the crash from a child process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.durability import state
from conformance.records import crashes
from conformance.records.replay import child_env

REPO = Path(__file__).resolve().parents[3]
SENTINEL_ENV = "CONFORMANCE_TEST_SUICIDE_SENTINEL"
KERNEL = "tests.conformance.durability.test_crash_recovery:suicidal_kernel"
SELECT = ["conformance/suite/test_corpus.py", "-k", "edge-single-key or edge-one-head"]


def suicidal_kernel(
    q: Any,
    kv_cache: Any,
    indices: Any,
    indptr: Any,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    return_lse: bool = False,
    out: Any = None,
) -> Any:
    """The emulated kernel, except that the first call (see the module docstring) SIGKILLs the process."""
    sentinel = os.environ.get(SENTINEL_ENV)
    if sentinel:
        # created atomically: under xdist two workers' first calls may come at once, and only the
        # one that creates the file dies (a check-then-write let both die: two crash entries)
        try:
            fd = os.open(sentinel, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
    from kernel.registry import resolve

    kwargs = {"has_invalid": has_invalid, "return_lse": return_lse}
    if out is not None:
        kwargs["out"] = out
    return resolve("emulated")(q, kv_cache, indices, indptr, softmax_scale, **kwargs)


suicidal_kernel.profile = "gfx950"  # type: ignore[attr-defined]


def _env(tmp: Path) -> dict[str, str]:
    env = child_env(tmp / "state")
    env[state.PENDING_ENV] = str(tmp / "pending")
    env[SENTINEL_ENV] = str(tmp / "sentinel")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _pytest(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", *SELECT, "--conformance-kernel", KERNEL, "-q", "-p", "no:cacheprovider", *extra]
    return subprocess.run(command, cwd=REPO, env=_env(tmp), capture_output=True, text=True, timeout=300, check=False)


def _entries(tmp: Path) -> list[dict[str, Any]]:
    folder = tmp / "pending"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.rglob("*.json"))] if folder.is_dir() else []


def _leftovers(tmp: Path) -> list[Path]:
    return sorted((tmp / "state").glob("runs/*/inflight-*.json"))


def _check_entry(entry: dict[str, Any]) -> None:
    prov = entry["provenance"]
    assert prov["caught"].startswith(crashes.CRASH_CAUGHT_PREFIX + " ("), prov
    assert prov["kernel"] == KERNEL
    assert prov["property"] in ("corpus:edge-single-key", "corpus:edge-one-head")
    assert entry["expect"] == "conform"
    assert prov["crash"]["run"] and prov["crash"]["worker"]


@pytest.mark.long
def test_crash_under_xdist_is_recorded_by_the_controller(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "-n", "2")
    output = proc.stdout + proc.stderr
    assert (tmp_path / "sentinel").exists(), output
    assert proc.returncode == 1, output  # the crashed test fails, the other passes
    entries = _entries(tmp_path)
    assert len(entries) == 1, output
    _check_entry(entries[0])
    assert "xdist worker gw" in entries[0]["provenance"]["caught"]
    assert entries[0]["provenance"]["crash"].get("nodeid", "").startswith("conformance/suite/test_corpus.py::test_corpus_entry")
    assert not _leftovers(tmp_path), output
    assert "conformance report:" in output, output
    assert "conformance: 1 distinct failure in 1 failing test" in output and "[1] crash: the process running the kernel died" in output
    saved = next((tmp_path / "pending").rglob("*.json"))
    assert f"entry:  {saved}" in output and f"python -m conformance replay {saved}" in output, output
    report = json.loads(next((tmp_path / "state").glob("runs/*/report.json")).read_text(encoding="utf-8"))
    assert report["status"] == "crashes" and len(report["crashes"]) == 1
    assert Path(report["crashes"][0]["entry"]).exists()


def test_crash_without_xdist_is_recovered_by_the_next_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _pytest(tmp_path, "-n", "0")
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    left = _leftovers(tmp_path)
    assert len(left) == 1 and not _entries(tmp_path)
    recorded = json.loads(left[0].read_text(encoding="utf-8"))
    assert recorded["kernel"] == KERNEL

    second = _pytest(tmp_path, "-n", "0")  # the sentinel exists: this one passes
    output = second.stdout + second.stderr
    assert second.returncode == 0, output
    assert "conformance: recovered crash" in output, output
    entries = _entries(tmp_path)
    assert len(entries) == 1, output
    _check_entry(entries[0])
    assert f"left by run {left[0].parent.name}" in entries[0]["provenance"]["caught"]
    assert not _leftovers(tmp_path)
    assert entries[0]["recipe"] == recorded["recipe"]  # nothing lost: the recipe in flight, verbatim
    md = [p for p in (tmp_path / "state").glob("runs/*/report.md") if p.parent != left[0].parent]
    assert md and "Recovered at the start of this run" in md[0].read_text(encoding="utf-8")

    # replay reproduces the crash in a child process (crash entries are isolated by default)
    (tmp_path / "sentinel").unlink()
    monkeypatch.setenv(SENTINEL_ENV, str(tmp_path / "sentinel"))
    entry_path = next((tmp_path / "pending").rglob("*.json"))
    code = main(["replay", str(entry_path), "--kernel", KERNEL])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "the process died with signal 9 (SIGKILL) during the kernel call" in out, out
    assert f"in flight when it died: kernel {KERNEL}" in out
    assert "verdict: CRASH" in out
    # with the sentinel in place the kernel no longer dies: the same entry conforms
    code = main(["replay", str(entry_path), "--kernel", KERNEL, "--isolate"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verdict: CONFORMS" in out


def _write_inflight(run_dir: Path, worker: str, recipe: dict[str, Any] | None = None, text: str | None = None) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"inflight-{worker}.json"
    recipe = recipe or {"seed": 1, "n_q": 1, "heads": 1, "row_lengths": [3], "cache_rows": 8}
    path.write_text(
        text
        if text is not None
        else json.dumps({"recipe": recipe, "kernel": "k:x", "property": "differential", "device": "cpu", "started": 1.0}),
        encoding="utf-8",
    )
    return path


def test_live_runs_are_left_alone_and_bad_files_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.STATE_DIR_ENV, str(tmp_path / "state"))
    root = tmp_path / "state" / "runs"

    def per_kernel(kernel: str) -> Path:
        return tmp_path / "pending" / state.kernel_slug(kernel)

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = root / "live-run"
        _write_inflight(live, "gw0")
        live_session = {"pid": sleeper.pid, "host": __import__("socket").gethostname(), "finished": None}
        (live / crashes.SESSION_FILE).write_text(json.dumps(live_session), encoding="utf-8")
        dead = root / f"20000101-000000-{sleeper.pid}"  # no session.json: the run id's pid decides (alive)
        _write_inflight(dead, "main")
        bad = root / "old-run"
        bad_file = _write_inflight(bad, "gw1", text="{not json")
        precondition = root / "old-run-2"
        _write_inflight(precondition, "gw3", recipe={"seed": 1, "n_q": 1, "heads": 1, "row_lengths": [3], "cache_rows": 8, "writer": "raw"})
        found = crashes.recover_leftovers("current", per_kernel)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (live / "inflight-gw0.json").exists() and (dead / "inflight-main.json").exists()  # live owners: untouched
    assert not bad_file.exists() and (bad / "inflight-gw1.json.unreadable").exists()  # kept aside, never deleted
    by_run = {line["run"]: line for line in found}
    assert by_run["old-run"]["entry"] is None and "unreadable" in by_run["old-run"]["error"]
    entry = json.loads(Path(by_run["old-run-2"]["entry"]).read_text(encoding="utf-8"))
    assert entry["expect"] == "precondition" and entry["provenance"]["kernel"] == "k:x"
    # the owners are gone now: a later scan takes their files; the same crash twice is stored once
    found = crashes.recover_leftovers("current", per_kernel)
    assert {line["run"] for line in found} == {"live-run", dead.name}
    saved = list((tmp_path / "pending").rglob("*.json"))
    assert len(saved) == 2  # the raw-writer recipe + the shared one, once
    assert {p.parent.name for p in saved} == {"k-x"}  # filed under the kernel that crashed (k:x), whoever recovers
    assert found[0]["new"] != found[1]["new"]
    assert not list(root.glob("*/inflight-*.json"))
    logged = [json.loads(x) for x in (live / crashes.CRASHES_LOG).read_text(encoding="utf-8").splitlines()]
    assert logged[0]["entry"] and logged[0]["worker"] == "gw0"


def test_a_nested_session_gets_a_run_of_its_own(tmp_path: Path) -> None:
    """A pytest started from inside another session (same run id inherited) must not take over
    the live run's folder (its session.json decides which write-ahead files are leftovers)."""
    live = tmp_path / "state" / "runs" / "20260101-000000-1"
    live.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = {"pid": sleeper.pid, "host": __import__("socket").gethostname(), "finished": None, "kind": "pytest"}
        (live / crashes.SESSION_FILE).write_text(json.dumps(owner), encoding="utf-8")
        _write_inflight(live, "gw0")
        env = {**_env(tmp_path), state.RUN_ID_ENV: live.name}
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "tests/conformance/records/test_report.py"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads((live / crashes.SESSION_FILE).read_text(encoding="utf-8")) == owner
        assert (live / "inflight-gw0.json").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sorted(p.name for p in live.parent.iterdir()) == [live.name]  # the nested run recorded nothing: no folder left
