"""A run that never lies: usage errors for unusable kernels, crashes and hangs contained under the
default `pytest -n 2` scheduling, a per-call time limit, and kernels that write into their inputs.

The misbehaving kernels are in tests/conformance/suite/misbehaving_kernels.py. Suite runs happen in subprocesses
with their own state folder and pending corpus.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conformance.durability import state
from conformance.durability.watchdog import KernelHung, limit_call
from conformance.judging.harness import InputsModified, run_kernel
from conformance.judging.target import TargetError, build_target
from conformance.records.replay import child_env
from strategies import materialize as materialize_module
from strategies.materialize import materialize
from strategies.recipe import Recipe

REPO = Path(__file__).resolve().parents[3]
MODULE = "tests.conformance.suite.misbehaving_kernels"
LONG_AND_SHORT = ["conformance/suite/test_corpus.py", "-k", "long-row-2048 or single-key or sixteen"]


def _env(tmp: Path) -> dict[str, str]:
    env = child_env(tmp / "state")
    env[state.PENDING_ENV] = str(tmp / "pending")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _suite(tmp: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=REPO, env=_env(tmp), capture_output=True, text=True, timeout=timeout, check=False)


def _entries(tmp: Path) -> list[dict[str, Any]]:
    folder = tmp / "pending"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.rglob("*.json"))] if folder.is_dir() else []


UNUSABLE = [
    (["--conformance-kernel", "emulatd"], "unknown kernel 'emulatd'"),
    (["--conformance-kernel", "no_such_module_here:kernel"], "cannot import 'no_such_module_here'"),
    (["--conformance-kernel", f"{MODULE}:LONG_ROW"], "not a callable kernel"),
    (["--conformance-kernel", f"{MODULE}:_longest_row"], "declares no numerics profile"),
    (["--conformance-profile", "bogus"], "unknown numerics profile 'bogus'"),
    (["--conformance-device", "tpu"], "bad device 'tpu'"),
    (["--conformance-kernel", "flashmla"], "kernel 'flashmla' unavailable"),
]


def test_an_unusable_kernel_stops_the_session_before_any_test(tmp_path: Path) -> None:
    """End to end, once: the plugin turns the target's error into pytest's usage error (exit 4,
    one line) under `-n 2`, before any test runs. The other cases are the same path in-process."""
    args, named = UNUSABLE[0]
    proc = _suite(tmp_path, "-n", "2", "conformance", *args, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4, output  # pytest's usage-error exit code, before any test ran
    errors = [line for line in output.splitlines() if line.startswith("ERROR: conformance:")]
    assert len(errors) == 1 and named in errors[0], output
    assert "passed" not in output and "skipped" not in output, output


@pytest.mark.parametrize(("args", "named"), UNUSABLE)
def test_an_unusable_kernel_is_named_in_one_line(args: list[str], named: str) -> None:
    """What the plugin checks before the session (build_target with check_only): one line naming the problem."""
    if args == ["--conformance-kernel", "flashmla"] and torch.cuda.is_available():
        pytest.skip("flashmla may be usable on this machine")
    options = dict(zip(args[::2], args[1::2]))
    with pytest.raises(TargetError) as caught:
        build_target(
            options.get("--conformance-kernel"),
            profile=options.get("--conformance-profile"),
            device=options.get("--conformance-device"),
            check_only=True,
        )
    message = str(caught.value)
    assert named in message and "\n" not in message, message


@pytest.fixture()
def fresh_memory_limits() -> Iterator[None]:
    """The memory limits are sized once per process: measure them again around the test."""
    materialize_module._measured_limits.cache_clear()
    yield
    materialize_module._measured_limits.cache_clear()


def test_memory_limits_are_sized_once(monkeypatch: pytest.MonkeyPatch, fresh_memory_limits: None) -> None:
    monkeypatch.delenv(materialize_module.MEMORY_LIMIT_ENV, raising=False)
    monkeypatch.setattr(materialize_module, "_available_ram", lambda: 8 * 2**30)
    first = materialize_module.memory_limit("cpu")
    monkeypatch.setattr(materialize_module, "_available_ram", lambda: 2**20)  # a load spike later on
    assert materialize_module.memory_limit("cpu") == first and first[0] == 4 * 2**30
    monkeypatch.setenv(materialize_module.MEMORY_LIMIT_ENV, "1MiB")  # the variable still wins, read on every call
    assert materialize_module.memory_limit("cpu")[0] == 2**20


def test_a_correct_kernel_under_a_tiny_memory_reading_is_skipped(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, fresh_memory_limits: None
) -> None:
    """A refusal of the memory guard is a skip naming the limit, never a failure of the kernel."""
    from conformance.judging.checks import differential
    from conformance.records.corpus import CORPUS_DIR, load_entry

    monkeypatch.delenv(materialize_module.MEMORY_LIMIT_ENV, raising=False)
    monkeypatch.setattr(materialize_module, "_available_ram", lambda: 69 * 2**20)  # a 34.5 MiB limit
    recipe = load_entry(CORPUS_DIR / "edge-long-row-8192.json").recipe
    with pytest.raises(pytest.skip.Exception, match="recipe too large: needs about .* limit 34.5 MiB"):
        differential(build_target("emulated", device="cpu"), recipe, use_target=False)


@pytest.mark.long
def test_a_crashing_kernel_fails_one_test_under_default_xdist(tmp_path: Path) -> None:
    """`pytest -n 2` (the default scheduling): the worker that dies is replaced, the run finishes."""
    proc = _suite(tmp_path, "-n", "2", *LONG_AND_SHORT, "--conformance-kernel", f"{MODULE}:kill_on_long_rows")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "1 failed, 2 passed" in output, output
    entries = _entries(tmp_path)
    assert len(entries) == 1 and entries[0]["provenance"]["crash"]["nodeid"].endswith("[edge-long-row-2048]"), output
    report = json.loads(next((tmp_path / "state").glob("runs/*/report.json")).read_text(encoding="utf-8"))
    assert report["status"] == "crashes" and len(report["crashes"]) == 1


@pytest.mark.long
@pytest.mark.parametrize("kernel", ["hang_on_long_rows", "hang_in_native_code"])
def test_a_hanging_kernel_fails_one_test_with_a_hung_entry(tmp_path: Path, kernel: str) -> None:
    proc = _suite(tmp_path, "-n", "2", *LONG_AND_SHORT, "--conformance-kernel", f"{MODULE}:{kernel}", "--conformance-call-timeout", "3")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed, 2 passed" in output, output
    entries = _entries(tmp_path)
    assert len(entries) == 1, output
    caught = entries[0]["provenance"]["caught"]
    assert "hung: no return within 3.0 s" in caught and entries[0]["name"].startswith("hung-"), caught
    assert entries[0]["provenance"]["crash"]["hung_after_s"] >= 3.0


def test_a_hang_without_xdist_fails_its_test_and_the_session_goes_on(tmp_path: Path) -> None:
    kernel = f"{MODULE}:hang_on_long_rows"
    proc = _suite(tmp_path, "-n", "0", *LONG_AND_SHORT, "--conformance-kernel", kernel, "--conformance-call-timeout", "3")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed, 2 passed" in output, output
    assert "the kernel call hung: no return within 3 s" in output, output
    # the hung recipe is a reviewed corpus entry: named with its replay command, not copied to pending
    assert _entries(tmp_path) == [], output
    assert "[1] hang: a kernel call did not return" in output, output
    assert "entry:  " in output and "edge-long-row-2048.json" in output and "replay: " in output, output


def test_soft_limit_raises_kernel_hung_and_is_not_an_exception() -> None:
    with pytest.raises(KernelHung, match="no return within 0.5 s"):
        with limit_call(0.5, grace_s=30):
            time.sleep(30)  # cut by the soft limit: without it this returns and pytest.raises fails
    assert not issubclass(KernelHung, Exception)
    with limit_call(0):  # no limit
        time.sleep(0.01)


def test_hard_limit_marks_and_kills_the_process(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    code = (
        "import time, pathlib\n"
        "from conformance.durability.watchdog import limit_call\n"
        f"with limit_call(0.5, lambda s: pathlib.Path({str(marker)!r}).write_text(str(s)), hard_only=True):\n"
        "    time.sleep(60)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert float(marker.read_text()) >= 0.5


@pytest.fixture()
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(state.STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.setenv(state.RUN_ID_ENV, "guard")
    return tmp_path


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        ("scribble_unread_record", "the kernel wrote into kv_cache at rows [{last}] (1 records changed)"),
        ("zero_q_after", "the kernel wrote into q at (row, head, dim) [(0, 0, 0)"),
        ("shift_indices_after", "the kernel wrote into indices at positions [0"),
    ],
)
def test_writes_into_inputs_are_named(sandbox: Path, kernel: str, message: str) -> None:
    from kernel.registry import resolve

    recipe = Recipe(n_q=3, heads=2, row_lengths=(5, 0, 9), cache_rows=64, seed=7)
    problem = materialize(recipe, torch.device("cpu"))
    backend = resolve(f"{MODULE}:{kernel}")
    with pytest.raises(InputsModified) as caught:
        run_kernel(problem, backend, property_name="guard", kernel_name=kernel)
    assert message.format(last=problem.kv_cache.shape[0] - 1) in str(caught.value)


def test_a_clean_kernel_passes_the_input_guard(sandbox: Path) -> None:
    from kernel.registry import resolve

    recipe = Recipe(n_q=2, heads=3, row_lengths=(130, 1), cache_rows=300, seed=1)
    problem = materialize(recipe, torch.device("cpu"))
    out, _ = run_kernel(problem, resolve("emulated"), property_name="guard", kernel_name="emulated")
    assert out.shape == (2, 3, 512)


def test_call_timeout_environment_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(state.CALL_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="CONFORMANCE_CALL_TIMEOUT"):
        state.call_timeout_s()
    monkeypatch.setenv(state.CALL_TIMEOUT_ENV, "0")
    assert state.call_timeout_s() == 0.0
    monkeypatch.delenv(state.CALL_TIMEOUT_ENV)
    assert state.call_timeout_s() == state.DEFAULT_CALL_TIMEOUT_S
    assert os.environ.get(state.CALL_TIMEOUT_ENV) is None


@pytest.mark.long
def test_a_device_fault_ends_its_worker_and_later_tests_pass(tmp_path: Path) -> None:
    """A device-side assert breaks the worker's GPU context: the worker is ended and replaced."""
    proc = _suite(tmp_path, "-n", "2", *LONG_AND_SHORT, "--conformance-kernel", f"{MODULE}:fake_device_fault_on_long_rows")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "1 failed, 2 passed" in output, output
    entries = _entries(tmp_path)
    assert len(entries) == 1, output
    assert "device fault: RuntimeError: CUDA error: device-side assert triggered" in entries[0]["provenance"]["caught"]
    assert entries[0]["provenance"]["crash"]["device_fault"].startswith("RuntimeError: CUDA error")


def test_fuzz_keeps_its_budget_against_a_hanging_kernel(tmp_path: Path) -> None:
    """A call that hangs from the first example is cut when the budget (+ grace) is spent, although
    the per-call limit is far longer (the subprocess's own timeout is only a backstop)."""
    env_timeout = "600"  # the configured per-call limit: the budget, not this, must cut the call
    command = [
        sys.executable,
        "-m",
        "conformance",
        "fuzz",
        "--kernel",
        f"{MODULE}:hang_always",
        "--seconds",
        "2",
        "--hypothesis-profile",
        "ci",
        "--property",
        "long_rows",
    ]
    env = _env(tmp_path) | {state.CALL_TIMEOUT_ENV: env_timeout}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "the kernel call hung" in output, output
    entries = _entries(tmp_path)
    assert len(entries) == 1 and "hang: a kernel call did not return" in entries[0]["provenance"]["caught"], output
    limit = re.search(r"no return within ([0-9.]+) s", entries[0]["provenance"]["caught"])
    assert limit and float(limit.group(1)) < float(env_timeout), entries[0]["provenance"]["caught"]  # the budget cut it


def test_fuzz_stops_at_a_device_fault_and_saves_it_unshrunk(tmp_path: Path) -> None:
    """A device fault breaks the process's GPU context: the campaign saves the call's recipe as a
    crash (not shrunk: no later call could run), writes its summary and stops with exit 1."""
    command = [sys.executable, "-m", "conformance", "fuzz", "--kernel", f"{MODULE}:fake_device_fault_on_long_rows", "--seconds", "60"]
    command += ["--hypothesis-profile", "ci", "--property", "long_rows"]
    proc = subprocess.run(command, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=240, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "broke the GPU context (RuntimeError: CUDA error: device-side assert triggered)" in output, output
    entries = _entries(tmp_path)
    assert len(entries) == 1, output
    caught = entries[0]["provenance"]["caught"]
    assert "crash: the process running the kernel died" in caught and "device fault: RuntimeError: CUDA error" in caught, caught
    assert "unshrunk" not in entries[0]["provenance"] and max(entries[0]["recipe"]["row_lengths"]) >= 1024
    summary = json.loads(next(tmp_path.rglob("fuzz-summary.json")).read_text())
    assert len(summary["found"]) == 1 and summary["stopped"].startswith("a kernel call broke the GPU context"), summary
