"""A module of another revision of this repository, imported beside today's: the `--against REV`
of the routines that compare an implementation with an earlier one (same results, time per call)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def module_from_file(path: str | Path, name: str) -> ModuleType:
    """The Python file `path` imported as module `name`, registered in sys.modules (dataclasses
    look their module up there). Raises ImportError where it cannot be loaded."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def module_at(rev: str, relpath: str, name: str) -> ModuleType:
    """The file `relpath` (relative to the repository root) as of git revision `rev`, read with
    `git show` into a temporary file and imported as module `name` (module_from_file). Raises
    OSError or subprocess.SubprocessError where git or the revision is missing (a shallow clone)."""
    command = ["git", "-C", str(ROOT), "show", f"{rev}:{relpath}"]
    text = subprocess.run(command, check=True, capture_output=True, text=True, timeout=30).stdout
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    return module_from_file(path, name)
