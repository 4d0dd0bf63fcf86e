"""What the machine did while a benchmark ran: the host's CPU busy share and each GPU's utilisation.

    with Sampler(gpus=["0"]) as sampler:
        ...                                  # the benchmark
    usage = sampler.result()                 # Utilisation
    usage.line()                             # "utilisation over 613 s: host CPUs 93.7% busy (15.0 of 16 cores); GPU 0 ..."

Host: the share of all cores' time that was not idle (user, system, irq, steal, ...; idle and
iowait are idle) between the start and the end, from the first line of /proc/stat (Linux): the
exact mean over the window, read twice. Where /proc/stat cannot be read the host share is None,
with the reason.

GPUs: `nvidia-smi --query-gpu=index,uuid,utilization.gpu` every `interval_s` seconds in a thread;
the mean of the samples per GPU. utilization.gpu is the share of nvidia-smi's sample period in
which at least one kernel ran on that GPU: 100% says the GPU never went idle, not that its SMs
were full (many small kernels keep it at 100% with most SMs free). So a GPU near 100% is a hint
that the GPU is the limit, not a proof; what settles it is the same campaign at more processes
(`python -m benchmarks campaign --procs 8,15`: a total that stops growing is a shared limit).
`gpus` names GPUs as CUDA_VISIBLE_DEVICES does (index or UUID). Without nvidia-smi, or when it
fails, the GPU figures are empty, with the reason. A host CPU waiting on its GPU counts as busy
(a CUDA synchronisation spins by default).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the query: physical index, UUID, utilisation in percent (no header, no units)
NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=index,uuid,utilization.gpu", "--format=csv,noheader,nounits")
QUERY_TIMEOUT_S = 5.0


def read_proc_stat(path: str = "/proc/stat") -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot from the first line of /proc/stat
    ("cpu user nice system idle iowait irq softirq steal ..."; idle and iowait are not busy).
    OSError or ValueError where it cannot be read."""
    with open(path, encoding="ascii") as handle:
        first = handle.readline().split()
    if not first or first[0] != "cpu" or len(first) < 5:
        raise ValueError(f"{path}: the first line is not the all-cores line")
    ticks = [int(x) for x in first[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    # guest time is already counted in user and nice (Linux's accounting): columns 9 and 10 left out
    total = sum(ticks[:8])
    return total - idle, total


def parse_nvidia_smi(text: str) -> dict[str, tuple[str, float]]:
    """{index: (uuid, utilisation %)} from NVIDIA_SMI_QUERY's output; a line that does not parse
    (a "[N/A]" utilisation, say) is left out."""
    found: dict[str, tuple[str, float]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3:
            continue
        try:
            found[cells[0]] = (cells[1], float(cells[2]))
        except ValueError:
            continue
    return found


def _run_query() -> str:
    """NVIDIA_SMI_QUERY's output (CalledProcessError, TimeoutExpired or OSError when it fails)."""
    return subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=True).stdout


@dataclass
class Utilisation:
    """The means over one window (see the module docstring). host_busy: a share in [0, 1] of all
    `cores`' time, None when not read (host_reason says why); gpu_busy: per GPU as named in
    `gpus`, the mean utilization.gpu in percent (0-100) over `gpu_samples` samples, empty when not
    sampled (gpu_reason says why)."""

    seconds: float
    cores: int
    host_busy: float | None
    host_reason: str = ""
    gpu_busy: dict[str, float] = field(default_factory=dict)
    gpu_samples: int = 0
    gpu_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "cores": self.cores,
            "host_busy": self.host_busy,
            "host_reason": self.host_reason,
            "gpu_busy_percent": self.gpu_busy,
            "gpu_samples": self.gpu_samples,
            "gpu_reason": self.gpu_reason,
        }

    def host_text(self) -> str:
        if self.host_busy is None:
            return f"host CPUs not read ({self.host_reason})"
        return f"host CPUs {100 * self.host_busy:.1f}% busy ({self.host_busy * self.cores:.1f} of {self.cores} cores)"

    def gpu_text(self) -> str:
        if not self.gpu_busy:
            return f"GPUs not sampled ({self.gpu_reason})" if self.gpu_reason else "no GPU"
        each = ", ".join(f"GPU {name} {busy:.1f}%" for name, busy in self.gpu_busy.items())
        return f"{each} busy (nvidia-smi utilization.gpu, mean of {self.gpu_samples} samples)"

    def line(self) -> str:
        """One line for a report: the host's share and each GPU's."""
        return f"utilisation over {self.seconds:.0f} s: {self.host_text()}; {self.gpu_text()}"


class Sampler:
    """Samples the host and the GPUs while the `with` block runs (module docstring). `gpus`: the
    GPUs to report (CUDA_VISIBLE_DEVICES' names: an index or a UUID), none for a CPU run.
    `stat` and `query` read /proc/stat and run nvidia-smi (replaceable for tests)."""

    def __init__(
        self,
        gpus: Sequence[str] = (),
        *,
        interval_s: float = 1.0,
        cores: int | None = None,
        stat: Callable[[], tuple[int, int]] = read_proc_stat,
        query: Callable[[], str] = _run_query,
    ) -> None:
        self._gpus = [str(g) for g in gpus]
        self._interval = interval_s
        self._cores = cores if cores is not None else (os.cpu_count() or 1)
        self._stat, self._query = stat, query
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sums: dict[str, float] = {}
        self._samples = 0
        self._gpu_reason = ""
        self._host_start: tuple[int, int] | None = None
        self._host_end: tuple[int, int] | None = None
        self._host_reason = ""
        self._started = self._ended = 0.0

    def __enter__(self) -> Sampler:
        self._started = time.monotonic()
        try:
            self._host_start = self._stat()
        except (OSError, ValueError) as err:
            self._host_reason = f"/proc/stat: {err}"
        if self._gpus:
            if self._query is _run_query and shutil.which(NVIDIA_SMI_QUERY[0]) is None:
                self._gpu_reason = "nvidia-smi is not on PATH"
            else:
                self._thread = threading.Thread(target=self._loop, name="utilisation-sampler", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=QUERY_TIMEOUT_S + self._interval + 1)
        self._ended = time.monotonic()
        if self._host_start is not None:
            try:
                self._host_end = self._stat()
            except (OSError, ValueError) as err:
                self._host_reason = f"/proc/stat: {err}"

    def _sample(self) -> bool:
        """One nvidia-smi sample added to the sums; False (and the reason kept) when it failed."""
        try:
            found = parse_nvidia_smi(self._query())
        except (OSError, subprocess.SubprocessError) as err:
            self._gpu_reason = f"nvidia-smi failed: {err}"
            return False
        by_name = {**{index: busy for index, (_, busy) in found.items()}, **{uuid: busy for uuid, busy in found.values()}}
        missing = [g for g in self._gpus if g not in by_name]
        if missing:
            self._gpu_reason = f"nvidia-smi reported no utilisation for GPU {', '.join(missing)}"
            return False
        for g in self._gpus:
            self._sums[g] = self._sums.get(g, 0.0) + by_name[g]
        self._samples += 1
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            if not self._sample():
                self._sums.clear()
                self._samples = 0
                return

    def result(self) -> Utilisation:
        """The means over the `with` block (call after it)."""
        host: float | None = None
        start, end = self._host_start, self._host_end
        if start is not None and end is not None:
            busy, total = end[0] - start[0], end[1] - start[1]
            if total > 0:
                host = min(1.0, max(0.0, busy / total))
            else:
                self._host_reason = "no clock ticks between the two reads of /proc/stat"
        gpu = {g: s / self._samples for g, s in self._sums.items()} if self._samples else {}
        reason = self._gpu_reason
        if self._gpus and not gpu and not reason:
            reason = "the run ended before the first sample"
        return Utilisation(
            seconds=self._ended - self._started,
            cores=self._cores,
            host_busy=host,
            host_reason=self._host_reason,
            gpu_busy=gpu,
            gpu_samples=self._samples,
            gpu_reason=reason,
        )
