"""The suite's plugin changes nothing in a pytest session that does not ask for the suite.

The package installs its plugin for every pytest session of the environment (`pytest11`). A
foreign project's session (a tiny test file in a temporary folder, no `--conformance-kernel`, not
collecting conformance/suite) must run exactly as with the plugin disabled
(`-p no:conformance.suite.plugin`): same Hypothesis profile and settings in the worker, same
`--dist` and worker-restart cap in the controller, no GPU pinning variables, no run folder. One
pair of subprocesses, one xdist worker each.

Installing the package must also break nothing: a foreign session whose own conftest defines the
common options `--device` and `--kernel`, in an environment where pytest-profiling (which defines
`--profile`) is installed, starts and passes (the suite's options are all `--conformance-*`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.durability.state import scrubbed_env

PLUGIN = "conformance.suite.plugin"

CONFTEST = textwrap.dedent(
    """
    import json, os
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_configure(config):
        if hasattr(config, "workerinput"):
            return
        with open(os.environ["PROBE_OUT"] + "-controller.json", "w") as handle:
            json.dump({
                "dist": config.option.dist,
                "maxworkerrestart": getattr(config.option, "maxworkerrestart", "absent"),
                "plugin_loaded": config.pluginmanager.has_plugin(PLUGIN),
            }, handle)
    """
).replace("PLUGIN", repr(PLUGIN))

FOREIGN_TEST = textwrap.dedent(
    """
    import json, os
    from hypothesis import given, settings, strategies as st

    @given(st.integers())
    def test_foreign(x):
        assert isinstance(x, int)

    def test_probe():
        with open(os.environ["PROBE_OUT"] + "-worker.json", "w") as handle:
            json.dump({
                "profile": settings.get_current_profile_name(),
                "settings": repr(settings.default),
                "env": sorted(k for k in os.environ if k.startswith(("CONFORMANCE_", "CUDA_VISIBLE", "HIP_VISIBLE"))),
            }, handle)
    """
)


def _run(folder: Path, name: str, *extra: str) -> tuple[dict, dict]:
    env = scrubbed_env(dict(os.environ), extra=("CONFORMANCE_DIR", "CONFORMANCE_PENDING_DIR", "PYTEST_ADDOPTS"))
    env["PROBE_OUT"] = str(folder / name)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider", *extra, "test_foreign.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return (json.loads((folder / f"{name}-controller.json").read_text()), json.loads((folder / f"{name}-worker.json").read_text()))


def test_foreign_session_runs_as_without_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_foreign.py").write_text(FOREIGN_TEST)
    with_plugin = _run(tmp_path, "with")
    without = _run(tmp_path, "without", "-p", f"no:{PLUGIN}")
    assert with_plugin[0].pop("plugin_loaded") is True  # the installed plugin took part in the first session
    assert without[0].pop("plugin_loaded") is False
    assert with_plugin == without
    assert not (tmp_path / ".conformance").exists()


FOREIGN_OPTIONS = textwrap.dedent(
    """
    import pytest

    def pytest_addoption(parser):
        parser.addoption("--device", default="cpu", help="this project's own option")
        parser.addoption("--kernel", default="naive", help="this project's own option")

    @pytest.fixture
    def device(request):
        return request.config.getoption("--device")
    """
)


def test_foreign_options_and_pytest_profiling_coexist_with_the_plugin(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("pytest_profiling") is None:  # README's second command and tox.ini install it
        if os.environ.get("CI"):
            pytest.fail("pytest-profiling is not installed (CI installs it: tox.ini)", pytrace=False)
        pytest.skip("pytest-profiling is not installed (pip install pytest-profiling)")
    (tmp_path / "conftest.py").write_text(FOREIGN_OPTIONS)
    (tmp_path / "test_own.py").write_text(
        "def test_own(device, request):\n    assert device == 'gpu0' and request.config.getoption('--kernel') == 'mine'\n"
    )
    env = scrubbed_env(dict(os.environ), extra=("CONFORMANCE_DIR", "CONFORMANCE_PENDING_DIR", "PYTEST_ADDOPTS"))

    def pytest_with_foreign_options(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--device", "gpu0", "--kernel", "mine", *extra]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)

    done = pytest_with_foreign_options("test_own.py", "--co", "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = pytest_with_foreign_options("--profile", "test_own.py")
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "1 passed" in output, output[-3000:]
    assert "Profiling" in output or (tmp_path / "prof").is_dir(), output[-3000:]  # pytest-profiling's --profile ran
    trace = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--trace-config", "--co", "-q", "test_own.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert PLUGIN in trace.stdout and "pytest_profiling" in trace.stdout, trace.stdout[-3000:]  # both plugins were loaded
    assert not (tmp_path / ".conformance").exists()
