"""Which call flags a kernel takes: the (has_invalid, return_lse) pairs its declared support
admits, asked of the backend itself (`Backend.supports`) so that a property can draw within them.

A kernel compiled for one configuration (an `isa:` launch spec, a user's narrow kernel) refuses
the other flag values; a property whose recipes fix a flag (precision probes: has_invalid False,
lse on; precondition violations: has_invalid False) would then have every draw rejected. Such a
property draws its flags from `supported_flags` instead, or skips naming what the kernel lacks.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from conformance.judging.target import Target
from kernel.record import RECORD_BYTES

FlagPair = tuple[bool, bool]  # (has_invalid, return_lse)
ALL_FLAGS: tuple[FlagPair, ...] = tuple(itertools.product((False, True), (False, True)))


def _one_key_call(target: Target, heads: int) -> tuple[torch.Tensor, ...]:
    """q, kv_cache, indices, indptr of a valid one-row call of one key on the target's device."""
    dev = target.device
    return (
        torch.zeros(1, heads, 576, dtype=torch.bfloat16, device=dev),
        torch.zeros(1, RECORD_BYTES, dtype=torch.uint8, device=dev),
        torch.zeros(1, dtype=torch.int32, device=dev),
        torch.tensor([0, 1], dtype=torch.int32, device=dev),
    )


def supported_flags(target: Target, heads: int) -> tuple[FlagPair, ...]:
    """The (has_invalid, return_lse) pairs the target's backend takes for a call of `heads` heads
    on its device (a one-row call of one key: the flags' own support, not a size limit), in
    ALL_FLAGS order. Empty when it takes none (or not that H)."""
    call = _one_key_call(target, heads)
    return tuple((inv, lse) for inv, lse in ALL_FLAGS if target.backend.supports(*call, 1.0, has_invalid=inv, return_lse=lse).ok)


def flags_reason(target: Target, heads: int, flags: tuple[FlagPair, ...] = ALL_FLAGS) -> str:
    """What the backend says about the first of `flags` it refuses at `heads` (for a skip message
    naming what the kernel does not take)."""
    call = _one_key_call(target, heads)
    for inv, lse in flags:
        support = target.backend.supports(*call, 1.0, has_invalid=inv, return_lse=lse)
        if not support.ok:
            return support.reason
    return ""


def require_flags(target: Target, *, has_invalid: bool | None = None, return_lse: bool | None = None) -> None:
    """Skip (pytest) unless the kernel takes, at some H it declares, a flag pair with the given
    values (None: either): a property that needs lse cannot run on a kernel compiled without it,
    and says so instead of ending in Hypothesis Unsatisfiable."""
    wanted = [f for f in ALL_FLAGS if has_invalid in (None, f[0]) and return_lse in (None, f[1])]
    counts = target.backend.head_counts or tuple(range(1, target.backend.max_heads + 1))
    if any(f in supported_flags(target, h) for h in counts for f in wanted):
        return
    need = ", ".join(f"{k}={v}" for k, v in (("has_invalid", has_invalid), ("return_lse", return_lse)) if v is not None)
    pytest.skip(f"{target.name} does not take {need} at any H: {flags_reason(target, counts[0], tuple(wanted))}")
