"""Whether a pytest session asks for the conformance suite; the plugin acts only then.

The plugin is installed for every pytest session of the environment (the `pytest11` entry
point), so it must leave other projects' sessions exactly as they would run without it. Two
decisions, each taken once per process (controller and each xdist worker decide alike from the
same arguments) and kept in the config's stash:

- `suite_run`: the session runs the suite against a kernel: it names one
  (`--conformance-kernel`), or a path it collects (its arguments, or `testpaths` when it has none;
  with `--pyargs`, the packages named) contains the suite's folder `conformance/suite` or lies
  inside it. Such a session has a run folder, saves failing recipes, writes the run report and
  prints one report per distinct failure.
- `suite_active`: `suite_run`, or the session is rooted in this project's checkout (the project's
  own tests run with the suite's Hypothesis profiles, scheduling and GPU pinning, but make no run).

Otherwise the plugin only adds its `--conformance-*` options: no Hypothesis profile is registered
or loaded, `--dist` and xdist's worker-restart cap are left alone, no GPU is pinned, no run folder
is made.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conformance.suite import options

SUITE_DIR = Path(__file__).resolve().parent
CHECKOUT = SUITE_DIR.parents[1]
_ACTIVE = pytest.StashKey[bool]()
_RUN = pytest.StashKey[bool]()


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


def runs_suite(config: pytest.Config) -> bool:
    """True when this session runs the suite against a kernel (see the module docstring)."""
    if options.get(config, options.KERNEL):
        return True
    pyargs = bool(getattr(config.option, "pyargs", False))
    for arg in config.args:
        path = _arg_path(str(arg), pyargs)
        if path is not None and _collects_suite(path):
            return True
    return False


def in_checkout(config: pytest.Config) -> bool:
    """True when the session is rooted in this project's checkout."""
    try:
        return config.rootpath.resolve() == CHECKOUT and (CHECKOUT / "conftest.py").is_file()
    except OSError:
        return False


def suite_run(config: pytest.Config) -> bool:
    """The session's decision `runs_suite`, computed once and stashed."""
    if _RUN not in config.stash:
        config.stash[_RUN] = runs_suite(config)
    return config.stash[_RUN]


def suite_active(config: pytest.Config) -> bool:
    """suite_run, or a session rooted in the checkout; computed once and stashed."""
    if _ACTIVE not in config.stash:
        config.stash[_ACTIVE] = suite_run(config) or in_checkout(config)
    return config.stash[_ACTIVE]
