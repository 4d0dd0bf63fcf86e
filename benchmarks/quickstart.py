"""The README's "Test your own kernel" steps, followed and timed as a new user follows them.

In a fresh folder outside the checkout: a virtual environment, `pip install` of the suite (the
README's command), the float32 reference kernel copied in, the first verdict and the whole suite
timed; then each of the three planted bugs of `examples/fp32_buggy/kernel.py` (lse in log2, an
unmasked invalid entry, the scale of the wrong 128-block) run through the suite as the user would,
with what a kernel engineer reads: the headline of each distinct failure, how many there are, the
lines of output, and every printed replay / rerun command pasted as printed into a shell in
another folder (its exit code). With `--reinstall`, the suite is installed without `-e` and
reinstalled after a failing run: the saved failures must still be in the user's folder.

Writes a Markdown report (the README's numbers come from it) and prints progress to stderr.
Seconds are wall-clock seconds on this machine, which the report describes (cores, load).

    python -m benchmarks quickstart --markdown /tmp/quickstart.md [--reuse-env] [--reinstall]
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SUITE = Path(__file__).resolve().parents[1]
BUGS = ("fp32_buggy", "unmasked_invalid", "wrong_block_scale")
BUG_NAMES = {
    "fp32_buggy": "lse in log2",
    "unmasked_invalid": "an unmasked invalid entry",
    "wrong_block_scale": "the scale of the wrong 128-block",
}
FIRST_VERDICT = "-k 'corpus or host_validation'"


@dataclass
class Step:
    """One timed command: what ran, where, how long, its exit code and the lines worth quoting."""

    name: str
    command: str
    seconds: float
    returncode: int
    tail: list[str] = field(default_factory=list)
    output: str = ""


def _say(text: str) -> None:
    print(f"quickstart: {text}", file=sys.stderr, flush=True)


def run(name: str, command: str, cwd: Path, env: dict[str, str], timeout: float = 3600) -> Step:
    """Run `command` in bash in `cwd`; the last summary lines kept."""
    _say(f"{name}: {command}")
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    tail = [line for line in (done.stdout or done.stderr).splitlines() if line.strip()][-3:]  # stderr carries progress lines
    _say(f"{name}: exit {done.returncode} in {seconds:.1f} s")
    return Step(name, command, seconds, done.returncode, tail, output)


def _machine() -> str:
    load = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the start"


def _clean_env(venv_bin: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "PYTEST_", "HYPOTHESIS_"))}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    if venv_bin is not None:
        env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv_bin.parent)
    return env


def install(work: Path, *, reuse_env: bool, editable: bool, torch_spec: str) -> tuple[list[Step], dict[str, str]]:
    """The README's install step in a fresh venv (or this interpreter's environment with `reuse_env`)."""
    if reuse_env:
        return [], _clean_env(Path(sys.executable).parent)
    steps = [run("venv", "python3 -m venv .venv", work, _clean_env(None))]
    env = _clean_env(work / ".venv" / "bin")
    suite = shlex.quote(str(SUITE))
    target = f"-e {suite}" if editable else suite
    steps.append(run("install", f"pip install -q {torch_spec} {target}", work, env))
    return steps, env


def distinct_failures(output: str) -> tuple[int | None, list[str]]:
    """(the number the grouped report announces, its headlines `[k] ...`)."""
    found = re.search(r"conformance: (\d+) distinct failures? in", output)
    headlines = [line.strip() for line in output.splitlines() if re.match(r"^\[\d+\] ", line)]
    return (int(found.group(1)) if found else None), headlines


def printed_commands(output: str) -> list[str]:
    """The replay / rerun commands the grouped report printed, as printed."""
    return [line.split(":", 1)[1].strip() for line in output.splitlines() if line.strip().startswith(("replay:", "rerun:"))]


def planted_bug(user: Path, elsewhere: Path, env: dict[str, str], bug: str, extra: str) -> list[Step]:
    """The suite against one planted bug, then each printed command pasted in another folder."""
    command = f"pytest --pyargs conformance --conformance-kernel my_buggy.py:{bug} -n auto {extra}".strip()
    steps = [run(f"bug {bug}", command, user, env)]
    for number, pasted in enumerate(printed_commands(steps[0].output), 1):
        steps.append(run(f"bug {bug} command {number}", pasted, elsewhere, env))
    return steps


def markdown(steps: list[Step], *, machine: str, started: str, reinstall: dict[str, object] | None) -> str:
    lines = [f"# Quickstart, as measured ({started})", "", f"Machine: {machine}. Command: `python -m benchmarks quickstart`.", ""]
    lines += ["| step | command | seconds | exit | last line |", "|---|---|---:|---:|---|"]
    for step in steps:
        last = step.tail[-1].replace("|", "\\|") if step.tail else ""
        lines.append(f"| {step.name} | `{step.command}` | {step.seconds:.1f} | {step.returncode} | {last[:160]} |")
    for bug in BUGS:
        run_step = next((s for s in steps if s.name == f"bug {bug}"), None)
        if run_step is None:
            continue
        count, headlines = distinct_failures(run_step.output)
        pasted = [s for s in steps if s.name.startswith(f"bug {bug} command")]
        lines += ["", f"## {BUG_NAMES[bug]} (`{bug}`)", ""]
        lines.append(f"{len(run_step.output.splitlines())} lines of output; {count} distinct failure(s):")
        lines += ["", *[f"- `{h[:300]}`" for h in headlines], ""]
        lines.append("Printed commands pasted in another folder: " + ", ".join(f"exit {s.returncode}" for s in pasted) + ".")
    if reinstall is not None:
        lines += ["", "## Saved failures survive a reinstall (pip install without -e)", ""]
        lines += [f"- {k}: {v}" for k, v in reinstall.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks quickstart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--markdown", metavar="FILE", default=None, help="write the report here (default: stdout)")
    parser.add_argument("--workdir", metavar="DIR", default=None, help="the user's folder (default: a fresh temporary folder)")
    parser.add_argument("--reuse-env", action="store_true", help="use this interpreter's environment instead of a fresh venv")
    parser.add_argument("--reinstall", action="store_true", help="install without -e and check saved failures survive a reinstall")
    parser.add_argument("--torch", default="torch==2.13.0", help="torch requirement of the install step (default torch==2.13.0)")
    parser.add_argument("--steps", default="verdict,suite,bugs", help="comma-separated: verdict, suite, bugs (default: all)")
    parser.add_argument("--bug-args", default="--hypothesis-profile ci", help="extra pytest arguments of the planted-bug runs")
    args = parser.parse_args(argv)
    chosen = {s.strip() for s in args.steps.split(",") if s.strip()}
    unknown = chosen - {"verdict", "suite", "bugs"}
    if unknown:
        parser.error(f"unknown step(s) {', '.join(sorted(unknown))}: use verdict, suite, bugs")
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    machine = _machine()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="quickstart-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    user, elsewhere = work / "my-project", work / "elsewhere"
    user.mkdir(exist_ok=True)
    elsewhere.mkdir(exist_ok=True)
    steps, env = install(work, reuse_env=args.reuse_env, editable=not args.reinstall, torch_spec=args.torch)
    shutil.copy(SUITE / "examples" / "fp32_reference" / "kernel.py", user / "my_kernel.py")
    shutil.copy(SUITE / "examples" / "fp32_reference" / "profile.toml", user / "profile.toml")
    shutil.copy(SUITE / "examples" / "fp32_buggy" / "kernel.py", user / "my_buggy.py")
    if "verdict" in chosen:
        steps.append(
            run(
                "first verdict",
                f"pytest --pyargs conformance --conformance-kernel my_kernel.py:fp32_reference -n auto {FIRST_VERDICT}",
                user,
                env,
            )
        )
    if "suite" in chosen:
        steps.append(run("whole suite", "pytest --pyargs conformance --conformance-kernel my_kernel.py:fp32_reference -n auto", user, env))
    if "bugs" in chosen:
        for bug in BUGS:
            steps += planted_bug(user, elsewhere, env, bug, args.bug_args)
    reinstall = None
    if args.reinstall and not args.reuse_env:
        pending = user / ".conformance" / "pending"
        before = sorted(str(p.relative_to(user)) for p in pending.rglob("*.json")) if pending.is_dir() else []
        steps.append(run("reinstall", f"pip install -q --force-reinstall --no-deps {shlex.quote(str(SUITE))}", work, env))
        after = sorted(str(p.relative_to(user)) for p in pending.rglob("*.json")) if pending.is_dir() else []
        located = run("where installed", "python -c 'import conformance; print(conformance.__file__)'", elsewhere, env)
        reinstall = {
            "package installed at": located.tail[-1] if located.tail else "?",
            "saved failures before the reinstall": len(before),
            "saved failures after the reinstall": len(after),
            "the same files": before == after,
            "folder": str(pending),
        }
    text = markdown(steps, machine=machine, started=started, reinstall=reinstall)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
        _say(f"report written to {args.markdown}")
    else:
        print(text)
    return 0
