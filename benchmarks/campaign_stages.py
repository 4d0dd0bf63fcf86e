"""Where a fuzz campaign's time goes: run `python -m conformance fuzz ...` in this process under
cProfile and split its wall time into stages.

    python -m benchmarks campaign_stages --out DIR -- --kernel emulated --seconds 120 --hypothesis-profile nightly
    python -m benchmarks campaign_stages --out DIR --timers --ops -- --kernel emulated --seconds 60

The campaign runs as `python -m conformance fuzz ...` would (runpy, in this process: the routine
imports no front end); its exit code is the routine's.

Stages (cumulative time of the functions that do them):
    draw         Hypothesis drawing recipes (DataObject.draw in the properties' body)
    materialise  strategies.materialize.materialize (recipe -> tensors)
    support      Backend.supports (the contract check before the call)
    kernel       the kernel call: conformance.judging.harness.run_kernel less the bookkeeping it
                 calls (the rows below, each counted by its calls from run_kernel: cProfile's
                 caller edges), so no other caller's time is taken off the kernel
    input guard  conformance.durability.input_guard (snapshot of the inputs and the check after the call)
    write-ahead + watchdog  the write-ahead file (wal.in_flight) and the call's time limit
                 (watchdog.limit_call): run_kernel's two context managers
    progress     conformance.judging.progress.tick
    oracle+bound oracle.bound.evaluate_modes (reference and a-priori bound, both modes; with --timers
                 also oracle.batch.evaluate_many, several calls' at once)
      of which gather  oracle.rows.gather_bound_batch (records gathered and decoded)
    compare      conformance.judging.harness._compare_modes (errors against the bound: compare and judge;
                 with --timers also conformance.judging.many._compare, several calls' at once)
    preconditions check  oracle.preconditions.check_call (the preconditions property's findings
                 before its kernel call)
    record       conformance.judging.harness.record and conformance.judging.checks.record_verdicts
                 (the run folder's example log: one line, or a judged call's lines)
    coverage     conformance.records.coverage.Coverage.add
    start-up + report  the wall time outside conformance.campaign.fuzz.campaign (imports, the
                 CLI, the run report)
    other        the rest of the wall time (Hypothesis's engine and shrinking, the body's glue)
A line "inconsistent: ..." follows the table when the figures contradict one another (a
negative stage: see check_consistency).
Writes DIR/profile.pstats, DIR/stages.json and DIR/stages.txt (also printed) and the fuzz
summary as the fuzz command prints it; the exit code is fuzz's.

`--timers` measures the stages without cProfile (whose per-call cost inflates Python-heavy
stages such as the draw against torch-heavy ones): each stage's functions are wrapped with a wall
and a CPU clock (time.process_time: this process, all threads). The clocks are exclusive (a
stage entered inside another pauses it: StageTimers), so the rows add up to the campaign and none
can be negative. --timers also splits "other": the write-ahead file, the watchdog, progress,
hypothesis.target, the judging glue (differential / violation_run less their stages: judges(),
check_types, triage), the coverage classes' set-up, the minimiser, Hypothesis's generate,
optimise (target-driven hill climbing) and shrink phases (their own time: the examples they run
are in the example stages), the campaign loop ("hypothesis: rest"), start-up, report; "other"
is then the time in no timed function. --timers also times the host reads of device values
("host reads": Tensor.tolist, .item, .cpu, .nonzero and torch.nonzero, bool(), int() and float() of
a tensor), whichever stage makes them: on a GPU a read waits for every launch queued before it,
so without --sync this row is the time the host waited on the device (on a GPU that several
processes share, their queues' too) and the stages hold only their host work. `--sync` (GPU)
synchronises the device at every stage boundary: a kernel launch returns before the device is
done, and without it the queued work is charged to the next host read. Writes DIR/stages.txt
and DIR/stages.json with both columns (no pstats). `--ops` (with --timers) also counts each stage's launched torch
ops (conformance.tools.op_count's rule: on a GPU about one kernel launch each, what a GPU that
several processes share pays for) into DIR/ops.txt and DIR/ops.json: ops in all, calls of the
stage, ops per call and the commonest ops. `--syncs` (with --timers, on a GPU) counts the
host-device synchronisations by the project's line that makes them and the stage it is in
(benchmarks.syncs: torch's sync debug mode) into DIR/syncs.txt and DIR/syncs.json, with the
syncs per kernel call: the waits the "host reads" row adds up, and the copies from host to device
that wait too.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import importlib
import json
import pstats
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import parse
from benchmarks.syncs import SyncCounter

# (stage, file suffix, function name): the cProfile stages (cumulative time of those functions)
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
    ("record", "conformance/judging/checks.py", "record_verdicts"),
    ("coverage", "conformance/records/coverage.py", "add"),
)
GATHER = ("oracle/rows.py", "gather_bound_batch")
RUN_KERNEL = ("conformance/judging/harness.py", "run_kernel")
# what run_kernel calls that is not the kernel: (stage, callee file suffix, callee name). cProfile
# gives the time of each callee *as called from run_kernel* (the caller edge), so only that part
# leaves the kernel stage, never a stage's time spent elsewhere.
KERNEL_BOOKKEEPING: tuple[tuple[str, str, str], ...] = (
    ("input guard", "conformance/durability/input_guard.py", "snapshot"),
    ("input guard", "conformance/durability/input_guard.py", "changes"),
    ("write-ahead + watchdog", "contextlib.py", "__enter__"),  # in_flight and limit_call
    ("write-ahead + watchdog", "contextlib.py", "__exit__"),
    ("progress", "conformance/judging/progress.py", "tick"),
)
CAMPAIGN = ("conformance/campaign/fuzz.py", "campaign")
#: the Tensor methods that read device values back to the host (the "host reads" stage of --timers)
HOST_READ_METHODS = ("tolist", "item", "cpu", "nonzero", "__bool__", "__int__", "__float__")
# the same stages as (module, attribute path) for --timers; then the harness's own stages that
# cProfile leaves in "other" (Hypothesis's engine phases, bookkeeping, progress)
TIMED: tuple[tuple[str, str, str], ...] = (
    ("draw", "hypothesis.strategies._internal.core", "DataObject.draw"),
    ("materialise", "strategies.materialize", "materialize"),
    ("support", "kernel.backend", "Backend.supports"),
    ("kernel", "conformance.judging.harness", "run_kernel"),
    ("input guard", "conformance.durability.input_guard", "snapshot"),
    ("input guard", "conformance.durability.input_guard", "InputSnapshot.changes"),
    ("oracle+bound", "oracle.bound", "evaluate_modes"),
    ("oracle+bound", "oracle.batch", "evaluate_many"),
    ("compare", "conformance.judging.harness", "_compare_modes"),
    ("compare", "conformance.judging.many", "_compare"),
    ("preconditions check", "oracle.preconditions", "check_call"),
    ("record", "conformance.judging.harness", "record"),
    ("record", "conformance.judging.checks", "record_verdicts"),
    ("coverage", "conformance.records.coverage", "Coverage.add"),
    ("gather (in oracle+bound)", "oracle.rows", "gather_bound_batch"),
    ("write-ahead (WAL)", "conformance.durability.wal", "in_flight"),
    ("write-ahead (WAL)", "conformance.durability.wal", "atomic_write_text"),
    ("watchdog", "conformance.durability.watchdog", "limit_call"),
    ("progress", "conformance.judging.progress", "tick"),
    ("progress", "conformance.campaign.fuzz", "ProgressLine.show"),
    ("hypothesis target()", "hypothesis.control", "target"),
    ("judging glue", "conformance.judging.checks", "differential"),
    ("judging glue", "conformance.judging.checks", "violation_run"),
    ("judging glue", "conformance.judging.batch", "differential_batch"),
    ("judging glue", "conformance.judging.batch", "violation_batch"),
    ("set-up (coverage classes)", "conformance.campaign.fuzz", "fuzz_reachable"),
    ("minimise (after shrinking)", "conformance.campaign.fuzz", "_minimise_failure"),
    ("hypothesis: generate", "hypothesis.internal.conjecture.engine", "ConjectureRunner.generate_new_test_cases"),
    ("hypothesis: optimise", "hypothesis.internal.conjecture.engine", "ConjectureRunner.optimise_targets"),
    ("hypothesis: shrink", "hypothesis.internal.conjecture.engine", "ConjectureRunner.shrink_interesting_test_cases"),
    ("hypothesis: rest", "conformance.campaign.fuzz", "campaign"),
    *(("host reads", "torch", f"Tensor.{name}") for name in HOST_READ_METHODS),
    ("host reads", "torch", "nonzero"),
)
# stages reported inside another one ("of which"): their time is added to the outer row too
INNER = {"gather (in oracle+bound)": "oracle+bound"}
CAMPAIGN_STAGE = "hypothesis: rest"  # the campaign function's own time: Hypothesis's run set-up and the chunk loop
CONTEXT_MANAGERS = {("conformance.durability.wal", "in_flight"), ("conformance.durability.watchdog", "limit_call")}


class StageTimers:
    """Wall and CPU seconds per stage of TIMED, by wrapping the stages' functions (see --timers).

    Exclusive: a stage entered while another runs pauses the outer one (a stack), so every
    second is counted in one stage at most, nested stages need no subtraction and no stage can
    come out negative; a stage re-entered while it runs is counted once. Only the main thread
    is timed. `sync`: a callable run at every stage boundary (torch.cuda.synchronize on a GPU,
    so that queued device work is charged to the stage that queued it, not to the next host
    read). `clock`: (wall, CPU) seconds now (for tests)."""

    def __init__(self, sync: Any = None, clock: Any = None) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list[Any]] = []  # [stage, wall at (re)start, CPU at (re)start]
        self._sync = sync
        self._clock = clock or (lambda: (time.perf_counter(), time.process_time()))
        self.first_enter: dict[str, tuple[float, float]] = {}  # stage -> (wall, CPU) at its first entry
        self.last_leave: dict[str, tuple[float, float]] = {}
        # stage seconds (wall, CPU) charged before the campaign began and after it ended: start-up
        # and report are those intervals less these
        self.outside = {"before": [0.0, 0.0], "after": [0.0, 0.0]}
        self._installed: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original or None, wrapper): uninstall()

    def _charge(self, top: list[Any], now: tuple[float, float]) -> None:
        stage = top[0]
        wall, cpu = now[0] - top[1], now[1] - top[2]
        self.wall[stage] = self.wall.get(stage, 0.0) + wall
        self.cpu[stage] = self.cpu.get(stage, 0.0) + cpu
        if stage != CAMPAIGN_STAGE and not any(frame[0] == CAMPAIGN_STAGE for frame in self._stack):
            outside = self.outside["after" if CAMPAIGN_STAGE in self.first_enter else "before"]
            outside[0] += wall
            outside[1] += cpu
        top[1], top[2] = now

    def _enter(self, stage: str) -> bool:
        if threading.current_thread() is not threading.main_thread() or any(f[0] == stage for f in self._stack):
            return False
        if self._sync is not None:
            self._sync()
        now = self._clock()
        if self._stack:
            self._charge(self._stack[-1], now)
        self._stack.append([stage, now[0], now[1]])
        self.calls[stage] = self.calls.get(stage, 0) + 1
        self.first_enter.setdefault(stage, now)
        return True

    def _leave(self, entered: bool) -> None:
        if not entered:
            return
        if self._sync is not None:
            self._sync()
        now = self._clock()
        top = self._stack.pop()
        self._charge(top, now)
        self.last_leave[top[0]] = now
        if self._stack:
            self._stack[-1][1], self._stack[-1][2] = now

    def stage(self, skip: str | None = None) -> str:
        """The stage being timed now, less `skip` (a stage whose caller is wanted: the "host reads"
        of a read are charged below it); "other" outside every stage."""
        frames = [frame[0] for frame in self._stack if frame[0] != skip]
        return frames[-1] if frames else "other"

    def wrap(self, stage: str, fn: Any) -> Any:
        timers = self

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            entered = timers._enter(stage)
            try:
                return fn(*args, **kwargs)
            finally:
                timers._leave(entered)

        return timed

    def wrap_context_manager(self, stage: str, fn: Any) -> Any:
        """A @contextmanager function whose __enter__ and __exit__ are timed (not its block)."""
        timers = self

        @functools.wraps(fn)
        @contextlib.contextmanager
        def timed(*args: Any, **kwargs: Any) -> Any:
            entered = timers._enter(stage)
            try:
                manager = fn(*args, **kwargs)
                value = manager.__enter__()
            finally:
                timers._leave(entered)
            try:
                yield value
            except BaseException:
                entered = timers._enter(stage)
                try:
                    suppressed = manager.__exit__(*sys.exc_info())
                finally:
                    timers._leave(entered)
                if not suppressed:
                    raise
            else:
                entered = timers._enter(stage)
                try:
                    manager.__exit__(None, None, None)
                finally:
                    timers._leave(entered)

        return timed

    def install(self) -> None:
        """Wrap every TIMED function where it is defined and wherever a loaded module imported it
        by name (uninstall() puts the originals back)."""
        for stage, module_name, path in TIMED:
            owner: Any = importlib.import_module(module_name)
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            original = getattr(owner, name)
            if (module_name, path) in CONTEXT_MANAGERS:
                wrapped = self.wrap_context_manager(stage, original)
            else:
                wrapped = self.wrap(stage, original)
            had_own = name in vars(owner)  # a class attribute of its own, not one inherited
            self._installed.append((owner, name, original if had_own else None, wrapped))
            setattr(owner, name, wrapped)
            if not parents:
                _rebind({id(original): (original, wrapped)})

    def uninstall(self) -> None:
        """Put back what install() wrapped (the last wrapped first), and the originals wherever a
        module holds a wrapper by name: imported before install() or while the timers were
        installed (a later campaign in this process would otherwise charge those calls to these
        timers)."""
        originals: dict[int, tuple[Any, Any]] = {}  # id(wrapper) -> (wrapper, original)
        while self._installed:
            owner, name, original, wrapped = self._installed.pop()
            if original is not None:
                originals[id(wrapped)] = (wrapped, original)
            if getattr(owner, name, None) is wrapped:
                if original is None:
                    delattr(owner, name)  # the attribute was inherited: the inherited one shows again
                else:
                    setattr(owner, name, original)
        _rebind(originals)

    def seconds(self, clock: str, start: float, end: float) -> dict[str, float]:
        """Seconds per stage of `clock` ("wall" or "cpu") between `start` and `end` (that clock's
        readings): each stage's exclusive time (an INNER stage's also counted in its outer row),
        start-up (before conformance.campaign.fuzz.campaign began) and report (after it ended),
        and "other": the rest (time in no timed function: the CLI between them, the timers)."""
        index = 0 if clock == "wall" else 1
        times = self.wall if clock == "wall" else self.cpu
        out = {stage: times.get(stage, 0.0) for stage in dict.fromkeys(s for s, _, _ in TIMED)}
        counted = sum(out.values())
        for inner, outer in INNER.items():
            out[outer] += out[inner]
        if CAMPAIGN_STAGE in self.first_enter:
            out["start-up"] = self.first_enter[CAMPAIGN_STAGE][index] - start - self.outside["before"][index]
            out["report"] = end - self.last_leave.get(CAMPAIGN_STAGE, (end, end))[index] - self.outside["after"][index]
            counted += out["start-up"] + out["report"]
        out["other"] = (end - start) - counted
        return out


def _rebind(pairs: dict[int, tuple[Any, Any]]) -> None:
    """In every loaded module's namespace, each name bound to an `old` of `pairs` (id(old) ->
    (old, new)) is bound to its `new`."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict):
            for key, value in list(namespace.items()):
                pair = pairs.get(id(value))
                if pair is not None and pair[0] is value:
                    namespace[key] = pair[1]


def _cum(table: dict[Any, Any], suffix: str, func: str) -> float:
    return sum(v[3] for (file, _line, name), v in table.items() if name == func and file.replace("\\", "/").endswith(suffix))


def _edge(table: dict[Any, Any], caller: tuple[str, str], suffix: str, func: str) -> float:
    """Cumulative seconds of `func` (file ending in `suffix`) in its calls from `caller`."""
    total = 0.0
    for (file, _line, name), v in table.items():
        if name == func and file.replace("\\", "/").endswith(suffix):
            for (c_file, _c_line, c_name), edge in v[4].items():
                if c_name == caller[1] and c_file.replace("\\", "/").endswith(caller[0]):
                    total += edge[3]
    return total


def stage_seconds(stats: pstats.Stats, wall: float) -> dict[str, float]:
    """Seconds per stage (module docstring) from cProfile stats of the whole campaign.

    The kernel stage is run_kernel less what run_kernel itself calls that is bookkeeping
    (KERNEL_BOOKKEEPING, by caller edge: the input guard, the write-ahead file and the watchdog's
    context managers, the progress tick); the input guard row is the guard's time from
    run_kernel. "start-up + report" is the wall time outside conformance.campaign.fuzz.campaign.
    (check_consistency names what cannot be right.)"""
    table = stats.stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for stage, suffix, func in STAGES:
        if stage != "input guard":
            out[stage] = out.get(stage, 0.0) + _cum(table, suffix, func)
    bookkeeping: dict[str, float] = {}
    for stage, suffix, func in KERNEL_BOOKKEEPING:
        bookkeeping[stage] = bookkeeping.get(stage, 0.0) + _edge(table, RUN_KERNEL, suffix, func)
    guard_elsewhere = sum(_cum(table, s, f) for st, s, f in STAGES if st == "input guard") - bookkeeping["input guard"]
    out["kernel"] -= sum(bookkeeping.values())
    out.update(bookkeeping)
    out["input guard"] += max(guard_elsewhere, 0.0)  # a guard called outside run_kernel (none today)
    out["gather (in oracle+bound)"] = _cum(table, *GATHER)
    campaign = _cum(table, *CAMPAIGN)
    if campaign > 0:
        out["start-up + report"] = wall - campaign
    out["other"] = wall - sum(v for k, v in out.items() if not k.startswith("gather"))
    return out


def check_consistency(seconds: dict[str, float], wall: float) -> list[str]:
    """The stage rows that cannot be right: a negative stage (a caller shorter than its callees:
    on Python 3.12+ cProfile runs on sys.monitoring, whose events come from every thread, so a
    second thread running Python code can close the main thread's frames early), or stages
    summing past the wall time."""
    problems = [f"{k} is negative ({v:.2f} s)" for k, v in seconds.items() if v < -1e-6]
    if seconds.get("other", 0.0) < -0.01 * wall:
        problems.append("the stages add up to more than the wall time")
    return problems


def run_cli(argv: list[str]) -> int:
    """`python -m conformance ARGV...` in this process (runpy on conformance/__main__.py: the
    module's own start-up, no import of the command line by this routine); its exit code. The file
    is run by path, not looked up as a module: an import hook that claims the package (pytest
    rewrites the modules of an installed plugin's distribution) need not be able to run it."""
    import conformance

    saved = sys.argv
    sys.argv = ["conformance", *argv]
    try:
        runpy.run_path(str(Path(conformance.__file__).with_name("__main__.py")), run_name="__main__")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str]) -> int:
    """The routine (module docstring); the fuzz campaign's exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks campaign_stages", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timers", action="store_true", help="wall and CPU clocks per stage instead of cProfile")
    parser.add_argument(
        "--sync", action="store_true", help="with --timers on a GPU: synchronise the device at every stage boundary (see StageTimers)"
    )
    parser.add_argument(
        "--ops", action="store_true", help="with --timers: count the launched torch ops of each stage (OpCounter.launched's rule)"
    )
    parser.add_argument(
        "--syncs",
        action="store_true",
        help="with --timers on a GPU: count the host-device synchronisations by the line that makes them (benchmarks.syncs)",
    )
    parser.add_argument("fuzz_args", nargs=argparse.REMAINDER, help="-- then the arguments of `python -m conformance fuzz`")
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    fuzz_args = [a for a in args.fuzz_args if a != "--"]
    untimed = [flag for flag, on in (("--sync", args.sync), ("--ops", args.ops), ("--syncs", args.syncs)) if on and not args.timers]
    if untimed:
        verb = "needs" if len(untimed) == 1 else "need"
        print(f"campaign_stages: {', '.join(untimed)} {verb} --timers (cProfile's run has no stage clocks)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.timers:
        return _timed(args.out, fuzz_args, run_cli, sync=args.sync, ops=args.ops, syncs=args.syncs)

    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    try:
        code = run_cli(["fuzz", *fuzz_args])
    finally:
        profiler.disable()
    wall = time.perf_counter() - t0
    profiler.dump_stats(str(args.out / "profile.pstats"))
    stats = pstats.Stats(profiler)
    seconds = stage_seconds(stats, wall)
    lines = [f"campaign wall time {wall:.1f} s (under cProfile); fuzz {' '.join(fuzz_args)}", f"{'stage':<26} {'seconds':>8} {'share':>6}"]
    lines += [f"{k:<26} {v:>8.1f} {100 * v / wall:>5.1f}%" for k, v in seconds.items()]
    lines += [f"inconsistent: {problem}" for problem in check_consistency(seconds, wall)]
    text = "\n".join(lines)
    print(text)
    (args.out / "stages.txt").write_text(text + "\n")
    (args.out / "stages.json").write_text(json.dumps({"wall_s": wall, "fuzz_args": fuzz_args, "stages_s": seconds}, indent=1) + "\n")
    with open(args.out / "top.txt", "w", encoding="utf-8") as handle:
        pstats.Stats(profiler, stream=handle).sort_stats("cumulative").print_stats(60)
        pstats.Stats(profiler, stream=handle).sort_stats("tottime").print_stats(40)
    return code


def _device_sync() -> Any:
    """torch.cuda.synchronize when CUDA is in use, else None."""
    import torch

    if not torch.cuda.is_available():
        return None
    return lambda: torch.cuda.synchronize() if torch.cuda.is_initialized() else None


def stage_op_counter(timers: StageTimers) -> Any:
    """An op_count.OpCounter keyed by the stage on top of `timers`' stack ("other" when none):
    `.by_stage` maps stage -> Counter of its launched ops (outside op_count.HOST_ONLY_OPS: on a
    GPU about one kernel launch each)."""
    from conformance.tools.op_count import OpCounter

    class StageOps(OpCounter):
        @property
        def by_stage(self) -> dict[str, Any]:
            return self.launched_by_key()

    return StageOps(key=timers.stage)


def _timed(out: Path, fuzz_args: list[str], cli_main: Any, *, sync: bool = False, ops: bool = False, syncs: bool = False) -> int:
    """The campaign under StageTimers; stages.txt / stages.json with wall and CPU seconds (and,
    with `ops`, the launched torch ops of each stage: ops.txt / ops.json; with `syncs`, the
    host-device synchronisations by site: syncs.txt / syncs.json)."""
    for module in ("conformance.judging.checks", "conformance.campaign.fuzz", "conformance.records.coverage"):
        importlib.import_module(module)
    timers = StageTimers(sync=_device_sync() if sync else None)
    timers.install()
    counter = stage_op_counter(timers) if ops else None
    waits = SyncCounter(stage=lambda: timers.stage(skip="host reads"), wrappers=(__file__,)) if syncs else None
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        with counter if counter is not None else contextlib.nullcontext(), waits.counting() if waits else contextlib.nullcontext():
            code = cli_main(["fuzz", *fuzz_args])
    finally:
        timers.uninstall()
    t1, c1 = time.perf_counter(), time.process_time()
    wall, cpu = t1 - t0, c1 - c0
    walls, cpus = timers.seconds("wall", t0, t1), timers.seconds("cpu", c0, c1)
    lines = [
        f"campaign wall time {wall:.1f} s, CPU time {cpu:.1f} s (stage timers, no cProfile); fuzz {' '.join(fuzz_args)}",
        f"{'stage':<26} {'wall s':>8} {'share':>6} {'CPU s':>8} {'share':>6}",
    ]
    lines += [f"{k:<26} {walls[k]:>8.1f} {100 * walls[k] / wall:>5.1f}% {cpus[k]:>8.1f} {100 * cpus[k] / cpu:>5.1f}%" for k in walls]
    lines += [f"inconsistent: {problem}" for problem in check_consistency(walls, wall)]
    text = "\n".join(lines)
    print(text)
    (out / "stages.txt").write_text(text + "\n")
    (out / "stages.json").write_text(
        json.dumps({"wall_s": wall, "cpu_s": cpu, "fuzz_args": fuzz_args, "stages_s": walls, "stages_cpu_s": cpus}, indent=1) + "\n"
    )
    if counter is not None:
        _write_ops(out, counter.by_stage, timers.calls)
    if waits is not None:
        print(waits.write(out, timers.calls.get("kernel", 0)))
    return code


def _write_ops(out: Path, by_stage: Any, calls: dict[str, int]) -> None:
    """ops.txt (per stage: launched ops in all, per call of the stage, the 8 commonest) and ops.json."""
    lines = [f"{'stage':<26} {'ops':>9} {'calls':>7} {'ops/call':>9}  commonest"]
    for stage, ops in sorted(by_stage.items(), key=lambda item: -sum(item[1].values())):
        total, n = sum(ops.values()), calls.get(stage, 0)
        common = ", ".join(f"{name} {k}" for name, k in ops.most_common(8))
        lines.append(f"{stage:<26} {total:>9} {n:>7} {total / n if n else float('nan'):>9.1f}  {common}")
    text = "\n".join(lines)
    print(text)
    (out / "ops.txt").write_text(text + "\n")
    (out / "ops.json").write_text(json.dumps({"calls": calls, "ops": {k: dict(v) for k, v in by_stage.items()}}, indent=1) + "\n")
