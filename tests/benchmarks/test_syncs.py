"""benchmarks.syncs: the host-device synchronisations of a campaign counted by site and stage.
torch's sync debug mode needs a GPU; here the warnings it issues are issued by the test, through
the same warnings machinery, from lines whose site is known."""

from __future__ import annotations

import json
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from benchmarks import campaign_stages as cp
from benchmarks.syncs import SYNC_WARNING, SyncCounter, site_of


def _torch_like_sync() -> Callable[[], None]:
    """What torch does at a synchronising operation in "warn" mode (TORCH_WARN from C++, under
    the project's line that called the op): a function whose frame is torch's."""
    source = "def sync():\n    warnings.warn(MESSAGE, UserWarning, stacklevel=2)\n"
    namespace = {"warnings": warnings, "MESSAGE": f"called a {SYNC_WARNING} (Triggered internally at c10/cuda/CUDAFunctions.cpp)"}
    exec(compile(source, "/venv/site-packages/torch/_fake_op.py", "exec"), namespace)
    sync: Callable[[], None] = namespace["sync"]  # type: ignore[assignment]
    return sync


_sync = _torch_like_sync()


def _read_twice() -> None:
    _sync()
    _sync()


def _frame(path: str, line: int, name: str) -> traceback.FrameSummary:
    return traceback.FrameSummary(path, line, name, lookup_line=False)


def test_the_site_is_the_innermost_frame_of_the_project() -> None:
    stack = [
        _frame("/repo/conformance/campaign/fuzz.py", 10, "body"),
        _frame("/repo/kernel/emulated/gfx950.py", 688, "run_emulated"),
        _frame("/venv/lib/python3.12/site-packages/torch/_tensor.py", 900, "tolist"),
        _frame("/usr/lib/python3.12/warnings.py", 100, "_showwarnmsg"),
    ]
    assert site_of(stack) == "emulated/gfx950.py:688 (run_emulated)"
    assert site_of([_frame("/venv/site-packages/torch/x.py", 1, "f")]) == "unknown"


def test_sync_warnings_are_counted_by_stage_and_site_and_others_still_shown(tmp_path: Path) -> None:
    stage = ["draw"]
    counter = SyncCounter(stage=lambda: stage[0])
    with pytest.warns(UserWarning, match="not a sync") as shown:
        with counter.counting():
            _read_twice()
            stage[0] = "kernel"
            _sync()
            warnings.warn("not a sync", UserWarning, stacklevel=1)
    assert len(shown) == 1  # the sync warnings were taken, the other one shown as before
    here = Path(__file__).name
    line_twice = _read_twice.__code__.co_firstlineno + 1
    line_once = test_sync_warnings_are_counted_by_stage_and_site_and_others_still_shown.__code__.co_firstlineno + 7
    assert counter.counts == {
        ("draw", f"benchmarks/{here}:{line_twice} (_read_twice)"): 1,
        ("draw", f"benchmarks/{here}:{line_twice + 1} (_read_twice)"): 1,
        ("kernel", f"benchmarks/{here}:{line_once} (test_sync_warnings_are_counted_by_stage_and_site_and_others_still_shown)"): 1,
    }
    text = counter.write(tmp_path, kernel_calls=2)
    assert text.splitlines()[0].startswith("host-device synchronisations: 3 (")
    assert "0.50  draw" in text
    data = json.loads((tmp_path / "syncs.json").read_text())
    assert data["kernel_calls"] == 2 and sum(row["syncs"] for row in data["sites"]) == 3
    if not torch.cuda.is_available():
        assert data["mode"].startswith("no CUDA device here")
    _sync_outside = counter.counts.copy()
    with pytest.warns(UserWarning):
        _sync()  # after the block: shown, not counted
    assert counter.counts == _sync_outside


def test_a_sync_through_the_stage_timers_is_charged_to_the_line_that_called_them() -> None:
    """campaign_stages --timers wraps the reading Tensor methods: the wrapper's frame (in
    campaign_stages.py) stands between the project's line and torch, and is never the site."""
    timers = cp.StageTimers(clock=lambda: (0.0, 0.0))
    read = timers.wrap("host reads", _sync)  # as install() wraps Tensor.tolist
    counter = SyncCounter(stage=lambda: timers.stage(skip="host reads"), wrappers=(cp.__file__,))
    with counter.counting():
        read()
    line = test_a_sync_through_the_stage_timers_is_charged_to_the_line_that_called_them.__code__.co_firstlineno + 7
    here = Path(__file__).name
    assert counter.counts == {
        ("other", f"benchmarks/{here}:{line} (test_a_sync_through_the_stage_timers_is_charged_to_the_line_that_called_them)"): 1
    }
    stack = [_frame("/repo/oracle/bound.py", 972, "evaluate_modes"), _frame(cp.__file__, 231, "timed")]
    assert site_of(stack) == "benchmarks/campaign_stages.py:231 (timed)"  # without the wrappers named
    assert site_of(stack, (cp.__file__,)) == "oracle/bound.py:972 (evaluate_modes)"


def test_the_calling_stage_is_below_the_host_read() -> None:
    timers = cp.StageTimers(clock=lambda: (0.0, 0.0))

    def stage() -> str:
        return timers.stage(skip="host reads")

    assert stage() == "other"
    timers._stack = [["hypothesis: rest", 0, 0], ["kernel", 0, 0], ["host reads", 0, 0]]
    assert stage() == "kernel"


def test_the_option_writes_the_table_of_a_short_campaign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--timers --syncs on a CPU: the campaign runs as without it and syncs.txt says there was
    nothing to count (its kernel calls counted)."""
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "stages"
    fuzz = ["--kernel", "emulated", "--device", "cpu", "--seconds", "2", "--hypothesis-profile", "ci", "--no-save", "--max-chunks", "1"]
    assert cp.main(["--out", str(out), "--timers", "--syncs", "--", *fuzz]) == 0
    data = json.loads((out / "syncs.json").read_text())
    assert data["mode"].startswith("no CUDA device here") and data["sites"] == []
    assert data["kernel_calls"] > 0


@pytest.mark.parametrize("flags", [["--syncs"], ["--ops", "--sync"]])
def test_the_timer_options_without_timers_are_refused(tmp_path: Path, flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stages"
    assert cp.main(["--out", str(out), *flags, "--", "--kernel", "emulated", "--seconds", "1"]) == 2
    err = capsys.readouterr().err
    assert all(flag in err for flag in flags) and "--timers" in err
    assert not out.exists()  # refused before anything ran or was written
