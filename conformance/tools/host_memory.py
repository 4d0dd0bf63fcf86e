"""Freed host memory kept by the process for its next allocations (glibc malloc), not unmapped.

An example of a CPU campaign allocates and frees tensors of up to ~150 MB (oracle.bound's
batches of 2^15 key slots of f64 keys and values, the emulated kernel's intermediates). glibc
serves an allocation above its mmap threshold (32 MiB at most) with a fresh mmap and unmaps it
on free, so every such tensor's pages are faulted in and zeroed by the kernel again: about a
quarter of a CPU campaign's CPU time was system time (2.7 M minor faults, 9.3 s system of 37 s,
on 150 recipes of the emulated campaign judged twice). `keep_freed_memory` serves every
allocation from the heap and never trims it below 2 GiB: a freed tensor's pages are reused as
they are. The values computed are the same (allocations stay 64-byte aligned, as torch asks);
the process's resident memory stays at its peak instead of falling back between examples.
"""

from __future__ import annotations

import ctypes
import os
import sys

ENV = "CONFORMANCE_KEEP_FREED_MEMORY"  # "0": leave malloc's defaults
M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc malloc.h)
M_MMAP_MAX = -4
TRIM_THRESHOLD_BYTES = 2**31 - 1  # the largest int: a free top of the heap above ~2 GiB is still given back


def keep_freed_memory() -> bool:
    """Make glibc malloc serve every allocation from its heap (no mmap) and keep up to ~2 GiB of
    freed memory at the heap's top (see the module docstring). True where both settings took
    (Linux with glibc); False elsewhere, or when $CONFORMANCE_KEEP_FREED_MEMORY is "0"."""
    if os.environ.get(ENV, "").strip() == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    trim = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return bool(trim and mallopt(M_MMAP_MAX, 0))
