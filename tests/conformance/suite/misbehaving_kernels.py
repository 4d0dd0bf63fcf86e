"""Kernels that misbehave at run level (external `module:attr` kernels with the gfx950 numerics):
each computes the emulated kernel's result except for what its name says.

- `kill_on_long_rows`: SIGKILLs its own process when a row has >= 1024 keys;
- `hang_on_long_rows`: sleeps forever (in Python) when a row has >= 1024 keys;
- `hang_in_native_code`: for rows >= 1024 keys, blocks in a native call no signal handler can
  interrupt (time.sleep is interruptible; a blocking lock acquire with no timeout is not
  interruptible by SIGALRM's handler until it returns);
- `scribble_unread_record`: after computing, writes into the cache's last record (which no
  row reads unless it is indexed);
- `zero_q_after`: zeroes q after computing; `shift_indices_after`: adds 1 to indices after computing;
- `device_assert_on_long_rows` (CUDA): indexes a device tensor out of range for rows >= 1024
  keys, which trips a device-side assert and poisons the CUDA context of its process;
- `fake_device_fault_on_long_rows`: raises the driver's device-side-assert error message for
  rows >= 1024 keys on any device (the containment path, testable without a GPU).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import torch

LONG_ROW = 1024


def _emulated(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kwargs: Any) -> Any:
    from kernel.registry import resolve

    return resolve("emulated")(q, kv_cache, indices, indptr, softmax_scale, **{k: v for k, v in kwargs.items() if v is not None})


def _longest_row(indptr: torch.Tensor) -> int:
    return int((indptr[1:] - indptr[:-1]).max()) if indptr.numel() > 1 else 0


def _declare(fn: Any) -> Any:
    fn.profile = "gfx950"
    fn.bounded_index_reads = True
    return fn


@_declare
def kill_on_long_rows(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    if _longest_row(indptr) >= LONG_ROW:
        os.kill(os.getpid(), signal.SIGKILL)
    return _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)


@_declare
def hang_on_long_rows(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    if _longest_row(indptr) >= LONG_ROW:
        while True:
            time.sleep(3600)
    return _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)


@_declare
def hang_always(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    while True:  # every call, the first included: a campaign meets it at once, however slow the machine
        time.sleep(3600)


_NEVER_RELEASED = threading.Lock()
_NEVER_RELEASED.acquire()


@_declare
def hang_in_native_code(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    if _longest_row(indptr) >= LONG_ROW:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as if stuck inside a driver call
        _NEVER_RELEASED.acquire()
    return _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)


@_declare
def scribble_unread_record(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    result = _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    kv_cache[-1, 100] ^= 0x55
    return result


@_declare
def zero_q_after(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    result = _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    q.zero_()
    return result


@_declare
def shift_indices_after(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    result = _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    indices.add_(1)
    return result


@_declare
def device_assert_on_long_rows(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    if q.is_cuda and _longest_row(indptr) >= LONG_ROW:
        table = torch.zeros(4, device=q.device)
        bad = torch.full((1,), 1 << 20, dtype=torch.int64, device=q.device)
        table[bad] = 1.0  # out-of-range index: device-side assert
        torch.cuda.synchronize(q.device)
    return _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)


@_declare
def fake_device_fault_on_long_rows(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    """Raises the driver's device-side-assert error for rows >= 1024 keys (on any device)."""
    if _longest_row(indptr) >= LONG_ROW:
        raise RuntimeError("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    return _emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
