"""CPU threads of an xdist worker: the cores shared out among the workers.

torch's CPU operators run on `torch.get_num_threads()` intra-op threads, one per core by default.
Under `pytest -n N` every worker starting that many makes N x cores threads on the machine, and
OpenMP threads that wait for each other by spinning then take several times longer than one
thread per core would (on 2 cores with `-n 2`: the suite's CPU run 202 s instead of 33 s).
A worker therefore takes cores // N threads (at least 1), unless the user chose a thread count
(OMP_NUM_THREADS set): the choice of the user stands.
"""

from __future__ import annotations

import os


def cores() -> int:
    """CPUs this process may run on (its affinity mask; os.cpu_count() where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_threads(n_cores: int, n_workers: int) -> int:
    """Intra-op threads of one of `n_workers` workers sharing `n_cores` cores."""
    return max(1, n_cores // max(1, n_workers))


def share_cores_among_workers(environ: os._Environ[str] | dict[str, str] | None = None) -> int | None:
    """In an xdist worker (PYTEST_XDIST_WORKER_COUNT set) without OMP_NUM_THREADS, set torch's
    intra-op threads to this worker's share of the cores; returns the count set, else None."""
    env = os.environ if environ is None else environ
    count = env.get("PYTEST_XDIST_WORKER_COUNT")
    if count is None or env.get("OMP_NUM_THREADS"):
        return None
    try:
        workers = int(count)
    except ValueError:
        return None
    import torch

    threads = worker_threads(cores(), workers)
    torch.set_num_threads(threads)
    return threads
