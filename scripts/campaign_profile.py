"""Where a fuzz campaign's time goes: run `python -m conformance fuzz ...` in this process under
cProfile and split its wall time into stages.

    python scripts/campaign_profile.py --out DIR -- --kernel emulated --seconds 120 --hypothesis-profile nightly

Stages (cumulative time of the functions that do them; they do not nest in one another):
    draw         Hypothesis drawing recipes (DataObject.draw in the properties' body)
    materialise  strategies.materialize.materialize (recipe -> tensors)
    support      Backend.supports (the contract check before the call)
    kernel       the kernel call (conformance.judging.harness.run_kernel without the input guard)
    input guard  conformance.durability.input_guard (snapshot of the inputs and the check after the call)
    oracle+bound oracle.bound.evaluate_modes (reference and a-priori bound, both modes)
      of which gather  oracle.rows.gather_bound_batch (records gathered and decoded)
    compare      conformance.judging.harness._compare_modes (errors against the bound: compare and judge)
    preconditions check  oracle.preconditions.check_call (the preconditions property's findings
                 before its kernel call)
    record       conformance.judging.harness.record (the run folder's example log)
    coverage     conformance.records.coverage.Coverage.add
    other        the rest of the wall time (Hypothesis's engine, shrinking, progress, start-up)
Writes DIR/profile.pstats, DIR/stages.json and DIR/stages.txt (also printed) and the fuzz
summary as the fuzz command prints it; the exit code is fuzz's.

`--timers` measures the same stages without cProfile (whose per-call cost inflates Python-heavy
stages such as the draw against torch-heavy ones): each stage's functions are wrapped with a wall
and a CPU clock (time.process_time: this process, all threads), counted once where a stage calls
itself; writes DIR/stages.txt and DIR/stages.json with both columns (no pstats).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import inspect
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (stage, file suffix, function name); "-" prefixed stages are subtracted from the one before.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("draw", "hypothesis/strategies/_internal/core.py", "draw"),
    ("materialise", "strategies/materialize.py", "materialize"),
    ("support", "kernel/backend.py", "supports"),
    ("kernel", "conformance/judging/harness.py", "run_kernel"),
    ("input guard", "conformance/durability/input_guard.py", "snapshot"),
    ("input guard", "conformance/durability/input_guard.py", "changes"),
    ("oracle+bound", "oracle/bound.py", "evaluate_modes"),
    ("compare", "conformance/judging/harness.py", "_compare_modes"),
    ("preconditions check", "oracle/preconditions.py", "check_call"),
    ("record", "conformance/judging/harness.py", "record"),
    ("coverage", "conformance/records/coverage.py", "add"),
)
GATHER = ("oracle/rows.py", "gather_bound_batch")
# the same stages as (module, attribute path) for --timers
TIMED: tuple[tuple[str, str, str], ...] = (
    ("draw", "hypothesis.strategies._internal.core", "DataObject.draw"),
    ("materialise", "strategies.materialize", "materialize"),
    ("support", "kernel.backend", "Backend.supports"),
    ("kernel", "conformance.judging.harness", "run_kernel"),
    ("input guard", "conformance.durability.input_guard", "snapshot"),
    ("input guard", "conformance.durability.input_guard", "InputSnapshot.changes"),
    ("oracle+bound", "oracle.bound", "evaluate_modes"),
    ("compare", "conformance.judging.harness", "_compare_modes"),
    ("preconditions check", "oracle.preconditions", "check_call"),
    ("record", "conformance.judging.harness", "record"),
    ("coverage", "conformance.records.coverage", "Coverage.add"),
    ("gather (in oracle+bound)", "oracle.rows", "gather_bound_batch"),
)


class StageTimers:
    """Wall and CPU seconds per stage of TIMED, by wrapping the stages' functions (see --timers)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._depth: dict[str, int] = {}

    def _enter(self, stage: str) -> tuple[float, float] | None:
        self._depth[stage] = self._depth.get(stage, 0) + 1
        return (time.perf_counter(), time.process_time()) if self._depth[stage] == 1 else None

    def _leave(self, stage: str, start: tuple[float, float] | None) -> None:
        self._depth[stage] -= 1
        if start is not None:
            self.wall[stage] = self.wall.get(stage, 0.0) + time.perf_counter() - start[0]
            self.cpu[stage] = self.cpu.get(stage, 0.0) + time.process_time() - start[1]

    def wrap(self, stage: str, fn: Any) -> Any:
        timers = self

        def timed_iter(gen: Any) -> Any:
            while True:
                start = timers._enter(stage)
                try:
                    item = next(gen)
                except StopIteration:
                    return
                finally:
                    timers._leave(stage, start)
                yield item

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = timers._enter(stage)
            try:
                result = fn(*args, **kwargs)
            finally:
                timers._leave(stage, start)
            return timed_iter(result) if inspect.isgenerator(result) else result

        return timed

    def install(self) -> None:
        """Wrap every TIMED function where it is defined and wherever a loaded module imported it by name."""
        for stage, module_name, path in TIMED:
            owner: Any = importlib.import_module(module_name)
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            original = getattr(owner, name)
            wrapped = self.wrap(stage, original)
            setattr(owner, name, wrapped)
            if not parents:
                for module in list(sys.modules.values()):
                    namespace = getattr(module, "__dict__", None)
                    if isinstance(namespace, dict):
                        for key, value in list(namespace.items()):
                            if value is original:
                                namespace[key] = wrapped

    def seconds(self, clock: dict[str, float], total: float) -> dict[str, float]:
        out = {stage: clock.get(stage, 0.0) for stage in dict.fromkeys(s for s, _, _ in TIMED)}
        out["kernel"] -= out["input guard"]  # the guard runs inside run_kernel
        out["other"] = total - sum(v for k, v in out.items() if not k.startswith("gather"))
        return out


def stage_seconds(stats: pstats.Stats, wall: float) -> dict[str, float]:
    """Seconds per stage (module docstring) from cProfile stats of the whole campaign."""
    table = stats.stats  # type: ignore[attr-defined]

    def cum(suffix: str, func: str) -> float:
        return sum(v[3] for (file, _line, name), v in table.items() if name == func and file.replace("\\", "/").endswith(suffix))

    out: dict[str, float] = {}
    for stage, suffix, func in STAGES:
        out[stage] = out.get(stage, 0.0) + cum(suffix, func)
    out["kernel"] -= out["input guard"]  # the guard runs inside run_kernel
    out["gather (in oracle+bound)"] = cum(*GATHER)
    out["other"] = wall - sum(v for k, v in out.items() if not k.startswith("gather"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timers", action="store_true", help="wall and CPU clocks per stage instead of cProfile")
    parser.add_argument("fuzz_args", nargs=argparse.REMAINDER, help="-- then the arguments of `python -m conformance fuzz`")
    args = parser.parse_args(argv)
    fuzz_args = [a for a in args.fuzz_args if a != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    from conformance.cli import main as cli_main

    if args.timers:
        return _timed(args.out, fuzz_args, cli_main)

    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    try:
        code = cli_main(["fuzz", *fuzz_args])
    finally:
        profiler.disable()
    wall = time.perf_counter() - t0
    profiler.dump_stats(str(args.out / "profile.pstats"))
    stats = pstats.Stats(profiler)
    seconds = stage_seconds(stats, wall)
    lines = [f"campaign wall time {wall:.1f} s (under cProfile); fuzz {' '.join(fuzz_args)}", f"{'stage':<26} {'seconds':>8} {'share':>6}"]
    lines += [f"{k:<26} {v:>8.1f} {100 * v / wall:>5.1f}%" for k, v in seconds.items()]
    text = "\n".join(lines)
    print(text)
    (args.out / "stages.txt").write_text(text + "\n")
    (args.out / "stages.json").write_text(json.dumps({"wall_s": wall, "fuzz_args": fuzz_args, "stages_s": seconds}, indent=1) + "\n")
    with open(args.out / "top.txt", "w", encoding="utf-8") as handle:
        pstats.Stats(profiler, stream=handle).sort_stats("cumulative").print_stats(60)
        pstats.Stats(profiler, stream=handle).sort_stats("tottime").print_stats(40)
    return code


def _timed(out: Path, fuzz_args: list[str], cli_main: Any) -> int:
    """The campaign under StageTimers; stages.txt / stages.json with wall and CPU seconds."""
    for module in ("conformance.judging.checks", "conformance.campaign.fuzz", "conformance.records.coverage"):
        importlib.import_module(module)
    timers = StageTimers()
    timers.install()
    t0, c0 = time.perf_counter(), time.process_time()
    code = cli_main(["fuzz", *fuzz_args])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    walls, cpus = timers.seconds(timers.wall, wall), timers.seconds(timers.cpu, cpu)
    lines = [
        f"campaign wall time {wall:.1f} s, CPU time {cpu:.1f} s (stage timers, no cProfile); fuzz {' '.join(fuzz_args)}",
        f"{'stage':<26} {'wall s':>8} {'share':>6} {'CPU s':>8} {'share':>6}",
    ]
    lines += [f"{k:<26} {walls[k]:>8.1f} {100 * walls[k] / wall:>5.1f}% {cpus[k]:>8.1f} {100 * cpus[k] / cpu:>5.1f}%" for k in walls]
    text = "\n".join(lines)
    print(text)
    (out / "stages.txt").write_text(text + "\n")
    (out / "stages.json").write_text(
        json.dumps({"wall_s": wall, "cpu_s": cpu, "fuzz_args": fuzz_args, "stages_s": walls, "stages_cpu_s": cpus}, indent=1) + "\n"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
