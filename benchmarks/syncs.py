"""Where a GPU campaign makes the host wait: count the host-device synchronisations by the line
that makes them (`python -m benchmarks campaign_stages --timers --syncs`).

torch's sync debug mode (torch.cuda.set_sync_debug_mode("warn")) issues the warning "called a
synchronizing CUDA operation" at every operation that waits for the device: a read of a device
value (.item(), .tolist(), bool() of a tensor, nonzero), a copy between host and device that is
not non_blocking (a device tensor made from host values is one), and the like; not at an
explicit torch.cuda.synchronize (the harness's one after every kernel call, which the watchdog
needs). SyncCounter turns those warnings into counts per site: the innermost frame of the
project (outside torch, Hypothesis and the standard library) and the stage the timers were in.
Each such wait costs a process the device's whole queue ahead of it, and on a CUDA host with
fewer contexts than cores the waiting spins on a core (docs/reference/measurements.md,
"Processes per GPU: the host is the limit").

On a host without CUDA there is nothing to count: the mode is not set and the table says so.
"""

from __future__ import annotations

import json
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SYNC_WARNING = "synchronizing CUDA operation"
# frames of these are not a site: the site is the project's line that called into them
FOREIGN = ("/torch/", "/hypothesis/", "/_pytest/", "/pluggy/", "/warnings.py", "/contextlib.py", "/functools.py", "/runpy.py")


def site_of(stack: list[traceback.FrameSummary], skip: tuple[str, ...] = ()) -> str:
    """The innermost frame of `stack` (outermost first, as traceback.extract_stack gives it)
    that is neither this module, nor a file of `skip` (paths: a wrapper between the project's
    line and torch, such as the stage timers' around Tensor.tolist), nor a FOREIGN one, as
    "path:line (function)" with the path from its last two folders; "unknown" when there is none."""
    skipped = {name.replace("\\", "/") for name in (__file__, *skip)}
    for frame in reversed(stack):
        path = frame.filename.replace("\\", "/")
        if path in skipped or any(part in path for part in FOREIGN):
            continue
        short = "/".join(path.split("/")[-2:])
        return f"{short}:{frame.lineno} ({frame.name})"
    return "unknown"


class SyncCounter:
    """Counts of synchronising operations by (stage, site) while `counting()` is entered.

    `stage`: a callable giving the stage being timed (StageTimers' top of stack), "other" when
    None. `wrappers`: files whose frames are never a site (site_of's `skip`: the timers' module,
    whose wrappers stand between the project's line and the torch method that synchronises). The
    warnings are taken from the warnings module (every one of them: the default filter would show
    a site once), and the ones that are not sync warnings are shown as before."""

    def __init__(self, stage: Callable[[], str] | None = None, *, wrappers: tuple[str, ...] = ()) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._stage = stage or (lambda: "other")
        self._wrappers = wrappers
        self.mode = "not counted yet"

    def record(self, stack: list[traceback.FrameSummary]) -> None:
        """One synchronisation made with `stack` (outermost frame first)."""
        self.counts[(self._stage(), site_of(stack, self._wrappers))] += 1

    @contextmanager
    def counting(self) -> Iterator[SyncCounter]:
        """Within the block, every sync warning is counted (the device's sync debug mode is set
        to "warn" where CUDA is available and put back after)."""
        import torch

        cuda = torch.cuda.is_available()
        before = torch.cuda.get_sync_debug_mode() if cuda else 0
        self.mode = "torch.cuda.set_sync_debug_mode('warn')" if cuda else "no CUDA device here: nothing synchronises"
        with warnings.catch_warnings():
            warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
            shown = warnings.showwarning

            def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
                if SYNC_WARNING in str(message):
                    self.record(traceback.extract_stack()[:-1])
                else:
                    shown(message, category, filename, lineno, file, line)

            warnings.showwarning = show
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                yield self
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode(before)

    def table(self, kernel_calls: int) -> str:
        """The sites, most syncs first: syncs in all and per kernel call (`kernel_calls`: the
        campaign's calls of the kernel stage), then the stage and the site."""
        total = sum(self.counts.values())
        lines = [f"host-device synchronisations: {total} ({self.mode}); {kernel_calls} kernel calls"]
        lines.append(f"{'syncs':>8} {'per call':>9}  {'stage':<26} site")
        for (stage, site), n in self.counts.most_common():
            per = n / kernel_calls if kernel_calls else float("nan")
            lines.append(f"{n:>8} {per:>9.2f}  {stage:<26} {site}")
        return "\n".join(lines)

    def write(self, out: Path, kernel_calls: int) -> str:
        """syncs.txt (the table) and syncs.json under `out`; returns the table."""
        text = self.table(kernel_calls)
        (out / "syncs.txt").write_text(text + "\n")
        rows = [{"stage": stage, "site": site, "syncs": n} for (stage, site), n in self.counts.most_common()]
        (out / "syncs.json").write_text(json.dumps({"mode": self.mode, "kernel_calls": kernel_calls, "sites": rows}, indent=1) + "\n")
        return text
