"""Where the suite keeps its state, and the environment variables that say so.

Nothing here imports torch. Folders (none is created by the functions that name them, except
`run_dir`):
- the state folder `$CONFORMANCE_DIR` (default `.conformance/`): `runs/<run id>/` per run, each
  holding write-ahead files, example records, failure and crash logs, the session marker and
  the run report;
- the reviewed corpus `conformance/corpus/` (shipped with the package, read only);
- the pending folder `$CONFORMANCE_PENDING_DIR` (default `<state folder>/pending/`), where failing
  and crashing recipes are saved for review, one sub-folder per kernel (`kernel_pending_dir`):
  failures of a user's kernel stay in the folder the user works in, never inside the installed
  package, and recipes of different kernels are never mixed.
The run id `$CONFORMANCE_RUN_ID` is set by the session that owns the run (the pytest controller,
`fuzz`, ...) and inherited by its workers.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

STATE_DIR_ENV = "CONFORMANCE_DIR"
RUN_ID_ENV = "CONFORMANCE_RUN_ID"
PENDING_ENV = "CONFORMANCE_PENDING_DIR"
CALL_TIMEOUT_ENV = "CONFORMANCE_CALL_TIMEOUT"
DEFAULT_CALL_TIMEOUT_S = 300.0
CORPUS_DIR = Path(__file__).resolve().parents[1] / "corpus"
# Variables a nested suite process must not inherit from the calling session: it would believe it
# is an xdist worker of that session, pin that session's GPU, or write into that session's run.
SESSION_ENV_PREFIXES = ("PYTEST_XDIST_", "CONFORMANCE_GPU_")
SESSION_ENV = ("PYTEST_CURRENT_TEST", RUN_ID_ENV, STATE_DIR_ENV)


def state_dir() -> Path:
    """The state folder: $CONFORMANCE_DIR, else .conformance (relative to the working directory)."""
    return Path(os.environ.get(STATE_DIR_ENV, ".conformance"))


def runs_root() -> Path:
    """The folder holding one sub-folder per run."""
    return state_dir() / "runs"


class StateDirError(RuntimeError):
    """The state folder cannot hold run folders; the message names the folder, the problem and the variable."""


def check_state_dir() -> Path:
    """The runs folder (runs_root), created when missing and probed for writing; StateDirError
    in one line when that fails (a path under a file, an unwritable or read-only folder). Front
    ends call it before any test or campaign, so an unusable $CONFORMANCE_DIR is a usage error."""
    root = runs_root()
    where = f"${STATE_DIR_ENV}={os.environ[STATE_DIR_ENV]!r}" if os.environ.get(STATE_DIR_ENV) else "the default .conformance/"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise StateDirError(f"state folder {root} is not usable ({reason}; {where}): set ${STATE_DIR_ENV} to a writable folder") from None
    return root


def pending_dir() -> Path:
    """The pending folder (all kernels): $CONFORMANCE_PENDING_DIR, else <state folder>/pending."""
    value = os.environ.get(PENDING_ENV)
    return Path(value) if value else state_dir() / "pending"


_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def kernel_slug(kernel: str) -> str:
    """A folder name for a kernel spec: `pkg.mod:attr` -> `pkg.mod-attr`; a file-path spec
    `dir/my_kernel.py:fn` -> `my_kernel-fn-<8 hex digits of its absolute path>` (two files of one
    name in different folders stay apart); built-in names as they are. At most 100 characters."""
    text = kernel.strip() or "default"
    module, sep, attr = text.rpartition(":")
    if sep and module.endswith(".py") and not text.startswith("isa:"):
        import hashlib

        where = hashlib.sha256(str(Path(module).expanduser().resolve()).encode()).hexdigest()[:8]
        text = f"{Path(module).stem}-{attr}-{where}"
    slug = _SLUG_UNSAFE.sub("-", text).strip("-.") or "kernel"
    return slug[:100]


def kernel_pending_dir(kernel: str) -> Path:
    """Where a kernel's captured entries go: pending_dir() / kernel_slug(kernel) (not created)."""
    return pending_dir() / kernel_slug(kernel)


def worker_id() -> str:
    """This process's xdist worker id, or "main"."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def current_run_dir() -> Path | None:
    """This session's run folder (not created), or None when no run id is set yet."""
    run_id = os.environ.get(RUN_ID_ENV)
    return runs_root() / run_id if run_id else None


def new_run_id(prefix: str = "") -> str:
    """A fresh run id: `<prefix>YYYYmmdd-HHMMSS-<pid>`."""
    return f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


_RUN_DIRS: dict[tuple[str | None, str], Path] = {}  # ($CONFORMANCE_DIR, run id) -> run_dir()'s path


def run_dir() -> Path:
    """This run's folder, created (again, when it was removed); a process with no run id yet gets
    a fresh one. Called per example record: the path of each (state folder, run id) is built once."""
    run_id = os.environ.get(RUN_ID_ENV)
    if not run_id:
        run_id = os.environ[RUN_ID_ENV] = new_run_id()
    key = (os.environ.get(STATE_DIR_ENV), run_id)
    path = _RUN_DIRS.get(key)
    if path is None:
        path = _RUN_DIRS[key] = runs_root() / run_id
    if not os.path.isdir(path):  # a stat where it exists (every call but the first): mkdir's refusal costs more
        path.mkdir(parents=True, exist_ok=True)
    return path


def call_timeout_s() -> float:
    """Seconds one kernel call may take (conformance.durability.watchdog): $CONFORMANCE_CALL_TIMEOUT, else
    DEFAULT_CALL_TIMEOUT_S; 0 means no limit. The pytest plugin sets the variable from
    --call-timeout, so xdist workers inherit it. ValueError naming the variable when malformed."""
    raw = os.environ.get(CALL_TIMEOUT_ENV)
    if raw is None or raw == "":
        return DEFAULT_CALL_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{CALL_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not (value >= 0 and value != float("inf")):
        raise ValueError(f"{CALL_TIMEOUT_ENV}={raw!r}: expected a finite number of seconds >= 0 (0: no limit)")
    return value


def scrubbed_env(base: dict[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """`base` without the calling session's variables (SESSION_ENV, SESSION_ENV_PREFIXES, `extra`)."""
    drop = set(SESSION_ENV) | set(extra)
    return {k: v for k, v in base.items() if k not in drop and not k.startswith(SESSION_ENV_PREFIXES)}
