"""Whether a pytest session asks for the conformance suite; the plugin acts only then.

The plugin is installed for every pytest session of the environment (the `pytest11` entry
point), so it must leave other projects' sessions exactly as they would run without it. A
session asks for the suite when
- it names a kernel (`--kernel`), or
- a path it collects (its arguments, or `testpaths` when it has none; with `--pyargs`, the
  packages named) contains the suite's folder `conformance/suite` or lies inside it, or
- it is rooted in this project's checkout (the project's own tests run with the suite's
  Hypothesis profiles and scheduling).
Otherwise the plugin only adds its command-line options: no Hypothesis profile is registered or
loaded, `--dist` and xdist's worker-restart cap are left alone, no GPU is pinned, no run folder
is made. The decision is taken once per process (controller and each xdist worker decide alike
from the same arguments) and kept in the config's stash.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SUITE_DIR = Path(__file__).resolve().parent
CHECKOUT = SUITE_DIR.parents[1]
_ACTIVE = pytest.StashKey[bool]()


def _arg_path(arg: str, pyargs: bool) -> Path | None:
    """The file system path a collection argument names (None when it names none)."""
    text = arg.split("::", 1)[0]
    if not text or text.startswith("-"):
        return None
    path = Path(text)
    if path.exists():
        return path.resolve()
    if pyargs:
        try:
            spec = importlib.util.find_spec(text)
        except (ImportError, ValueError):
            return None
        if spec is not None:
            if spec.submodule_search_locations:
                return Path(next(iter(spec.submodule_search_locations))).resolve()
            if spec.origin:
                return Path(spec.origin).resolve()
    return None


def _collects_suite(path: Path) -> bool:
    return path == SUITE_DIR or SUITE_DIR.is_relative_to(path) or path.is_relative_to(SUITE_DIR)


def suite_requested(config: pytest.Config) -> bool:
    """True when this session asks for the suite (see the module docstring)."""
    if config.getoption("--kernel", None):
        return True
    try:
        if config.rootpath.resolve() == CHECKOUT and (CHECKOUT / "conftest.py").is_file():
            return True
    except OSError:
        pass
    pyargs = bool(getattr(config.option, "pyargs", False))
    for arg in config.args:
        path = _arg_path(str(arg), pyargs)
        if path is not None and _collects_suite(path):
            return True
    return False


def suite_active(config: pytest.Config) -> bool:
    """The session's decision (suite_requested), computed once and stashed."""
    if _ACTIVE not in config.stash:
        config.stash[_ACTIVE] = suite_requested(config)
    return config.stash[_ACTIVE]
