"""Crash recovery: a write-ahead file left by a dead process becomes a crash corpus entry.

Before each kernel call `conformance.judging.harness.run_kernel` writes the recipe to
`<state dir>/runs/<run id>/inflight-<worker>.json` and removes it when the call returns. A file
still there after its process is gone means the process died inside the kernel call (GPU fault,
abort, SIGKILL, out-of-memory killer). This module turns each such file into a corpus entry:

- at the start of a pytest session (the xdist controller, or the only process without xdist)
  `recover_leftovers` scans every *earlier* run folder (never the current one, never a run whose
  owning process is still alive on this host) and records each leftover;
- with xdist, when a worker goes down with an error, the controller calls `recover_worker` at
  once for that worker's file in the current run folder.

Each crash becomes an entry (conformance.records.corpus format) in the pending corpus (or, with
`--no-capture-corpus`, in `<run>/crashes/`): expect "conform" or "precondition" (as recorded in
the write-ahead file when it says so, else inferred from the recipe, see `infer_expect`),
provenance caught = "process died during the kernel call (<how>)", kernel, property, plus a
"crash" object (run, worker, device, start time of the call, test node id when known) and its
"finding" (conformance.judging.finding: kind "crash", subject DIED, or kind "hang", subject HUNG
for a call the watchdog marked hung; the detail says how). One JSON line per crash is appended to
`crashes.jsonl` of the run where the crash happened and, for a crash recovered later, of the
recovering run (with "origin_run"), for the run report; it carries "kind" and "finding" too. The entry
is written atomically before the write-ahead file is removed, so a crash of the recovery itself
loses nothing either; an unreadable write-ahead file is renamed `*.unreadable`, never deleted.

Sessions mark their run folder with `session.json` (pid, host, start, finish) so that a session
never takes the write-ahead file of another session that is still running.

Folders and environment variables: conformance.durability.state.
This module imports torch only when it has a crash to record.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance.durability.jsonlines import append_json_lines
from conformance.durability.state import runs_root
from conformance.durability.wal import atomic_write_text

CRASH_CAUGHT_PREFIX = "process died during the kernel call"
SESSION_FILE = "session.json"
CRASHES_LOG = "crashes.jsonl"


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Session markers


def mark_session_start(run_dir: Path, *, kind: str, kernel: str | None = None, extra: dict[str, Any] | None = None) -> None:
    """Write `run_dir/session.json` (atomically): this process owns the run while it lives.

    kind: "pytest", "fuzz", ...; kernel: the kernel option given (None: the default one)."""
    data: dict[str, Any] = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "kind": kind,
        "kernel": kernel,
        "run": run_dir.name,
        "started": time.time(),
        "finished": None,
    }
    if extra:
        data.update(extra)
    atomic_write_text(run_dir / SESSION_FILE, json.dumps(data, sort_keys=True, indent=1) + "\n")


def read_session(run_dir: Path) -> dict[str, Any] | None:
    """The parsed `session.json` of a run, or None when absent or unreadable."""
    try:
        data = json.loads((run_dir / SESSION_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def mark_session_finish(run_dir: Path, *, exitstatus: int | None = None) -> None:
    """Record the end of the session in `run_dir/session.json` (no-op without one)."""
    data = read_session(run_dir)
    if data is None:
        return
    data["finished"] = time.time()
    data["exitstatus"] = exitstatus
    atomic_write_text(run_dir / SESSION_FILE, json.dumps(data, sort_keys=True, indent=1) + "\n")


def owned_by_another_session(run_dir: Path) -> bool:
    """True when `run_dir/session.json` names another process of this host that is still running
    and has not finished (a session must not share that run's folder)."""
    session = read_session(run_dir)
    if session is None or session.get("finished") or session.get("host") not in (None, socket.gethostname()):
        return False
    pid = session.get("pid")
    return isinstance(pid, int) and pid != os.getpid() and _pid_alive(pid)


def run_is_live(run_dir: Path) -> bool:
    """True when the process owning `run_dir` may still be running (its write-ahead files are
    then in use, not leftovers): an unfinished session.json of a live pid on this host, or of
    another host (which cannot be checked from here); without session.json, a run id of the
    form "<YYYYmmdd>-<HHMMSS>-<pid>" (conformance.judging.harness) naming a live process."""
    session = read_session(run_dir)
    if session is not None:
        if session.get("finished"):
            return False
        if session.get("host") not in (None, socket.gethostname()):
            return True
        pid = session.get("pid")
        return isinstance(pid, int) and pid != os.getpid() and _pid_alive(pid)
    match = re.search(r"\d{8}-\d{6}-(\d+)$", run_dir.name)
    if match:
        pid = int(match.group(1))
        return pid != os.getpid() and _pid_alive(pid)
    return False


# ---------------------------------------------------------------------------------------------
# Crash entries


def infer_expect(recipe_fields: dict[str, Any]) -> str:
    """ "precondition" when a recipe (plain JSON fields) breaks a precondition by construction (raw
    or sglang writer, latent above the cap, corruptions, negative entries without has_invalid), else
    "conform". Used when a write-ahead file does not record the expectation."""
    if recipe_fields.get("writer") in ("raw", "sglang") or recipe_fields.get("latent") == "above_cap" or recipe_fields.get("corruptions"):
        return "precondition"
    if recipe_fields.get("invalid_pattern", "none") != "none" and not recipe_fields.get("has_invalid", False):
        return "precondition"
    return "conform"


def is_crash_entry(provenance: dict[str, Any]) -> bool:
    """True for the provenance of a crash entry."""
    return bool(provenance.get("crash")) or str(provenance.get("caught", "")).startswith(CRASH_CAUGHT_PREFIX)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:-]+", "-", text).strip("-")[:80] or "unknown"


def crash_entry(inflight: dict[str, Any], *, how: str, run: str, worker: str, nodeid: str | None = None) -> Any:
    """A conformance.records.corpus.CorpusEntry for a parsed write-ahead record.

    Raises conformance.records.corpus.CorpusError / strategies.recipe.RecipeError when the record holds
    no valid recipe."""
    from conformance.records.corpus import SUITE_VERSION, CorpusEntry, recipe_hash
    from strategies.recipe import Recipe

    recipe = Recipe.from_json_dict(inflight.get("recipe"))
    expect = inflight.get("expect")  # not written by conformance.judging.harness today: inferred below
    if expect not in ("conform", "precondition"):
        expect = infer_expect(recipe.to_json_dict())
    prop = str(inflight.get("property") or "unknown")
    kernel = str(inflight.get("kernel") or "unknown")
    crash: dict[str, Any] = {"run": run, "worker": worker, "device": inflight.get("device"), "call_started": inflight.get("started")}
    nodeid = nodeid or inflight.get("nodeid")
    if not nodeid and isinstance(inflight.get("pytest_current_test"), str):  # "path::name (call)"
        nodeid = inflight["pytest_current_test"].rsplit(" (", 1)[0]
    if nodeid:
        crash["nodeid"] = nodeid
    kind = "crash"
    if inflight.get("device_fault"):
        crash["device_fault"] = inflight["device_fault"]
        how = f"device fault: {inflight['device_fault']}; {how}"
    if inflight.get("hung_after_s") is not None:
        kind = "hung"
        crash["hung_after_s"] = inflight["hung_after_s"]
        how = f"hung: no return within {inflight.get('call_timeout_s')} s, killed after {inflight['hung_after_s']} s; {how}"
    finding = crash_finding(how, hung=kind == "hung")
    return CorpusEntry(
        name=f"{kind}-{_safe(prop)}-{recipe_hash(recipe)}",
        recipe=recipe,
        expect=expect,
        provenance={
            "caught": f"{CRASH_CAUGHT_PREFIX} ({how}" + (f"; test {nodeid})" if nodeid else ")"),
            "kernel": kernel,
            "property": prop,
            "date": datetime.date.today().isoformat(),
            "suite_version": SUITE_VERSION,
            "crash": crash,
            "finding": finding.to_json_dict(),
        },
    )


def crash_finding(how: str, *, hung: bool) -> Any:
    """The finding of a crash entry (conformance.judging.finding.Finding): a hang when the
    watchdog marked the call hung, else a crash; `how` is its detail."""
    from conformance.judging.finding import CRASH, DIED, HANG, HUNG, Finding

    return Finding(HANG, HUNG, how) if hung else Finding(CRASH, DIED, how)


def _existing_crash(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and isinstance(data.get("provenance"), dict) and is_crash_entry(data["provenance"])


def save_crash_entry(entry: Any, destination: Path) -> tuple[Path, bool]:
    """Write a crash entry atomically as `<recipe hash>.json` in `destination`; returns (path,
    written). The same crash already saved there is kept (not written again); a non-crash entry
    of the same recipe is kept too and the crash goes to `<hash>-crash.json`."""
    from conformance.records.corpus import recipe_hash

    digest = recipe_hash(entry.recipe)
    for name in (f"{digest}.json", f"{digest}-crash.json"):
        path = destination / name
        if not path.exists():
            atomic_write_text(path, entry.to_json())
            return path, True
        if _existing_crash(path):
            return path, False
    path = destination / f"{digest}-crash.json"  # both taken by non-crash entries: overwrite the variant
    atomic_write_text(path, entry.to_json())
    return path, True


def _append_log(run_dir: Path, line: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    append_json_lines(run_dir / CRASHES_LOG, [line], durable=True)


def record_crash(
    inflight_file: Path,
    *,
    how: str,
    destination: Path | Callable[[str], Path],
    nodeid: str | None = None,
    recovering_run: Path | None = None,
) -> dict[str, Any] | None:
    """Turn one write-ahead file into a crash entry in `destination` (a folder, or a function of
    the crashed call's kernel spec giving its folder), log it, remove the file.

    Returns the log line (entry path, kernel, property, ...), or None when the file vanished
    meanwhile. An unreadable file is renamed `<file>.unreadable` and logged with entry None.
    `recovering_run`: the run folder of the session doing the recovery when it is not the run
    where the crash happened (the crash is logged in both)."""
    run_dir = inflight_file.parent
    worker = inflight_file.stem.removeprefix("inflight-")
    try:
        text = inflight_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    line: dict[str, Any] = {"time": time.time(), "run": run_dir.name, "worker": worker, "how": how, "nodeid": nodeid}
    try:
        inflight = json.loads(text)
        entry = crash_entry(inflight if isinstance(inflight, dict) else {}, how=how, run=run_dir.name, worker=worker, nodeid=nodeid)
    except Exception as err:  # noqa: BLE001 - any unreadable record is kept aside, never lost
        kept = inflight_file.with_name(inflight_file.name + ".unreadable")
        os.replace(inflight_file, kept)
        finding = crash_finding(f"{how}; unreadable write-ahead file kept as {kept}", hung=False)
        line.update(
            {
                "entry": None,
                "error": f"unreadable write-ahead file kept as {kept}: {err}",
                "kind": finding.kind,
                "finding": finding.to_json_dict(),
            }
        )
    else:
        folder = destination(str(entry.provenance["kernel"])) if callable(destination) else destination
        folder.mkdir(parents=True, exist_ok=True)
        path, written = save_crash_entry(entry, folder)
        line.update(
            {
                "entry": str(path),
                "new": written,
                "kernel": entry.provenance["kernel"],
                "property": entry.provenance["property"],
                "expect": entry.expect,
                "name": entry.name,
                "caught": entry.provenance["caught"],
                "kind": entry.provenance["finding"]["kind"],
                "finding": entry.provenance["finding"],
            }
        )
        inflight_file.unlink(missing_ok=True)
    _append_log(run_dir, line)
    if recovering_run is not None and recovering_run.resolve() != run_dir.resolve():
        _append_log(recovering_run, {**line, "origin_run": run_dir.name})
    return line


def annotate_nodeid(line: dict[str, Any], nodeid: str) -> None:
    """Add the crashed test's node id to an entry written by `record_crash` (atomic rewrite)."""
    path = line.get("entry")
    if not path or not line.get("new"):
        return
    entry_path = Path(path)
    try:
        data = json.loads(entry_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return
    crash = data.get("provenance", {}).get("crash")
    if isinstance(crash, dict) and not crash.get("nodeid"):
        crash["nodeid"] = nodeid
        data["provenance"]["caught"] = f"{CRASH_CAUGHT_PREFIX} ({line.get('how')}; test {nodeid})"
        line["caught"] = data["provenance"]["caught"]
        atomic_write_text(entry_path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    line["nodeid"] = nodeid


def recover_worker(run_dir: Path, worker: str, *, error: str, destination: Path) -> dict[str, Any] | None:
    """The xdist controller's reaction to a worker going down: record its write-ahead file in
    the current run folder, if any (None when the worker died outside a kernel call)."""
    from conformance.durability.wal import inflight_path

    path = inflight_path(run_dir, worker)
    if not path.exists():
        return None
    return record_crash(path, how=f"xdist worker {worker} went down: {error}".strip(), destination=destination)


def recover_leftovers(
    current_run: str | None, destination: Path | Callable[[str], Path], *, root: Path | None = None, recovering_run: Path | None = None
) -> list[dict[str, Any]]:
    """Record every write-ahead file left in earlier run folders under `root` (default
    runs_root()): skips the current run and runs whose owner may still be alive. `destination`:
    as record_crash's (a function of the kernel files each crash under the kernel it crashed)."""
    root = runs_root() if root is None else root
    if not root.is_dir():
        return []
    found: list[dict[str, Any]] = []
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if run_dir.name == current_run:
            continue
        leftovers = sorted(run_dir.glob("inflight-*.json"))
        if not leftovers or run_is_live(run_dir):
            continue
        for path in leftovers:
            worker = path.stem.removeprefix("inflight-")
            how = f"write-ahead file of worker {worker} left by run {run_dir.name}, found at the start of a later session"
            line = record_crash(path, how=how, destination=destination, recovering_run=recovering_run)
            if line is not None:
                found.append(line)
    return found


def line_finding(line: dict[str, Any]) -> Any:
    """The finding of a crashes.jsonl line (its "finding", else one derived from how it died)."""
    from conformance.judging.finding import Finding

    data = line.get("finding")
    if isinstance(data, dict):
        try:
            return Finding.from_json_dict(data)
        except (KeyError, ValueError):
            pass
    caught = str(line.get("caught") or "")
    return crash_finding(str(line.get("how") or line.get("error") or "the process died"), hung="(hung:" in caught)


def describe(line: dict[str, Any]) -> str:
    """One line for a terminal: the crash's kind and subject, what crashed and where its entry went."""
    finding = line_finding(line)
    if line.get("entry") is None:
        return f"{finding.kind}: {finding.subject} in run {line.get('run')} worker {line.get('worker')} ({line.get('error')})"
    state = "saved" if line.get("new") else "already saved"
    return (
        f"{finding.kind}: {finding.subject} ({line.get('caught')}); kernel {line.get('kernel')}, property {line.get('property')}, "
        f"expect {line.get('expect')}: entry {state} as {line.get('entry')}"
    )
