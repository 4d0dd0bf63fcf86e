"""Throughput of fuzz campaigns: N concurrent `python -m conformance fuzz` processes per kernel,
pinned round robin to the GPUs (or on the CPU), optionally under NVIDIA MPS, their summaries
merged into one table.

    python -m benchmarks campaign --kernels emulated,flashmla --procs 6 --seconds 480 [--mps] [--out DIR]
    python -m benchmarks campaign --device cpu --procs 2 --seconds 30
    python -m benchmarks campaign --kernels emulated --procs 8,15 --seconds 60 --mps   # one campaign per count
    python -m benchmarks campaign --table DIR/fuzz-*.json [--markdown]       # the table again

By default a kernel gets cores / kernels processes (at least 1): one process per core, since a
process's own host work, not the GPU, is what limits a campaign (on a 16-core H100 host, 24
processes that sleep while they wait on the GPU made as many examples/s as 16 that spin, and 32
made fewer: docs/reference/measurements.md, "Processes per GPU: the host is the limit").

Every process is `python -m conformance fuzz --kernel K --seconds S --hypothesis-profile P
--shrink-seconds X` with its own state folder (DIR/state/K-n: its run folder and fuzz-summary.json)
and the kernel's pending folder (DIR/pending-K), one CPU thread (OMP_NUM_THREADS=1: many processes
share the cores, and torch's intra-op threads only add parallel regions whose start-up,
oversubscribed, costs milliseconds per small op), on one GPU (CUDA_VISIBLE_DEVICES: the GPUs of
the caller's CUDA_VISIBLE_DEVICES, else every GPU, taken in turn), or with no GPU under --device
cpu. --cpu-procs adds that many `emulated` processes on the CPU beside the GPU's (their own row).
Each process gets SIGINT at S + 50 s (which still writes its summary) and SIGKILL 15 s later (each
starts with SIGINT's default action, even when this command runs where SIGINT is ignored).

Summaries of the same kernel on the same device are one campaign and are merged into one row:
kernel, device, processes, wall seconds (the longest process), examples (summed), examples/s
overall (the processes' rates summed: examples / wall time each, shrinking included),
examples/s per property (summed: each its examples / the seconds it spent judging them), examples
per CPU second (all examples / all the processes' CPU seconds), distinct failures (summed: a
failure two processes found counts twice), and the strategy features hit / reachable over every
family (a class counts as hit when any process drew it). Then, per kernel, the classes no process
drew. Written to DIR: fuzz-K-n.txt / .err (each process's output), fuzz-K-n.json (its summary),
campaigns.txt / campaigns.md / campaigns.json (the table), campaign-env.json (cores, GPUs,
processes, MPS state).

While the processes run, benchmarks.utilisation samples the host's CPU busy share and each GPU's
utilisation (nvidia-smi's utilization.gpu): one line under the table ("utilisation over ..."),
and "utilisation" in campaign-env.json.

`--stages`: each kernel's first process runs its fuzz command under `python -m benchmarks
campaign_stages --timers` (DIR/stages-K-1/stages.txt and stages.json): where the time of one
process goes while the others share the host and the GPU with it, the host's waits on the device
in its "host reads" row. Its summary is counted like the others' (the timers cost it a little).

Several process counts (`--procs 8,15`): one campaign per count, in turn, each in its own folder
DIR/procs-N (the files above), under one MPS server; then DIR/scaling.txt and DIR/scaling.json,
one row per count: processes in all, examples/s (every kernel's summed), examples/s per process,
the host's busy share and the GPUs' utilisation. Examples/s that stop growing as the processes
grow say the processes share a limit (the GPU, or the host's cores when those are busy); examples/s
per process that hold say they do not. Not with --procs-of (which sets one kernel's count).

Exit codes: 0 every process wrote its summary; 1 a process wrote none (see its .err); 2 bad options
or unreadable --table files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import mps, utilisation
from benchmarks.common import int_list, parse, positive

PROPS = ("differential", "long_rows", "preconditions")
GRACE_S = 50  # after the budget: shrinking, the report, the summary
KILL_S = 15  # after SIGINT
HEADER = [
    "kernel",
    "device",
    "procs",
    "wall s",
    "examples",
    "ex/s",
    *(f"{p} ex/s (n)" for p in PROPS),
    "ex per CPU s",
    "failures",
    "features hit",
]


def merge(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One kernel's summaries as one campaign (see the module docstring)."""
    per: dict[str, dict[str, float]] = defaultdict(lambda: {"examples": 0, "examples_per_s": 0.0, "calls": 0})
    for data in summaries:
        for prop, values in data.get("per_property", {}).items():
            per[prop]["examples"] += values.get("examples", 0)
            per[prop]["examples_per_s"] += values.get("examples_per_s", 0.0)
            per[prop]["calls"] += values.get("calls", 0)  # kernel calls judged (0: a summary that does not count them)
    hit: dict[str, set[str]] = defaultdict(set)
    reachable: dict[str, set[str]] = defaultdict(set)
    for data in summaries:
        for family, values in data.get("features", {}).items():
            counts = values.get("counts", {})
            reachable[family].update(counts)
            hit[family].update(c for c, n in counts.items() if n)
    examples = sum(d.get("examples", 0) for d in summaries)
    cpu = [d["cpu_s"] for d in summaries if "cpu_s" in d]
    return {
        "kernel": summaries[0].get("kernel", "?"),
        "device": summaries[0].get("device", "?"),
        "processes": len(summaries),
        "seconds": max(d.get("seconds", 0) for d in summaries),
        "examples": examples,
        "examples_per_s": sum(d.get("examples_per_s", 0.0) for d in summaries),
        "examples_per_cpu_s": examples / sum(cpu) if len(cpu) == len(summaries) and sum(cpu) > 0 else None,
        "per_property": dict(per),
        "failures": sum(d.get("failures", 0) for d in summaries),
        "hit": sum(len(hit[f]) for f in reachable),
        "reachable": sum(len(reachable[f]) for f in reachable),
        "never_hit": {f: sorted(reachable[f] - hit[f]) for f in reachable if reachable[f] - hit[f]},
    }


def row(merged: dict[str, Any]) -> list[str]:
    """The table cells of one kernel's merged campaign."""
    per = merged["per_property"]
    rates = [f"{per[p]['examples_per_s']:.2f} ({per[p]['examples']})" if p in per else "-" for p in PROPS]
    cpu_rate = merged["examples_per_cpu_s"]
    return [
        merged["kernel"],
        merged["device"],
        str(merged["processes"]),
        f"{merged['seconds']:.0f}",
        str(merged["examples"]),
        f"{merged['examples_per_s']:.2f}",
        *rates,
        "-" if cpu_rate is None else f"{cpu_rate:.2f}",
        str(merged["failures"]),
        f"{merged['hit']}/{merged['reachable']}",
    ]


def table(summaries: list[dict[str, Any]], *, markdown: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """The table of `summaries` (grouped by kernel and device) and the merged rows."""
    by_kernel: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for data in summaries:
        by_kernel[(str(data.get("kernel", "?")), str(data.get("device", "?")))].append(data)
    merged = [merge(group) for group in by_kernel.values()]
    rows = [row(m) for m in merged]
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER), *("| " + " | ".join(r) + " |" for r in rows)]
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADER)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    for m in merged:
        never = "; ".join(f"{family}: {', '.join(classes)}" for family, classes in m["never_hit"].items())
        lines.append(f"{m['kernel']} ({m['device']}): never hit by any process: {never or 'none'}")
    return "\n".join(lines), merged


def read_summaries(paths: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The fuzz summaries at `paths` and one line per file that could not be read."""
    summaries, problems = [], []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            problems.append(f"{path}: unreadable ({err})")
            continue
        if not isinstance(data, dict) or "examples" not in data:
            problems.append(f"{path}: not a fuzz summary (no 'examples')")
            continue
        summaries.append(data)
    return summaries, problems


@dataclass
class Process:
    """One fuzz process of the campaign."""

    kernel: str
    label: str  # file stem: fuzz-<label>.*
    device: str  # "cpu", or the GPU index it is pinned to
    state: Path
    popen: subprocess.Popen[bytes] | None = None


def visible_gpus(device: str) -> list[str]:
    """The GPUs the processes are pinned to: none for --device cpu, else those of
    $CUDA_VISIBLE_DEVICES, else every GPU torch sees."""
    if device == "cpu":
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def plan(args: argparse.Namespace, gpus: list[str], procs: int, folder: Path | None = None) -> list[Process]:
    """Every process of the campaign, GPUs given round robin: `procs` per kernel unless
    --procs-of says otherwise, their state under `folder` (default args.out)."""
    base = args.out if folder is None else folder
    out: list[Process] = []
    slot = 0
    for kernel in args.kernels:
        for n in range(1, args.procs_of.get(kernel, procs) + 1):
            device = gpus[slot % len(gpus)] if gpus else "cpu"
            slot += 1
            out.append(Process(kernel, f"{kernel}-{n}", device, base / "state" / f"{kernel}-{n}"))
    for n in range(1, args.cpu_procs + 1):
        out.append(Process("emulated", f"emulated-cpu-{n}", "cpu", base / "state" / f"emulated-cpu-{n}"))
    return out


def default_sigint() -> None:
    """In a child before its exec: SIGINT back to its default action. A process started in the
    background of a non-interactive shell (`cmd &`, nohup) ignores SIGINT and its children inherit
    that; Python then installs no KeyboardInterrupt handler, and the time limit's SIGINT (which lets
    a fuzz process write its summary) would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fuzz_env(state: Path, pending: Path, cuda_devices: str | None) -> dict[str, str]:
    """The environment of one fuzz process: this one's, one CPU thread (module docstring), its own
    state and pending folders, and CUDA_VISIBLE_DEVICES set to `cuda_devices` ("": no GPU; None:
    as inherited)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CONFORMANCE_DIR": str(state), "CONFORMANCE_PENDING_DIR": str(pending)}
    if cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_devices
    return env


def launch(proc: Process, args: argparse.Namespace, extra_env: dict[str, str], folder: Path | None = None) -> None:
    """Start one fuzz process (module docstring), its files in `folder` (default args.out)."""
    folder = args.out if folder is None else folder
    fuzz = ["--kernel", proc.kernel, "--seconds", str(args.seconds)]
    fuzz += ["--hypothesis-profile", args.hypothesis_profile, "--shrink-seconds", str(args.shrink_seconds)]
    env = fuzz_env(proc.state, folder / f"pending-{proc.kernel}", "" if proc.device == "cpu" else proc.device)
    if proc.device == "cpu":
        fuzz += ["--device", "cpu"]
    else:
        env.update(extra_env)
    fuzz += args.fuzz_arg
    if args.stages and proc.label == f"{proc.kernel}-1":
        stages = ["-m", "benchmarks", "campaign_stages", "--out", str(folder / f"stages-{proc.label}"), "--timers", "--"]
        command = [sys.executable, *stages, *fuzz]
    else:
        command = [sys.executable, "-m", "conformance", "fuzz", *fuzz]
    proc.state.mkdir(parents=True, exist_ok=True)
    with open(folder / f"fuzz-{proc.label}.txt", "wb") as out, open(folder / f"fuzz-{proc.label}.err", "wb") as err:
        proc.popen = subprocess.Popen(command, stdout=out, stderr=err, env=env, stdin=subprocess.DEVNULL, preexec_fn=default_sigint)


def wait_all(procs: list[Process], limit_s: float) -> None:
    """Wait for every process; SIGINT at `limit_s`, SIGKILL KILL_S later."""
    started = time.monotonic()
    interrupted = killed = False
    while any(p.popen is not None and p.popen.poll() is None for p in procs):
        elapsed = time.monotonic() - started
        if elapsed > limit_s and not interrupted:
            interrupted = True
            for p in procs:
                if p.popen is not None and p.popen.poll() is None:
                    p.popen.send_signal(signal.SIGINT)
        if elapsed > limit_s + KILL_S and not killed:
            killed = True
            for p in procs:
                if p.popen is not None and p.popen.poll() is None:
                    p.popen.kill()
        time.sleep(0.2)


def collect(proc: Process, out: Path) -> Path | None:
    """The process's fuzz-summary.json copied to out/fuzz-<label>.json (None when it wrote none)."""
    found = sorted(proc.state.glob("runs/*/fuzz-summary.json"))
    if not found:
        return None
    target = out / f"fuzz-{proc.label}.json"
    shutil.copyfile(found[-1], target)
    return target


def _procs_of(text: str) -> tuple[str, int]:
    kernel, sep, count = text.partition("=")
    if not sep or not kernel:
        raise argparse.ArgumentTypeError(f"expected KERNEL=N, got {text!r}")
    return kernel, positive(count)


def _kernels(text: str) -> list[str]:
    names = [k.strip() for k in text.split(",") if k.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated kernel names")
    return names


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks campaign", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kernels", type=_kernels, default=["emulated"], metavar="K,K,...", help="kernels to fuzz (default emulated)")
    p.add_argument(
        "--procs",
        type=int_list,
        default=None,
        metavar="N[,N...]",
        help="processes per kernel (default cores / kernels, at least 1); several counts: one campaign each, in turn",
    )
    p.add_argument("--procs-of", type=_procs_of, action="append", default=[], metavar="K=N", help="processes of one kernel (repeatable)")
    p.add_argument("--cpu-procs", type=int, default=0, metavar="N", help="more `emulated` processes on the CPU beside the GPU's")
    p.add_argument("--seconds", type=_seconds, default=480.0, metavar="S", help="each process's budget (default 480)")
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="cuda: pin to GPUs; cpu: no GPU (default: cuda when there is one)"
    )
    p.add_argument("--hypothesis-profile", choices=("ci", "dev", "nightly"), default="nightly", help="(default nightly)")
    p.add_argument("--shrink-seconds", type=_seconds, default=20.0, metavar="S", help="longest shrink of one failure (default 20)")
    p.add_argument("--fuzz-arg", action="append", default=[], metavar="ARG", help="one more argument for every fuzz process (repeatable)")
    p.add_argument("--mps", action="store_true", help="the GPU processes as clients of one NVIDIA MPS server (fail-soft: benchmarks.mps)")
    p.add_argument(
        "--stages",
        action="store_true",
        help="each kernel's first process under `campaign_stages --timers` (DIR/stages-K-1): its stages beside the others",
    )
    p.add_argument("--out", type=Path, default=Path("campaign-results"), metavar="DIR", help="results folder (default campaign-results)")
    p.add_argument("--table", type=Path, nargs="+", default=None, metavar="SUMMARY", help="only print the table of these fuzz summaries")
    p.add_argument("--markdown", action="store_true", help="with --table: a Markdown table")
    return p


def main(argv: list[str]) -> int:
    """The routine (module docstring); the exit code."""
    args = parse(parser(), argv)
    if isinstance(args, int):
        return args
    if args.table is not None:
        summaries, problems = read_summaries(args.table)
        for line in problems:
            print(line, file=sys.stderr)
        if not summaries:
            return 2
        print(table(summaries, markdown=args.markdown)[0])
        return 0
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Run the campaign (one per process count of --procs), write the results folder, print the table."""
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    gpus = visible_gpus(device)
    if device == "cuda" and not gpus:
        print("campaign: --device cuda, but no GPU is visible here", file=sys.stderr)
        return 2
    counts: list[int] = args.procs or []
    repeated = sorted({n for n in counts if counts.count(n) > 1})
    if repeated:
        print(f"campaign: --procs lists {', '.join(map(str, repeated))} more than once", file=sys.stderr)
        return 2
    if len(counts) > 1 and args.procs_of:
        print("campaign: --procs with several counts sets every kernel's processes; --procs-of is not taken with it", file=sys.stderr)
        return 2
    args.procs_of = dict(args.procs_of)
    cores = os.cpu_count() or 1
    counts = counts or [max(1, cores // len(args.kernels))]  # one process per core: the host's work is the limit (module docstring)
    args.out.mkdir(parents=True, exist_ok=True)
    session: mps.MpsSession | str = "not requested"
    if args.mps:
        session = mps.start(args.out / "mps-log") if gpus else "no GPU"
    scaling: list[dict[str, Any]] = []
    code = 0
    try:
        for count in counts:
            folder = args.out if len(counts) == 1 else args.out / f"procs-{count}"
            done, processes, merged, usage = _one_campaign(args, count, folder, device, gpus, cores, session)
            code = max(code, done)
            rate = sum(m["examples_per_s"] for m in merged)
            scaling.append({"procs": processes, "examples_per_s": rate, "per_process": rate / processes, "utilisation": usage.to_json()})
            if len(counts) > 1:
                print(f"campaign: {processes} processes done ({rate:.2f} examples/s)", flush=True)
    finally:
        if isinstance(session, mps.MpsSession):
            session.stop()
    if len(counts) > 1:
        text = scaling_table(scaling)
        (args.out / "scaling.txt").write_text(text + "\n")
        (args.out / "scaling.json").write_text(json.dumps(scaling, indent=1) + "\n")
        print(text)
    return code


def _one_campaign(
    args: argparse.Namespace,
    count: int,
    folder: Path,
    device: str,
    gpus: list[str],
    cores: int,
    session: mps.MpsSession | str,
) -> tuple[int, int, list[dict[str, Any]], utilisation.Utilisation]:
    """One campaign of `count` processes per kernel into `folder`: (exit code, processes in all,
    merged rows, utilisation)."""
    folder.mkdir(parents=True, exist_ok=True)
    procs = plan(args, gpus, count, folder)
    mps_state = f"on (server {session.servers})" if isinstance(session, mps.MpsSession) else f"off: {session}"
    env_info: dict[str, Any] = {
        "cores": cores,
        "gpus": gpus,
        "device": device,
        "kernels": args.kernels,
        "processes": {p.label: p.device for p in procs},
        "seconds": args.seconds,
        "mps": mps_state,
    }
    (folder / "campaign-env.json").write_text(json.dumps(env_info, indent=1) + "\n")
    print(
        f"campaign: {len(procs)} processes ({', '.join(args.kernels)}) on {', '.join(f'GPU {g}' for g in gpus) or 'the CPU'}, "
        f"{args.seconds:g} s each; MPS {mps_state}",
        flush=True,
    )
    used = sorted({p.device for p in procs if p.device != "cpu"})
    with utilisation.Sampler(used, cores=cores) as sampler:
        for proc in procs:
            launch(proc, args, session.env if isinstance(session, mps.MpsSession) else {}, folder)
        wait_all(procs, args.seconds + GRACE_S)
    usage = sampler.result()
    env_info["utilisation"] = usage.to_json()
    (folder / "campaign-env.json").write_text(json.dumps(env_info, indent=1) + "\n")
    paths, missing = [], []
    for proc in procs:
        path = collect(proc, folder)
        (paths if path else missing).append(path or proc.label)
    summaries, problems = read_summaries([p for p in paths if isinstance(p, Path)])
    for label in missing:
        print(f"campaign: fuzz-{label} wrote no summary (see {folder / f'fuzz-{label}.err'})", file=sys.stderr)
    for line in problems:
        print(line, file=sys.stderr)
    merged: list[dict[str, Any]] = []
    if summaries:
        text, merged = table(summaries)
        text += "\n" + usage.line()
        (folder / "campaigns.txt").write_text(text + "\n")
        (folder / "campaigns.md").write_text(table(summaries, markdown=True)[0] + "\n\n" + usage.line() + "\n")
        (folder / "campaigns.json").write_text(json.dumps(merged, indent=1) + "\n")
        print(text)
    return (1 if missing or problems else 0), len(procs), merged, usage


def scaling_table(rows: list[dict[str, Any]]) -> str:
    """DIR/scaling.txt: one line per process count (module docstring, "Several process counts")."""
    lines = ["procs  examples/s  per process  host busy  GPU busy"]
    for r in rows:
        usage = r["utilisation"]
        host = "-" if usage["host_busy"] is None else f"{100 * usage['host_busy']:.1f}%"
        gpu = ", ".join(f"{name} {busy:.1f}%" for name, busy in usage["gpu_busy_percent"].items()) or "-"
        lines.append(f"{r['procs']:<5d}  {r['examples_per_s']:<10.2f}  {r['per_process']:<11.2f}  {host:<9s}  {gpu}")
    return "\n".join(lines)
