"""Directed precision probes: small problems built so that one rounding step decides the verdict.

Random recipes hide a rounding-mode defect under the other error terms (the QK accumulation
budget, the bf16 output rounding). A probe makes those terms negligible and puts one step on a
rounding boundary:

- `p_rounding_probe`: three keys; q has three nonzero rope values (so the QK budget counts 2
  products), softmax_scale = ln 2 (c_log2 = 1): key A has score 0 (P = 2^8) and zero latent, key B
  has score -(1 - 1.40625 c_h 2^-10), so P_B = 128 + 0.1219 c_h: 0.52 to 0.97 of an fp16 ulp above
  128 over the 16 heads (c_h in [0.53, 1]). Round to nearest gives 128.125, toward zero 128: up
  to a 2^-10 relative error where the bound allows 2^-11; the heads' different l and key B's
  512 latent values make some outputs cross a bf16 midpoint; a third key C of zero latent and
  score -t (t in [0, 1) per row and head) spreads l over [384, 512).

Probes return `strategies.materialize.Problem`s (their recipe field is a placeholder: a probe is
not a recipe and is not replayed from the corpus).
"""

from __future__ import annotations

import math

import torch

from kernel.record import encode_records
from strategies.materialize import Problem
from strategies.recipe import Recipe


def p_rounding_probe(seed: int = 0, heads: int = 16, n_q: int = 16) -> Problem:
    """The two-key P' rounding probe (module docstring); `seed` draws key B's latent values.
    Each of the n_q x heads (row, head) pairs gets its own c in [0.75, 1) (P_B 0.73 to 0.97 of an
    fp16 ulp above 128), so the outputs' mantissas spread and some cross bf16 midpoints."""
    gen = torch.Generator().manual_seed(seed)
    latent = torch.zeros(3, 512)
    latent[1] = (1 + torch.rand(512, generator=gen)) * torch.where(torch.rand(512, generator=gen) < 0.5, -1.0, 1.0)
    rope = torch.zeros(3, 64, dtype=torch.bfloat16)
    rope[1, 0] = -1.0
    rope[1, 1] = 1.40625
    rope[2, 2] = -1.0  # key C: zero latent, score -t (t per (row, head)): spreads l over [384, 512)
    records = encode_records(latent, rope, "pow2")
    q = torch.zeros(n_q, heads, 576, dtype=torch.bfloat16)
    q[:, :, 512] = 1.0
    # (row, head) k: P_B = 128 + 0.1219 c_k, c_k = 0.75 + k / (4 n_q heads): bf16 values in [0.75, 1)
    c = 0.75 + torch.arange(n_q * heads, dtype=torch.float64).view(n_q, heads) / (4 * n_q * heads)
    q[:, :, 513] = (2.0**-10 * c).to(torch.bfloat16)
    q[:, :, 514] = torch.rand(n_q, heads, generator=gen).to(torch.bfloat16)
    return Problem(
        recipe=Recipe(seed=seed, n_q=n_q, heads=heads, row_lengths=(3,) * n_q, cache_rows=3),
        q=q,
        kv_cache=records,
        indices=torch.tensor([0, 1, 2] * n_q, dtype=torch.int32),
        indptr=torch.arange(0, 3 * n_q + 1, 3, dtype=torch.int32),
        softmax_scale=math.log(2.0),
        has_invalid=False,
        return_lse=True,
        out=None,
        referenced_rows=torch.tensor([0, 1, 2]),
        poison_rows=torch.zeros(0, dtype=torch.int64),
    )


def equal_scores_probe(n_keys: int, seed: int = 0) -> Problem:
    """One key of score 0 and n_keys - 1 keys of equal score -2^-7 (q = e_rope0, softmax_scale =
    ln 2): l sums thousands of equal P = 2^(8 - 2^-7) = 254.62 (a long mantissa, so every
    addition rounds once l is large), while the QK budget counts one product: l's accumulation
    model alone decides the lse verdict."""
    gen = torch.Generator().manual_seed(seed)
    rows = min(n_keys, 256)
    latent = torch.randn(rows, 512, generator=gen)
    rope = torch.zeros(rows, 64, dtype=torch.bfloat16)
    rope[1:, 0] = -(2.0**-7)
    records = encode_records(latent, rope, "pow2")
    indices = torch.cat((torch.zeros(1, dtype=torch.int64), torch.randint(1, rows, (n_keys - 1,), generator=gen, dtype=torch.int64))).to(
        torch.int32
    )
    q = torch.zeros(1, 1, 576, dtype=torch.bfloat16)
    q[0, 0, 512] = 1.0
    return Problem(
        recipe=Recipe(seed=seed, n_q=1, heads=1, row_lengths=(n_keys,), cache_rows=rows),
        q=q,
        kv_cache=records,
        indices=indices,
        indptr=torch.tensor([0, n_keys], dtype=torch.int32),
        softmax_scale=math.log(2.0),
        has_invalid=False,
        return_lse=True,
        out=None,
        referenced_rows=torch.arange(rows),
        poison_rows=torch.zeros(0, dtype=torch.int64),
    )
