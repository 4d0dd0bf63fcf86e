"""Float64 reference of the sparse MLA forward with the contract's semantics.

For each query row q and head h, over the row's valid keys i (CSR slice, negative length empty,
with has_invalid entries < 0 masked, duplicates counted once per occurrence):
    z_i   = softmax_scale * (q . K_i)                   (natural-log units)
    out   = sum_i softmax(z)_i V_i                      float64 [n_q, H, 512]
    lse   = ln sum_i exp(z_i)                           float64 [n_q, H]
A row with no valid key gives out = 0 exactly and lse = -inf.

K_i = [code * scale (512), rope (64)] and V_i = code * scale are exact in float64. The query used
is `q_ref` (float64 [n_q, H, 576]): the bf16 query widened exactly by default, or a profile's
deterministic representation of it (see oracle.q_representation). Work is vectorised over rows and keys;
the only loop is over memory-bounded chunks of rows. Runs on the device of the inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel.record import LATENT_DIM, RECORD_BYTES
from oracle import fused_products
from oracle.fused_products import ProductsLike
from oracle.rows import REFERENCE_KEY_BUDGET, KeyBlock, KeyChunk, iter_chunks, iter_key_blocks


@dataclass(frozen=True)
class Reference:
    """out: f64 [n_q, H, 512]; lse: f64 [n_q, H] (natural log, -inf for an empty row)."""

    out: torch.Tensor
    lse: torch.Tensor


def chunk_scores(q_ref: torch.Tensor, chunk: KeyChunk, softmax_scale: float) -> torch.Tensor:
    """z [R, H, L] = softmax_scale * q . K for the chunk's rows; -inf at masked slots."""
    keys = torch.cat((chunk.k_latent, chunk.rope), dim=-1)  # [R, L, 576]
    scores = torch.bmm(q_ref[chunk.rows], keys.transpose(1, 2)) * float(softmax_scale)
    return scores.masked_fill(~chunk.valid.unsqueeze(1), float("-inf"))


def chunk_softmax(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(p [R, H, L], lse [R, H]) of scores with -inf slots; every row here has >= 1 valid key."""
    peak = scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores - peak)
    total = weights.sum(dim=-1, keepdim=True)
    return weights / total, (peak + torch.log(total)).squeeze(-1)


def block_reference(
    q_ref: torch.Tensor, block: KeyBlock, softmax_scale: float, products: ProductsLike | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out f64 [R, H, 512], lse f64 [R, H]) of one KeyBlock; a row without a valid key gets 0 / -inf.

    z = scale * q . K (one batched f64 GEMM), softmax with the row max subtracted, out =
    (exp(z - max) @ V) / sum exp(z - max): the division is applied to the [R, H, 512] result
    rather than to the [R, H, L] weights (same value to f64 rounding). `products` given (a block
    gathered with its slots, q_ref contiguous): q . K and exp(z - max) @ V are
    oracle.fused_products' (or oracle.dmma_products') kernels over the records instead of bmm's over block.keys.
    """
    fused = products is not None and block.slots is not None
    if fused:
        assert products is not None and block.slots is not None
        scores = products.scores(q_ref, block.rows, block.slots)
    else:
        assert block.keys is not None
        scores = torch.bmm(q_ref[block.rows], block.keys.transpose(1, 2))
    scores.mul_(float(softmax_scale))
    if not block.all_valid:  # masking an all-valid block is the identity
        scores.masked_fill_(~block.valid.unsqueeze(1), float("-inf"))
    peak = scores.amax(dim=-1, keepdim=True)
    scores.sub_(peak).exp_()
    total = scores.sum(dim=-1, keepdim=True)
    if fused:
        assert products is not None and block.slots is not None
        out = products.weighted(scores, block.slots).div_(total)
    else:
        assert block.keys is not None
        out = torch.bmm(scores, block.keys[..., :LATENT_DIM]).div_(total)
    lse = (peak + torch.log(total)).squeeze(-1)
    if block.keyed:  # every row has a key: the selections below are the identity
        return out, lse
    has_key = block.valid.any(dim=1).view(-1, 1)
    out = torch.where(has_key.unsqueeze(-1), out, 0.0)
    lse = torch.where(has_key, lse, float("-inf"))
    return out, lse


def _products(kv_cache: torch.Tensor) -> ProductsLike | None:
    """oracle.fused_products' kernels over this cache where they may be used (the fast path
    oracle.products: the setting, the device, the device's self-check), else None."""
    flat = kv_cache.reshape(-1, RECORD_BYTES)
    if not fused_products.usable(flat):
        return None
    return fused_products.products(flat)


def reference(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    q_ref: torch.Tensor | None = None,
    key_budget: int | None = None,
    scale_model: str = "stored",
) -> Reference:
    """The float64 reference (see module docstring); raises oracle.rows.PreconditionError on
    consumed positions or indices out of range. `scale_model` is oracle.rows.SCALE_MODELS
    ("stored": the contract; "gfx950": the gfx950 kernel's documented handling of any scale).
    key_budget: key slots per chunk (default oracle.rows.REFERENCE_KEY_BUDGET for the device)."""
    n_q, heads, _ = q.shape
    budget = key_budget or REFERENCE_KEY_BUDGET.get(q.device.type, REFERENCE_KEY_BUDGET["cpu"])
    q64 = q.to(torch.float64) if q_ref is None else q_ref
    out = torch.zeros(n_q, heads, LATENT_DIM, dtype=torch.float64, device=q.device)
    lse = torch.full((n_q, heads), float("-inf"), dtype=torch.float64, device=q.device)
    if scale_model == "stored":
        products = _products(kv_cache)
        if products is not None:
            q64 = q64.contiguous()
        blocks = iter_key_blocks(indices, indptr, kv_cache, has_invalid=has_invalid, key_budget=budget, decode=products is None)
        for block in blocks:
            out[block.rows], lse[block.rows] = block_reference(q64, block, softmax_scale, products)
        return Reference(out=out, lse=lse)
    for chunk in iter_chunks(indices, indptr, kv_cache, has_invalid=has_invalid, key_budget=budget, scale_model=scale_model):
        if not bool(chunk.valid.any()):
            continue
        scores = chunk_scores(q64, chunk, softmax_scale)
        has_key = chunk.valid.any(dim=1)
        rows = chunk.rows[has_key]
        probs, row_lse = chunk_softmax(scores[has_key])
        out[rows] = torch.bmm(probs, chunk.latent[has_key])
        lse[rows] = row_lse
    return Reference(out=out, lse=lse)
