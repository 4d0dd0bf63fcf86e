"""Host values onto a device without making the host wait for the device.

`torch.tensor(values, device=cuda)` and `cpu_tensor.to(cuda)` copy from pageable host memory,
and torch then synchronises the stream (the copy must finish before the pageable buffer may
change): a host-device synchronisation per copy, which stalls the host until every kernel it
queued before has run. Staged through pinned memory (torch's caching host allocator) and copied
with non_blocking=True, the copy is queued like a kernel and the host goes on; the allocator
keeps the pinned block until the copy has run, so nothing here waits and nothing is reused early.
The values that arrive are the same bits either way.

Anywhere but CUDA, both functions do exactly what torch's own calls do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def to_device(values: float | int | Sequence[float] | Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.tensor(values, dtype=dtype, device=device), queued on CUDA without a host sync."""
    if device.type != "cuda":
        return torch.tensor(values, dtype=dtype, device=device)
    return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def move_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """tensor.to(device) of a host tensor, queued on CUDA without a host sync: the tensor is
    copied into a pinned buffer of its own first, so the caller may change or free it at once. Any
    other move (a tensor already on `device`, not host to CUDA, a tensor already pinned, whose
    memory the caller owns) goes through tensor.to as it is."""
    if device.type != "cuda" or tensor.device.type != "cpu" or tensor.is_pinned():
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
