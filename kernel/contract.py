"""The sparse MLA kernel contract as code: the callable's shape and host-side validation.

Every backend is a callable

    fn(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False,
       out=None) -> (out, lse_or_None)

- q: bf16 [n_q, H, 576], 1 <= H <= 16, last dim contiguous, row and head strides free;
- kv_cache: uint8 [..., 656], contiguous (rows are addressed as flat rows, byte offset
  row * 656; the cache may exceed 4 GiB);
- indices: int32 1-D contiguous (the CSR stream); indptr: int32 [n_q + 1] contiguous;
  row q attends to indices[indptr[q] : indptr[q + 1]], a negative length counts as empty;
- softmax_scale: a finite real number; s = softmax_scale * (q . K);
- out: bf16 [n_q, H, 512] (any non-overlapping row/head strides, last dim contiguous) or None;
- returns out (bf16 [n_q, H, 512]) and lse (f32 [n_q, H], natural log, -inf for an empty row)
  when return_lse, else None.

`validate_call` checks everything the host can check without reading device data and raises a
`ContractError` whose message names the argument and the problem. Data-dependent preconditions
(index range, scale values, indptr monotonicity) are the business of `oracle.preconditions`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Protocol

import torch

from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES

MAX_HEADS = 16
INT32_MAX = 2**31 - 1


class ContractError(ValueError):
    """A call that breaks the kernel contract in a way the host can see; the message says how."""


class KernelFn(Protocol):
    """The contract's callable shape (see the module docstring)."""

    def __call__(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        indices: torch.Tensor,
        indptr: torch.Tensor,
        softmax_scale: float,
        *,
        has_invalid: bool = False,
        return_lse: bool = False,
        out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...


@dataclass(frozen=True)
class CallInfo:
    """Shape facts of a validated call: counts in elements (rows, heads, index entries)."""

    n_q: int
    heads: int
    n_indices: int
    kv_rows: int
    device: torch.device
    has_invalid: bool
    return_lse: bool
    out_given: bool


@dataclass(frozen=True)
class Support:
    """Whether a backend supports a call; `reason` says why not (empty when supported)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def _require_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ContractError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _non_overlapping(t: torch.Tensor) -> bool:
    """Sufficient test that no two elements of t share memory (strides sorted, each covering the last)."""
    dims = sorted((t.stride(d), t.size(d)) for d in range(t.dim()) if t.size(d) > 1)
    span = 1
    for stride, size in dims:
        if stride < span:
            return False
        span = stride * size
    return True


def empty_outputs(q: torch.Tensor, heads: int, *, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The outputs of a call with no query rows: `out` itself (or a new bf16 [0, H, 512]) and an
    empty f32 [0, H] lse when asked for."""
    result = out if out is not None else torch.empty(0, heads, LATENT_DIM, dtype=torch.bfloat16, device=q.device)
    return result, (torch.empty(0, heads, dtype=torch.float32, device=q.device) if return_lse else None)


def begin_call(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    max_heads: int = MAX_HEADS,
) -> tuple[CallInfo, tuple[torch.Tensor, torch.Tensor | None] | None]:
    """The contract prologue of every backend: `validate_call` (ContractError naming the first
    problem), then (info, the outputs to return at once) for a call with no query rows
    (`empty_outputs`), (info, None) otherwise. Host-only: no device data is read."""
    info = validate_call(
        q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out, max_heads=max_heads
    )
    return info, (empty_outputs(q, info.heads, out=out, return_lse=return_lse) if info.n_q == 0 else None)


def validate_call(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    max_heads: int = MAX_HEADS,
) -> CallInfo:
    """Check a call against the contract; raise ContractError naming the first problem found."""
    q = _require_tensor("q", q)
    kv_cache = _require_tensor("kv_cache", kv_cache)
    indices = _require_tensor("indices", indices)
    indptr = _require_tensor("indptr", indptr)

    if q.dtype != torch.bfloat16:
        raise ContractError(f"q must be bfloat16, got {q.dtype}")
    if q.dim() != 3:
        raise ContractError(f"q must be 3-D [n_q, H, {HEAD_DIM}], got shape {tuple(q.shape)}")
    n_q, heads, width = q.shape
    if width != HEAD_DIM:
        raise ContractError(f"q last dim must be {HEAD_DIM} (512 latent + 64 rope), got {width}")
    if not 1 <= heads <= max_heads:
        raise ContractError(f"q must have 1 <= H <= {max_heads} heads, got H={heads}")
    if q.stride(2) != 1:
        raise ContractError(f"q last dim must be contiguous (stride 1), got stride {q.stride(2)}")

    if kv_cache.dtype != torch.uint8:
        raise ContractError(f"kv_cache must be uint8 records, got {kv_cache.dtype}")
    if kv_cache.dim() < 2:
        raise ContractError(f"kv_cache must be [..., {RECORD_BYTES}] with at least 2 dims, got shape {tuple(kv_cache.shape)}")
    if kv_cache.shape[-1] != RECORD_BYTES:
        raise ContractError(f"kv_cache record width must be {RECORD_BYTES} bytes, got {kv_cache.shape[-1]}")
    if not kv_cache.is_contiguous():
        raise ContractError("kv_cache must be contiguous: rows are addressed as flat rows (byte offset row * 656)")

    if indices.dtype != torch.int32:
        raise ContractError(f"indices must be int32, got {indices.dtype}")
    if indices.dim() != 1:
        raise ContractError(f"indices must be 1-D (the CSR stream), got shape {tuple(indices.shape)}")
    if not indices.is_contiguous():
        raise ContractError("indices must be contiguous")
    if indices.numel() > INT32_MAX:
        raise ContractError(f"indices has {indices.numel()} entries; positions must fit int32")

    if indptr.dtype != torch.int32:
        raise ContractError(f"indptr must be int32, got {indptr.dtype}")
    if indptr.dim() != 1 or indptr.shape[0] != n_q + 1:
        raise ContractError(f"indptr must be 1-D of length n_q + 1 = {n_q + 1}, got shape {tuple(indptr.shape)}")
    if not indptr.is_contiguous():
        raise ContractError("indptr must be contiguous")

    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise ContractError(f"softmax_scale must be a real number, got {type(softmax_scale).__name__}")
    if not math.isfinite(float(softmax_scale)):
        raise ContractError(f"softmax_scale must be finite, got {softmax_scale}")
    if not isinstance(has_invalid, bool):
        raise ContractError(f"has_invalid must be a bool, got {type(has_invalid).__name__}")
    if not isinstance(return_lse, bool):
        raise ContractError(f"return_lse must be a bool, got {type(return_lse).__name__}")

    device = q.device
    for name, tensor in (("kv_cache", kv_cache), ("indices", indices), ("indptr", indptr)):
        if tensor.device != device:
            raise ContractError(f"{name} is on {tensor.device} but q is on {device}: all tensors must share one device")

    if out is not None:
        out = _require_tensor("out", out)
        if out.dtype != torch.bfloat16:
            raise ContractError(f"out must be bfloat16, got {out.dtype}")
        if tuple(out.shape) != (n_q, heads, LATENT_DIM):
            raise ContractError(f"out must have shape {(n_q, heads, LATENT_DIM)}, got {tuple(out.shape)}")
        if out.stride(2) != 1:
            raise ContractError(f"out last dim must be contiguous (stride 1), got stride {out.stride(2)}")
        if out.device != device:
            raise ContractError(f"out is on {out.device} but q is on {device}")
        if not _non_overlapping(out):
            raise ContractError(f"out rows/heads overlap in memory (strides {tuple(out.stride())})")

    kv_rows = kv_cache.numel() // RECORD_BYTES
    return CallInfo(
        n_q=n_q,
        heads=heads,
        n_indices=indices.numel(),
        kv_rows=kv_rows,
        device=device,
        has_invalid=has_invalid,
        return_lse=return_lse,
        out_given=out is not None,
    )
