"""The project's own tests group their xdist work (FlyDSL compile groups, the mutation score run)
with `xdist_group` marks: with `-n`, they are scheduled `--dist loadgroup` unless told otherwise.
(The conformance suite itself runs `--dist load`: see conformance.suite.plugin.) Each xdist worker
takes its share of the cores as torch threads (conformance.suite.threads), as suite workers do,
and hands that share on as OMP_NUM_THREADS to the processes its tests start (a user's
OMP_NUM_THREADS stands).

Where Triton is installed on a machine without CUDA, Triton is imported once under its CPU
interpreter before any test runs (_import_triton_for_the_interpreter).

Tests marked `long` (each takes tens of seconds on CI's two cores: a subprocess suite run, a
FlyDSL compile, a hang's time limit) are collected first, so xdist hands them out first and the
short tests fill the workers' tails (pytest_collection_modifyitems), instead of a long test
starting last while the other worker idles.

Tests that judge kernels in this process write example records and pending entries; they go to a
state folder of the session's own (a temporary folder the controller makes and its workers
inherit, unless $CONFORMANCE_DIR is set), never into the checkout's `.conformance/`."""

from __future__ import annotations

import importlib.util
import os
import tempfile

import pytest


@pytest.hookimpl(trylast=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", "no") in ("no", "load"):
        option.dist = "loadgroup"


def _import_triton_for_the_interpreter() -> None:
    """Triton decorates triton.language's own jit functions (tl.zeros, ...) when triton.language is
    first imported, in the mode TRITON_INTERPRET names then; torch imports Triton as soon as a
    dispatch mode runs (the op-counting tests), and once triton.language was imported in compiled
    mode, the tests' interpreted kernels fail ("Cannot call @triton.jit'd outside of the scope of
    a kernel"). On a machine
    without CUDA only the interpreter can run a Triton kernel, so triton.language is imported
    here under it (TRITON_INTERPRET restored afterwards: the code under test reads it itself)."""
    if importlib.util.find_spec("triton") is None:
        return
    import torch

    if torch.cuda.is_available():
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language  # noqa: F401
    except Exception:  # a broken Triton install: the tests that need it report it themselves
        pass
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


def _private_state_folder() -> None:
    """Controller (or the only process): $CONFORMANCE_DIR and $CONFORMANCE_PENDING_DIR in a fresh
    temporary folder, inherited by the xdist workers; left alone when the user set them."""
    from conformance.durability.state import PENDING_ENV, STATE_DIR_ENV

    if os.environ.get("PYTEST_XDIST_WORKER") is not None or os.environ.get(STATE_DIR_ENV):
        return
    folder = tempfile.mkdtemp(prefix="conformance-tests-")
    os.environ[STATE_DIR_ENV] = folder
    os.environ.setdefault(PENDING_ENV, os.path.join(folder, "pending"))
    _MADE.append(folder)


_MADE: list[str] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the state folder _private_state_folder made (controller only)."""
    import shutil

    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `long` tests first, each group in collection order (module docstring)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_configure(config: pytest.Config) -> None:
    from conformance.suite.threads import share_cores_among_workers

    config.addinivalue_line("markers", "long: takes tens of seconds; scheduled first under xdist (tests/conftest.py)")
    _private_state_folder()
    shared = share_cores_among_workers()
    if shared is not None:
        # the processes a test starts (suite sessions, the CLI) run on this worker's cores too: without
        # this each would start one spinning OpenMP thread per core of the machine
        os.environ["OMP_NUM_THREADS"] = str(shared)
    _import_triton_for_the_interpreter()
