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


def fault_in(err: BaseException | None) -> BaseException | None:
    """The device fault `err` is or was raised from (its chain of causes and contexts, as a
    traceback shows it: a judging step may wrap the kernel's exception in its finding), None when
    there is none."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if is_device_fault(err):
            return err
        seen.add(id(err))
        err = err.__cause__ if err.__cause__ is not None else (None if err.__suppress_context__ else err.__context__)
    return None


def describe(err: BaseException) -> str:
    """The fault's first line (300 characters at most)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]
