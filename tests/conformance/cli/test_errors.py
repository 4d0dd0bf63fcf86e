"""Bad input gets one line and exit 2, never a traceback: unusable kernel names (a misspelt
built-in name or attribute gets the closest names, a file spec names the missing file, folder or
non-Python file), output paths that cannot be written, a non-finite timeout, a kernel returning
meta tensors, SIGINT while the command starts (at a point the child reports, not after a delay)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.cli import main

REPO = Path(__file__).resolve().parents[3]
ENTRY = REPO / "conformance" / "corpus" / "edge-single-key.json"
BAD_MODULES = {
    "badimport_k12": 'raise RuntimeError("boom while importing")\n',
    "badsyntax_k12": "def kernel(:\n    pass\n",
    "metakernel_k12": (
        "import torch\n"
        "def kernel(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):\n"
        "    o = torch.empty((q.shape[0], q.shape[1], 512), dtype=torch.bfloat16, device='meta')\n"
        "    return o, (torch.empty((q.shape[0], q.shape[1]), dtype=torch.float32, device='meta') if return_lse else None)\n"
        "kernel.profile = 'gfx950'\n"
    ),
}


@pytest.fixture()
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in BAD_MODULES.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))
    return tmp_path


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


KERNELS = [
    ("badimport_k12:kernel", "RuntimeError at import: boom while importing"),
    ("badsyntax_k12:kernel", "syntax error in"),
    (":", "both parts non-empty"),
    ("mod:", "both parts non-empty"),
    (":attr", "both parts non-empty"),
    ("vllm-decod", "unknown kernel 'vllm-decod': did you mean vllm-decode"),
    ("emulatd", "unknown kernel 'emulatd': did you mean emulated? built-in kernels: emulated, flydsl,"),
    ("metakernel_k12:kernl", "module 'metakernel_k12' has no attribute 'kernl'; did you mean kernel?"),
    ("badimport_k12.py", "a file needs the attribute to test: badimport_k12.py:ATTR"),
]
SMALL_BENCH = ["--n-q", "1", "--keys", "4", "--iters", "1", "--warmup", "0", "--cache-rows", "64", "--quiet"]  # a bench of one tiny call
COMMANDS = {
    "replay": lambda k: ["replay", str(ENTRY), "--kernel", k],
    "fuzz": lambda k: ["fuzz", "--kernel", k, "--seconds", "1"],
    "minimise": lambda k: ["corpus", "minimise", str(ENTRY), "--kernel", k],
    "bench": lambda k: ["bench", "--kernel", k, *SMALL_BENCH],
}


@pytest.mark.parametrize(("kernel", "message"), KERNELS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unusable_kernel_names(command: str, kernel: str, message: str, modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(COMMANDS[command](kernel)) == 2
    captured = capsys.readouterr()
    assert message in _one_line(captured.err)


FILE_SPECS = [
    ("{dir}/absent_k12.py:kernel", "no such file: {dir}/absent_k12.py"),
    ("{dir}:kernel", "{dir} is a folder; give a Python file: path/to/file.py:attr"),
    ("{dir}/notes_k12.txt:kernel", "{dir}/notes_k12.txt is not a Python file (.py)"),
    ("{dir}/badimport_k12.py:kernel", "RuntimeError at import: boom while importing"),
    ("{dir}/badsyntax_k12.py:kernel", "syntax error in"),
    ("{dir}/metakernel_k12.py:kernl", "has no attribute 'kernl'; did you mean kernel?"),
]


@pytest.mark.parametrize(("spec", "message"), FILE_SPECS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unusable_kernel_files(command: str, spec: str, message: str, modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (modules / "notes_k12.txt").write_text("not Python", encoding="utf-8")
    assert main(COMMANDS[command](spec.format(dir=modules))) == 2
    assert message.format(dir=modules) in _one_line(capsys.readouterr().err)


def test_registry_says_why(modules: Path) -> None:
    from kernel.backend import BackendUnavailable
    from kernel.registry import resolve

    for kernel, message in KERNELS:
        with pytest.raises(BackendUnavailable) as info:
            resolve(kernel)
        assert message in str(info.value) and "\n" not in str(info.value)


@pytest.fixture()
def kv_dump(tmp_path: Path) -> Path:
    path = tmp_path / "kv.npy"
    np.save(path, np.zeros((4, 656), dtype=np.uint8))
    return path


@pytest.mark.parametrize("where", ["missing-folder", "folder", "full-device"])
def test_preconditions_output_that_cannot_be_written(where: str, kv_dump: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if where == "full-device" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    target = {"missing-folder": str(tmp_path / "nope" / "r.txt"), "folder": str(tmp_path), "full-device": "/dev/full"}[where]
    assert main(["preconditions", str(kv_dump), "--output", target]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    expected = {"missing-folder": "does not exist", "folder": "is a folder", "full-device": "No space left on device"}[where]
    assert expected in err


def test_preconditions_output_still_works(kv_dump: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code = main(["preconditions", str(kv_dump), "--output", str(out), "--format", "json", "--quiet"])
    assert code in (0, 1) and json.loads(out.read_text(encoding="utf-8"))["exit_code"] == code  # zero records: zero scales


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", str(ENTRY), "--kernel", "emulated", "--json", "{dir}"],
        ["bench", "--kernel", "emulated", *SMALL_BENCH, "--json", "{dir}"],
        ["mutation-score", "--only", "p_bf16", "--json", "{dir}"],
        ["mutation-score", "--only", "p_bf16", "--markdown", "{dir}/missing/x.md"],
    ],
)
def test_json_to_a_folder_is_a_usage_error(argv: list[str], modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([a.replace("{dir}", str(modules)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("is a folder" in err or "does not exist" in err)


def test_replay_json_to_a_full_device(modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    assert main(["replay", str(ENTRY), "--kernel", "emulated", "--json", "/dev/full"]) == 2
    assert "cannot write /dev/full: No space left on device" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "soon"])
def test_replay_timeout_must_be_finite(value: str, modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(ENTRY), "--isolate", "--timeout", value]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_replay_of_a_kernel_returning_meta_tensors(modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(ENTRY), "--kernel", "metakernel_k12:kernel"]) == 1
    captured = capsys.readouterr()
    assert "verdict: FAILS" in captured.out and "on the meta device" in captured.out and "Traceback" not in captured.err


_HANDLED_INTERRUPT_IN_EXEC = """
import runpy, sys
import conformance.cli as cli

def interrupted_main(argv=None):
    try:
        exec("raise KeyboardInterrupt")  # as a SIGINT inside dataclasses' exec of __init__ text
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

cli.main = interrupted_main
sys.argv = ["conformance"]
runpy.run_module("conformance", run_name="__main__")
"""


def test_handled_interrupt_inside_exec_still_exits_130(tmp_path: Path) -> None:
    """CPython marks a KeyboardInterrupt that leaves `exec(str)` as unhandled even when the caller
    handles it, and a `python -m` run then ends with SIGINT; the entry point clears that mark, so
    the exit code is main()'s 130 (measured before: 1 replay in 10 interrupted at 1 s died with
    -SIGINT, its KeyboardInterrupt raised inside dataclasses' exec)."""
    (tmp_path / "interrupted_entry").mkdir()
    (tmp_path / "interrupted_entry" / "__main__.py").write_text(_HANDLED_INTERRUPT_IN_EXEC, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    proc = subprocess.run(
        [sys.executable, "-m", "interrupted_entry"], capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False
    )
    assert (proc.returncode, proc.stderr.strip()) == (130, "interrupted")


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default disposition. A process inherits an
    ignored SIGINT (POSIX), and a command started that way rightly ignores Ctrl-C; an xdist
    worker of this suite was seen with SIGINT and SIGQUIT ignored at the C level (SigIgn in
    /proc, while Python's own table still named its handler), so its children ran on to a verdict."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_READY_AT_IMPORT = """
import runpy, sys

STAGE = sys.argv[1]


def ready(event, args):
    # on the first import of STAGE: say so, then wait for the parent's line, which it writes
    # after sending SIGINT (a handler that raises interrupts the wait; one that defers returns)
    if event == "import" and STAGE and args[0] == STAGE:
        globals()["STAGE"] = ""
        print("ready", file=sys.stderr, flush=True)
        sys.stdin.readline()


sys.addaudithook(ready)
sys.argv = ["conformance", *sys.argv[2:]]
runpy.run_module("conformance", run_name="__main__")
"""


@pytest.mark.parametrize("stage", ["conformance.cli", "torch", "numpy", "kernel.registry"])
def test_sigint_while_replay_starts(stage: str, modules: Path) -> None:
    """SIGINT while a module is first imported (the command line itself, torch, numpy inside
    torch's import, the kernel registry once the command runs) exits 130 with one line and is
    never swallowed (the command does not run on to a verdict). The child says when it reaches
    the import and waits there, so the signal lands at that point on any machine, at any load."""
    from conformance.durability.state import scrubbed_env

    script = modules / "ready_at_import.py"
    script.write_text(_READY_AT_IMPORT, encoding="utf-8")
    env = {**scrubbed_env(dict(os.environ)), "PYTHONPATH": str(REPO), "CONFORMANCE_DIR": str(modules / "state")}
    proc = subprocess.Popen(
        [sys.executable, str(script), stage, "replay", str(ENTRY), "--kernel", "emulated"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
        preexec_fn=_default_sigint,
    )
    assert proc.stdin is not None and proc.stderr is not None
    first = proc.stderr.readline()
    if first.strip() == "ready":
        proc.send_signal(signal.SIGINT)
        proc.stdin.write("signalled\n")
        proc.stdin.flush()
    out, err = proc.communicate(timeout=120)
    assert first.strip() == "ready", f"the child never imported {stage}: {first}{err}"
    assert proc.returncode == 130, (out, err)
    assert "verdict:" not in out and "Traceback" not in err and _one_line(err) == "interrupted", (out, err)


def test_pending_dir_unwritable_is_a_clear_oserror(modules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.durability.state import pending_dir
    from conformance.records.corpus import CorpusWriteError, new_entry, save_entry
    from tests.recipes import TINY

    locked = modules / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(locked / "pending"))
        entry = new_entry(TINY, caught="t", kernel="k", property_name="p")
        with pytest.raises(CorpusWriteError, match=r"cannot save corpus entry .* set \$CONFORMANCE_PENDING_DIR"):
            save_entry(entry, pending_dir())
    finally:
        locked.chmod(0o700)
        shutil.rmtree(locked, ignore_errors=True)


def test_pytest_with_an_unwritable_pending_dir_fails_the_test_not_the_session(tmp_path: Path) -> None:
    """A failing test whose recipe cannot be saved stays one failed test (exit 1), with the
    reason in its report, not an INTERNALERROR (exit 3). The failure is a property's (a reviewed
    corpus entry is never copied to pending): the documented scale behaviour kills
    qk_scale_mantissa on its first failing example (no shrink phase: the mutation plugin)."""
    from conformance.durability.state import scrubbed_env

    env = {
        **scrubbed_env(dict(os.environ)),
        "PYTHONPATH": str(REPO),
        "CONFORMANCE_DIR": str(tmp_path / "state"),
        "CONFORMANCE_PENDING_DIR": str(tmp_path / "a-file" / "pending"),
    }
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "conformance.mutation.plugin",
            "conformance/suite/test_gfx950_agreement.py::test_documented_scale_behaviour",
            "--conformance-kernel",
            "conformance.mutation.catalogue:qk_scale_mantissa",
            "--hypothesis-profile",
            "ci",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "INTERNALERROR" not in proc.stdout and "cannot save corpus entry" in proc.stdout
