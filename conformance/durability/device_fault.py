"""Device faults: an error after which this process's GPU context is unusable.

A device-side assert, an illegal memory access or a launch failure leaves the CUDA (or HIP)
context of the process broken: every later GPU call in it fails. `is_device_fault(err)` tells
such an error from an ordinary exception (torch.AcceleratorError, or a RuntimeError whose message
is the driver's: "CUDA error: ...", "HIP error: ...", "device-side assert", "illegal memory
access"). conformance.judging.harness.run_kernel reacts to one inside the kernel call: in an xdist worker
it marks the write-ahead record with the fault and ends the process, so the controller records
the crash entry, fails that one test and starts a fresh worker for the rest; in a single
process it re-raises (the later GPU tests of that session will fail: run GPU suites with -n).
"""

from __future__ import annotations

import re

import torch

_DRIVER_MESSAGE = re.compile(
    r"CUDA error|HIP error|hipError|cudaError|device-side assert|illegal memory access|unspecified launch failure"
    r"|misaligned address|an illegal instruction|CUBLAS_STATUS_EXECUTION_FAILED",
    re.IGNORECASE,
)


def is_device_fault(err: BaseException) -> bool:
    """True when `err` says the process's GPU context is broken (see module docstring)."""
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(err, accelerator_error):
        return True
    return isinstance(err, RuntimeError) and bool(_DRIVER_MESSAGE.search(str(err)))


def describe(err: BaseException) -> str:
    """The fault's first line (300 characters at most)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
