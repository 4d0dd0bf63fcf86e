"""`python -m benchmarks campaign_stages`: the stage split on synthetic profiles (cProfile's stats
and the --timers clocks), where every second's stage is known; a real short campaign under the
timers."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from benchmarks import campaign_stages as cp

HARNESS = "/repo/conformance/judging/harness.py"
GUARD = "/repo/conformance/durability/input_guard.py"
CTX = "/usr/lib/python3.11/contextlib.py"
BODY = "/repo/conformance/judging/checks.py"
CAMPAIGN = "/repo/conformance/campaign/fuzz.py"


class FakeStats:
    """pstats.Stats' `stats` table: (file, line, name) -> (cc, nc, tt, ct, callers), callers being
    caller key -> (cc, nc, tt, ct) of the calls from that caller."""

    def __init__(self) -> None:
        self.stats: dict[tuple[str, int, str], Any] = {}

    def add(self, func: tuple[str, int, str], callers: dict[tuple[str, int, str], float]) -> None:
        cum = sum(callers.values())
        self.stats[func] = (1, 1, 0.0, cum, {c: (1, 1, 0.0, t) for c, t in callers.items()})


RUN_KERNEL = (HARNESS, 54, "run_kernel")
DIFFERENTIAL = (BODY, 78, "differential")
OTHER_CALLER = (BODY, 300, "replay_guard")


def _profile(guard_elsewhere: float) -> FakeStats:
    """A campaign of 10 s: campaign() 9 s, in it run_kernel 3 s (of which the guard's snapshot
    0.2 s and changes 0.3 s, the write-ahead / watchdog context managers 0.4 s, the tick 0.1 s:
    a kernel of 2.0 s) and `guard_elsewhere` seconds of the guard called by another function."""
    stats = FakeStats()
    stats.add((CAMPAIGN, 236, "campaign"), {("~", 0, "main"): 9.0})
    stats.add(RUN_KERNEL, {DIFFERENTIAL: 3.0})
    stats.add((GUARD, 153, "snapshot"), {RUN_KERNEL: 0.2, OTHER_CALLER: guard_elsewhere})
    stats.add((GUARD, 112, "changes"), {RUN_KERNEL: 0.3})
    stats.add((CTX, 137, "__enter__"), {RUN_KERNEL: 0.3})
    stats.add((CTX, 146, "__exit__"), {RUN_KERNEL: 0.1})
    stats.add(("/repo/conformance/judging/progress.py", 29, "tick"), {RUN_KERNEL: 0.1})
    return stats


def test_kernel_is_run_kernel_less_its_own_bookkeeping() -> None:
    seconds = cp.stage_seconds(_profile(0.0), 10.0)  # type: ignore[arg-type]
    assert seconds["kernel"] == pytest.approx(2.0)
    assert seconds["input guard"] == pytest.approx(0.5)
    assert seconds["write-ahead + watchdog"] == pytest.approx(0.4)
    assert seconds["progress"] == pytest.approx(0.1)
    assert seconds["start-up + report"] == pytest.approx(1.0)
    assert sum(v for k, v in seconds.items() if not k.startswith("gather")) == pytest.approx(10.0)
    assert cp.check_consistency(seconds, 10.0) == []


def test_a_guard_called_elsewhere_is_not_taken_off_the_kernel() -> None:
    """The old split subtracted the guard's whole cumulative time from run_kernel's: 3.5 s of
    guard outside run_kernel made the kernel 3.0 - 4.0 = -1.0 s."""
    seconds = cp.stage_seconds(_profile(3.5), 10.0)  # type: ignore[arg-type]
    assert seconds["kernel"] == pytest.approx(2.0)
    assert seconds["input guard"] == pytest.approx(4.0)
    assert all(v >= 0 for v in seconds.values())
    assert cp.check_consistency(seconds, 10.0) == []


def test_an_inconsistent_profile_is_named() -> None:
    """cProfile figures where a callee took longer than its caller (run_kernel 0.5 s, its guard 1 s):
    the kernel row is negative and the report says so instead of printing it as a share."""
    stats = FakeStats()
    stats.add(RUN_KERNEL, {DIFFERENTIAL: 0.5})
    stats.add((GUARD, 153, "snapshot"), {RUN_KERNEL: 1.0})
    seconds = cp.stage_seconds(stats, 10.0)  # type: ignore[arg-type]
    assert seconds["kernel"] < 0
    assert any(p.startswith("kernel is negative") for p in cp.check_consistency(seconds, 10.0))


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> tuple[float, float]:
        return self.t, self.t / 2  # CPU at half the wall rate

    def spend(self, seconds: float) -> None:
        self.t += seconds


def test_timers_are_exclusive_and_add_up() -> None:
    clock = Clock()
    syncs: list[float] = []
    timers = cp.StageTimers(sync=lambda: syncs.append(clock.t), clock=clock)

    guard = timers.wrap("input guard", lambda: clock.spend(0.5))

    def kernel_body(depth: int = 0) -> None:
        clock.spend(1.0)
        guard()
        if depth == 0:
            kernel(1)  # re-entered: counted once

    kernel = timers.wrap("kernel", kernel_body)
    campaign = timers.wrap(cp.CAMPAIGN_STAGE, lambda: (clock.spend(0.25), kernel(), clock.spend(0.25)))
    setup_write = timers.wrap("write-ahead (WAL)", lambda: clock.spend(0.75))

    setup_write()  # before the campaign: its own stage, not start-up
    clock.spend(1.0)  # start-up
    campaign()
    clock.spend(2.0)  # report
    wall = timers.seconds("wall", 0.0, clock.t)
    assert wall["kernel"] == pytest.approx(2.0)
    assert wall["input guard"] == pytest.approx(1.0)
    assert wall[cp.CAMPAIGN_STAGE] == pytest.approx(0.5)
    assert wall["write-ahead (WAL)"] == pytest.approx(0.75)
    assert wall["start-up"] == pytest.approx(1.0)
    assert wall["report"] == pytest.approx(2.0)
    assert wall["other"] == pytest.approx(0.0)
    assert all(v >= -1e-12 for v in wall.values())
    cpu = timers.seconds("cpu", 0.0, clock.t / 2)
    assert cpu["kernel"] == pytest.approx(1.0) and cpu["other"] == pytest.approx(0.0)
    assert timers.calls["kernel"] == 1 and timers.calls["input guard"] == 2
    assert len(syncs) == 2 * (1 + 2 + 1 + 1)  # every entry and exit of a counted stage


def test_inner_stage_is_also_in_its_outer_row() -> None:
    clock = Clock()
    timers = cp.StageTimers(clock=clock)
    gather = timers.wrap("gather (in oracle+bound)", lambda: clock.spend(1.0))
    oracle = timers.wrap("oracle+bound", lambda: (clock.spend(2.0), gather()))
    oracle()
    wall = timers.seconds("wall", 0.0, clock.t)
    assert wall["oracle+bound"] == pytest.approx(3.0)
    assert wall["gather (in oracle+bound)"] == pytest.approx(1.0)
    assert wall["other"] == pytest.approx(0.0)


def test_context_manager_wrapper_times_enter_and_exit_only() -> None:
    clock = Clock()
    timers = cp.StageTimers(clock=clock)
    events: list[str] = []

    @contextlib.contextmanager
    def in_flight() -> Any:
        clock.spend(0.5)
        events.append("enter")
        try:
            yield "value"
        finally:
            clock.spend(0.25)
            events.append("exit")

    timed = timers.wrap_context_manager("write-ahead (WAL)", in_flight)
    with timed() as value:
        assert value == "value"
        clock.spend(10.0)  # the block (the kernel call): not the stage's
    with pytest.raises(ValueError), timed():
        raise ValueError("the kernel raised")  # the manager's cleanup still runs
    assert events == ["enter", "exit", "enter", "exit"]
    assert timers.wall["write-ahead (WAL)"] == pytest.approx(1.5)


def test_other_threads_are_not_timed() -> None:
    clock = Clock()
    timers = cp.StageTimers(clock=clock)
    work = timers.wrap("kernel", lambda: clock.spend(1.0))
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert timers.wall.get("kernel", 0.0) == 0.0


def test_timed_functions_exist() -> None:
    """Every TIMED function can be found where the table says (a renamed function would be
    silently left out of --timers otherwise: install raises AttributeError instead)."""
    import importlib

    for _stage, module_name, path in cp.TIMED:
        owner: Any = importlib.import_module(module_name)
        for part in path.split("."):
            owner = getattr(owner, part)
        assert callable(owner)


def test_stage_ops_are_counted_by_the_innermost_stage(tmp_path: Path) -> None:
    """--ops: each launched op goes to the stage on top of the timers' stack (an inner stage's ops
    are not its outer stage's), views and empty allocations are not counted, ops outside every
    stage go to "other"; ops.txt / ops.json give ops per call."""
    import torch

    timers = cp.StageTimers()
    x = torch.ones(4)

    def kernel() -> None:
        x.view(2, 2)  # a view: no launch
        torch.empty(3)  # an allocation without a fill: no launch
        (x + 1).mul_(2)

    inner = timers.wrap("kernel", kernel)

    def oracle() -> None:
        x.exp()
        inner()
        x.abs()

    outer = timers.wrap("oracle+bound", oracle)
    counter = cp.stage_op_counter(timers)
    with counter:
        outer()
        outer()
        x.neg()
    assert dict(counter.by_stage["kernel"]) == {"add": 2, "mul_": 2}
    assert dict(counter.by_stage["oracle+bound"]) == {"exp": 2, "abs": 2}
    assert dict(counter.by_stage["other"]) == {"neg": 1}
    cp._write_ops(tmp_path, counter.by_stage, timers.calls)
    data = json.loads((tmp_path / "ops.json").read_text())
    assert data["calls"] == {"oracle+bound": 2, "kernel": 2} and data["ops"]["kernel"] == {"add": 2, "mul_": 2}
    assert "kernel" in (tmp_path / "ops.txt").read_text()


def test_a_short_campaign_under_the_timers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The routine runs `python -m conformance fuzz` in this process and splits its time: the stages
    add up to the wall time, the kernel and the oracle took some of it, the fuzz exit code is kept."""
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    out = tmp_path / "stages"
    fuzz = ["--kernel", "emulated", "--device", "cpu", "--seconds", "2", "--hypothesis-profile", "ci", "--no-save", "--max-chunks", "1"]
    assert cp.main(["--out", str(out), "--timers", "--", *fuzz]) == 0
    data = json.loads((out / "stages.json").read_text())
    walls = data["stages_s"]
    assert walls["kernel"] > 0 and walls["oracle+bound"] > 0 and walls["start-up"] >= 0
    total = sum(v for k, v in walls.items() if k not in cp.INNER)
    assert total == pytest.approx(data["wall_s"], rel=1e-6)
    assert "inconsistent" not in (out / "stages.txt").read_text()
    assert "examples/s" in capsys.readouterr().out


def test_host_reads_are_a_stage_of_their_own_and_uninstall_restores_torch() -> None:
    """--timers charges a read of device values (tolist, item, bool(), ...) to "host reads", not to
    the stage that makes it; uninstall() leaves torch.Tensor as it was (its methods inherited
    again) and the timers record nothing more."""
    import torch

    before = {name: getattr(torch.Tensor, name) for name in cp.HOST_READ_METHODS}
    nonzero = torch.nonzero
    clock = [0.0]
    timers = cp.StageTimers(clock=lambda: (clock[0], clock[0]))
    timers.install()
    try:
        x = torch.arange(4)

        def kernel() -> None:
            clock[0] += 1.0
            x.tolist()  # read at t = 1, then 2 more seconds of the kernel's own work
            clock[0] += 2.0
            assert bool(x[1]) and int(x[2]) == 2 and float(x[3]) == 3.0 and x.nonzero().numel() == 3
            assert x[1].item() == 1 and x.cpu().tolist() == [0, 1, 2, 3] and torch.nonzero(x).numel() == 3

        timers.wrap("kernel", kernel)()
        assert timers.wall["kernel"] == 3.0 and timers.wall["host reads"] == 0.0
        assert timers.calls["kernel"] == 1 and timers.calls["host reads"] >= 9
        assert all(getattr(torch.Tensor, name) is not before[name] for name in cp.HOST_READ_METHODS)
    finally:
        timers.uninstall()
    calls = dict(timers.calls)
    assert not any(name in vars(torch.Tensor) for name in cp.HOST_READ_METHODS)
    assert {name: getattr(torch.Tensor, name) for name in cp.HOST_READ_METHODS} == before
    assert torch.nonzero is nonzero and torch.arange(3).tolist() == [0, 1, 2]
    assert timers.calls == calls  # nothing timed after uninstall


def test_a_module_imported_while_timed_gets_the_original_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module first imported during a timed campaign binds the wrapper by name; uninstall()
    puts the original there too, so a second campaign in this process is timed by its own timers
    (else its calls would go to the first timers and its start-up would be missing)."""
    import sys
    import types

    import conformance.campaign.fuzz as fuzz

    original = fuzz.campaign
    timers = cp.StageTimers(clock=lambda: (0.0, 0.0))
    timers.install()
    try:
        late = types.ModuleType("late_importer_of_campaign")
        late.campaign = fuzz.campaign  # what `from conformance.campaign.fuzz import campaign` binds now
        monkeypatch.setitem(sys.modules, late.__name__, late)
        assert late.campaign is not original
    finally:
        timers.uninstall()
    assert fuzz.campaign is original and late.campaign is original
