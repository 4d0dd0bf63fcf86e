"""The float32 reference kernel with one deliberate bug each: three kernels to see what a failure looks like.

- `fp32_buggy`: lse returned in log2 units (kernels that compute exp2 internally often keep the
  log-sum-exp in base 2; the contract asks for the natural log);
- `unmasked_invalid`: with has_invalid, a negative index is used instead of masked (torch's
  negative indexing then reads a row from the end of the cache);
- `wrong_block_scale`: each 128-value latent block is dequantised with the scale of the next
  block (block b uses scale (b + 1) mod 4).

The file is self-contained (copy it anywhere); its kernels declare the shipped `fp32` profile (the
float32 reference's numerics). Run the suite against one of them (README.md in this folder shows
the output):

    pytest --pyargs conformance --conformance-kernel examples/fp32_buggy/kernel.py:fp32_buggy -n auto
"""

from __future__ import annotations

import torch

from kernel.contract import empty_outputs, validate_call

PROFILE = "fp32"
LOG2 = 0.6931471805599453  # ln 2


def _decode(kv_cache: torch.Tensor, rows: torch.Tensor, block_of_scale: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """K [n, 576] and V [n, 512] in float32; latent block b is scaled by scale[block_of_scale[b]]."""
    records = kv_cache.reshape(-1, 656)[rows]
    codes = records[:, :512].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    scales = records[:, 512:528].contiguous().view(torch.float32)[:, block_of_scale]
    latent = (codes.view(-1, 4, 128) * scales.unsqueeze(-1)).view(-1, 512)
    rope = records[:, 528:656].contiguous().view(torch.bfloat16).to(torch.float32)
    return torch.cat((latent, rope), dim=1), latent


def _attention(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid, return_lse, out, bug: str):
    info = validate_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    if info.n_q == 0:
        return empty_outputs(q, info.heads, out=out, return_lse=return_lse)
    blocks = [1, 2, 3, 0] if bug == "wrong_block_scale" else [0, 1, 2, 3]
    result = torch.zeros(info.n_q, info.heads, 512, dtype=torch.float32, device=q.device)
    lse = torch.full((info.n_q, info.heads), float("-inf"), dtype=torch.float32, device=q.device)
    bounds = indptr.tolist()
    for row in range(info.n_q):
        keys = indices[bounds[row] : max(bounds[row], bounds[row + 1])].to(torch.int64)
        if has_invalid and bug != "unmasked_invalid":
            keys = keys[keys >= 0]
        if keys.numel() == 0:
            continue
        k, v = _decode(kv_cache, keys, blocks)
        scores = (q[row].to(torch.float32) @ k.T) * float(softmax_scale)
        result[row] = torch.softmax(scores, dim=-1) @ v
        lse[row] = torch.logsumexp(scores, dim=-1)
    if bug == "lse_in_log2":
        lse = lse / LOG2
    if out is None:
        out = torch.empty(info.n_q, info.heads, 512, dtype=torch.bfloat16, device=q.device)
    out.copy_(result)
    return out, (lse if return_lse else None)


def fp32_buggy(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
    """BUG: lse = log2(sum exp(s)) instead of the natural log."""
    return _attention(
        q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out, bug="lse_in_log2"
    )


def unmasked_invalid(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
    """BUG: negative (invalid) entries are not masked."""
    return _attention(
        q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out, bug="unmasked_invalid"
    )


def wrong_block_scale(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):
    """BUG: latent block b is scaled by the scale of block (b + 1) mod 4."""
    return _attention(
        q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out, bug="wrong_block_scale"
    )


for _kernel in (fp32_buggy, unmasked_invalid, wrong_block_scale):
    _kernel.profile = PROFILE  # type: ignore[attr-defined]
    _kernel.devices = ("cpu", "cuda")  # type: ignore[attr-defined]
