"""Small kernels for the triage tests (tests/conformance/judging/test_kinds.py), each a float64 computation of the
contract with one thing wrong, declaring profile "exact" (a float64 reference's numerics), so that
the failure's kind is decided by the bug alone:

- `reference`: nothing wrong (passes);
- `wrong_block_scale`: latent block b of every key is dequantised with the scale of block
  (b + 1) mod 4 (a logic bug: far outside every rounding model);
- `lse_log2`: lse returned in log2 units, log2 of the sum of exp(s) (a logic bug);
- `p_bf16_toward_zero`: P = exp(s - max) truncated to bf16 before PV, l summing the unrounded P
  (a rounding step coarser than declared);
- `raises`: raises ValueError on every call;
- `writes_kv_cache`: computes the right result, then writes into the cache's first record;
- `sleeps`: sleeps one second before computing (for a short per-call limit).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from conformance.mutation.independent import BLOCK, bf16_toward_zero, gather
from kernel.contract import validate_call


def _kernel(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    scale_block: Callable[[int], int] = lambda b: b,
    round_p: Callable[[torch.Tensor], torch.Tensor] = lambda p: p,
    lse_unit: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    validate_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    g = gather(kv_cache, indices, indptr, has_invalid)
    scales = g.scales.to(torch.float64)[..., [scale_block(b) for b in range(4)]]
    values = g.codes.to(torch.float64) * scales.repeat_interleave(BLOCK, dim=-1)
    keys = torch.cat((values, g.rope.to(torch.float64)), dim=-1)
    s = torch.matmul(q.to(torch.float64), keys.transpose(1, 2)) * softmax_scale
    s = s.masked_fill(~g.valid[:, None, :], float("-inf"))
    any_key = g.valid.any(dim=-1)[:, None, None]
    peak = torch.where(any_key, s.amax(dim=-1, keepdim=True), 0.0)
    p = torch.exp(s - peak)
    total = p.sum(dim=-1, keepdim=True)
    o = torch.matmul(round_p(p), values) / torch.where(any_key, total, 1.0)
    o = torch.where(any_key, o, 0.0)
    lse = torch.where(any_key[..., 0], (torch.log(total[..., 0]) + peak[..., 0]) / lse_unit, float("-inf"))
    result = o.to(torch.bfloat16)
    if out is not None:
        out.copy_(result)
        result = out
    return result, (lse.to(torch.float32) if return_lse else None)


def reference(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    return _kernel(q, kv_cache, indices, indptr, softmax_scale, **kw)


def wrong_block_scale(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    return _kernel(q, kv_cache, indices, indptr, softmax_scale, scale_block=lambda b: (b + 1) % 4, **kw)


def lse_log2(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    return _kernel(q, kv_cache, indices, indptr, softmax_scale, lse_unit=math.log(2.0), **kw)


def _p_bf16_toward_zero(p: torch.Tensor) -> torch.Tensor:
    return bf16_toward_zero(p.to(torch.float32)).to(torch.float64)


def p_bf16_toward_zero(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    return _kernel(q, kv_cache, indices, indptr, softmax_scale, round_p=_p_bf16_toward_zero, **kw)


def raises(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    raise ValueError("this kernel always raises")


def writes_kv_cache(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    result = _kernel(q, kv_cache, indices, indptr, softmax_scale, **kw)
    kv_cache.view(-1)[:8] += 1
    return result


def sleeps(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    time.sleep(1.0)
    return _kernel(q, kv_cache, indices, indptr, softmax_scale, **kw)


for _kernel_fn in (reference, wrong_block_scale, lse_log2, p_bf16_toward_zero, raises, writes_kv_cache, sleeps):
    _kernel_fn.profile = "exact"  # type: ignore[attr-defined]
