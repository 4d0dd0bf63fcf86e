"""A float32 reference kernel for the sparse MLA contract, written from the docs (copy and adapt).

Contract (kernel/contract.py, docs/reference/contract.md):

    kernel(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False,
           out=None) -> (out, lse_or_None)

- q: bf16 [n_q, H, 576]; kv_cache: uint8 [..., 656] fp8_ds_mla records (any leading shape, e.g. a
  paged [blocks, block_size, 656] cache: rows are the flattened leading dims);
- row r attends to indices[indptr[r] : indptr[r + 1]] (a negative length is an empty row, a
  duplicate index is a second key, with has_invalid an entry < 0 is masked);
- out: bf16 [n_q, H, 512] = softmax(softmax_scale * q . K) V; lse: f32 [n_q, H], natural log,
  -inf for a row without a valid key (its out is exactly 0).

Validating the call is the kernel's duty: `kernel.contract.validate_call` raises a
ContractError naming the bad argument (the suite's host-validation property checks that each
bad input gets such an error). The numerics are plain float32 (every step in f32), which the
profile next to this file declares.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kernel.contract import empty_outputs, validate_call

PROFILE = str(Path(__file__).with_name("profile.toml"))


def decode_rows(kv_cache: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K [n, 576] and V [n, 512] in float32 of the flat cache rows `rows` (int64 [n])."""
    records = kv_cache.reshape(-1, 656)[rows]  # any leading shape: rows are flat rows
    codes = records[:, :512].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    scales = records[:, 512:528].contiguous().view(torch.float32)  # [n, 4]
    latent = (codes.view(-1, 4, 128) * scales.unsqueeze(-1)).view(-1, 512)
    rope = records[:, 528:656].contiguous().view(torch.bfloat16).to(torch.float32)
    return torch.cat((latent, rope), dim=1), latent


def fp32_reference(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
    """The contract in float32: one query row at a time (clear, not fast)."""
    info = validate_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    if info.n_q == 0:
        return empty_outputs(q, info.heads, out=out, return_lse=return_lse)
    result = torch.zeros(info.n_q, info.heads, 512, dtype=torch.float32, device=q.device)
    lse = torch.full((info.n_q, info.heads), float("-inf"), dtype=torch.float32, device=q.device)
    bounds = indptr.tolist()
    for row in range(info.n_q):
        keys = indices[bounds[row] : max(bounds[row], bounds[row + 1])].to(torch.int64)
        if has_invalid:
            keys = keys[keys >= 0]
        if keys.numel() == 0:
            continue  # out stays 0, lse -inf
        k, v = decode_rows(kv_cache, keys)
        scores = (q[row].to(torch.float32) @ k.T) * float(softmax_scale)  # [H, n]
        result[row] = torch.softmax(scores, dim=-1) @ v
        lse[row] = torch.logsumexp(scores, dim=-1)
    if out is None:
        out = torch.empty(info.n_q, info.heads, 512, dtype=torch.bfloat16, device=q.device)
    out.copy_(result)
    return out, (lse if return_lse else None)


# What the suite reads from the callable: its numerics profile (a shipped name or a TOML path)
# and the devices it runs on. Optional: max_heads, head_counts, accepts_out (default: read from
# the signature), batch_invariant, bounded_index_reads.
fp32_reference.profile = PROFILE
fp32_reference.devices = ("cpu", "cuda")
