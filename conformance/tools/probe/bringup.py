"""gfx950 bring-up: the checks a user with an MI355X runs once, and the report they paste into an issue.

`python -m conformance probe --kernel flydsl --bringup` runs the probes (conformance.tools.probe.run),
then:

- the F1 probe (docs/explanation/isa-interpreter.md, finding F1): one row over 64 keys whose Q blocks have distinct E8M0
  scales (block b's entries are +-4^b) and whose K blocks have distinct record scales (2^-b),
  codes in {-1, 0, 1}, softmax_scale ln 2: every score is an integer and every step exact, so
  the kernel must return the emulator's bits when the hardware reads the scaled MFMA's fp8
  operands as the kernel assumes ("split", Triton's layout). The same problem is run on the ISA
  interpreter under the other reading ("contiguous", IREE's) when flydsl is importable: a kernel
  matching that instead says the hardware disagrees with the kernel's operand placement;
- the gfx950 agreement property (conformance/suite/test_gfx950_agreement.py) through pytest.

`bringup_report` returns (all passed, Markdown text).
"""

from __future__ import annotations

import math
import platform
import subprocess
import sys
from collections.abc import Callable

import torch

from conformance.tools.probe.build import HEAD_DIM, Call, Key, run_call

F1_POSITIONS = (5, 21, 40, 70, 100, 120)


def f1_call(heads: int = 4, keys: int = 64, seed: int = 1) -> Call:
    """The distinct-scales problem (module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    call = Call(heads=heads, softmax_scale=math.log(2.0))
    ids = []
    for _ in range(keys):
        k = Key()
        for b in range(4):
            k.scales[b] = 2.0**-b
            for p in F1_POSITIONS:
                k.codes[128 * b + p] = float(torch.randint(-1, 2, (1,), generator=gen))
        ids.append(call.key(k))
    q = torch.zeros(heads, HEAD_DIM, dtype=torch.float64)
    for h in range(heads):
        for b in range(4):
            chosen = torch.randperm(len(F1_POSITIONS), generator=gen)[:2]
            for c in chosen.tolist():
                q[h, 128 * b + F1_POSITIONS[c]] = (4.0**b) * (1 if torch.rand(1, generator=gen) < 0.5 else -1)
    call.row(ids, q)
    return call


def _interpreter(layout: str) -> Callable | None:
    """flydsl-isa under an fp8 operand reading, or None when the interpreter cannot run here."""
    try:
        import kernel.isa.ops_matrix as om
        from kernel.flydsl.isa_backend import flydsl_isa_backend
    except ImportError:
        return None
    try:
        backend = flydsl_isa_backend()
    except Exception:  # noqa: BLE001 - unavailable interpreter: no candidate
        return None

    def run(*args, **kwargs):  # type: ignore[no-untyped-def]
        saved = om.F8_LAYOUT
        om.F8_LAYOUT = layout
        try:
            return backend.fn(*args, **kwargs)
        finally:
            om.F8_LAYOUT = saved

    return run


def f1_probe(kernel: Callable, device: str) -> tuple[str, dict[str, int]]:
    """(verdict, differing out elements per candidate): "split" when the kernel returns the
    emulator's bits, "contiguous" when it returns the interpreter's contiguous-reading bits,
    else "neither"."""
    from kernel.emulated.gfx950 import emulated_backend

    call = f1_call()
    out, _ = run_call(kernel, call, device)
    diffs: dict[str, int] = {}
    ref, _ = run_call(emulated_backend(), call, "cpu")
    diffs["split (emulated)"] = int((ref != out).sum())
    contiguous = _interpreter("contiguous")
    if contiguous is not None:
        alt, _ = run_call(contiguous, call, "cpu")
        diffs["contiguous (interpreter)"] = int((alt != out).sum())
    if diffs["split (emulated)"] == 0:
        return "split", diffs
    if diffs.get("contiguous (interpreter)") == 0:
        return "contiguous", diffs
    return "neither", diffs


def agreement_property(kernel_name: str, hypothesis_profile: str, timeout_s: int = 1800) -> tuple[bool | None, str]:
    """Run conformance/suite/test_gfx950_agreement.py against the kernel under a Hypothesis profile
    (conformance.judging.hypothesis_profiles: ci 25 examples, dev 40, nightly 1000); "none": not run (None)."""
    if hypothesis_profile == "none":
        return None, "not run (--agreement-profile none)"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "conformance/suite/test_gfx950_agreement.py",
        "--kernel",
        kernel_name,
        "-q",
        "-p",
        "no:cacheprovider",
        "--hypothesis-profile",
        hypothesis_profile,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout_s} s"
    tail = (done.stdout + done.stderr).strip().splitlines()[-12:]
    return done.returncode == 0, "\n".join(tail)


def bringup_report(kernel: Callable, name: str, device: str, report, *, agreement_profile: str = "ci") -> tuple[bool, str]:
    """Markdown: machine, probe summary and evidence, F1 verdict, agreement result, measured profile."""
    lines = ["## gfx950 bring-up report", ""]
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU visible to torch"
    arch = ""
    if torch.cuda.is_available():
        arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")
    lines += [
        f"- kernel `{name}` on `{device}`; {gpu} {arch}".rstrip(),
        f"- torch {torch.__version__} (hip {getattr(torch.version, 'hip', None)}), python {platform.python_version()}",
        "",
    ]
    lines += ["### Probes", "", "```"] + report.summary_lines() + ["```", ""]
    verdict, diffs = f1_probe(kernel, device)
    f1_ok = verdict == "split"
    lines += ["### F1: fp8 operand layout of the scaled MFMA (distinct per-block scales)", ""]
    lines += [f"- differing out elements against {k}: {v}" for k, v in diffs.items()]
    lines += [
        f"- verdict: **{verdict}**"
        + (
            " (the hardware reads the operands as the kernel places them)"
            if f1_ok
            else " (the kernel's operand placement disagrees with the hardware: see docs/explanation/isa-interpreter.md F1)"
        ),
        "",
    ]
    ok_agree, text = agreement_property(name, agreement_profile)
    lines += [
        "### gfx950 agreement property",
        "",
        f"result: {'passed' if ok_agree else ('not run' if ok_agree is None else 'FAILED')}",
        "",
        "```",
        text,
        "```",
        "",
    ]
    lines += ["<details><summary>evidence</summary>", "", "```"]
    for ev in report.evidence:
        lines += ev.lines()
    lines += ["```", "</details>", "", "### Measured profile", "", "```toml", report.text.rstrip(), "```"]
    return f1_ok and ok_agree is not False, "\n".join(lines)
