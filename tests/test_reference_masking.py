"""The reference's key gather zeroes masked slots (skipped only for blocks whose every slot holds a
key): invalid entries pointing at a poisoned row never reach the result."""

from __future__ import annotations

import torch

from oracle.reference import reference
from strategies.materialize import materialize
from strategies.recipe import Recipe


def test_masked_slots_never_reach_the_result() -> None:
    recipe = Recipe(
        seed=7,
        n_q=4,
        heads=3,
        row_lengths=(200, 40, 0, 300),
        cache_rows=600,
        invalid_pattern="scattered",
        invalid_permille=400,
        has_invalid=True,
    )
    p = materialize(recipe, "cpu")
    p.indices[p.indices == 0] = 1  # row 0 is read only by masked slots (where they point before zeroing)
    p.kv_cache.view(-1, 656)[0, :512] = 0x7F  # NaN codes there
    got = reference(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, has_invalid=True)
    # the same rows with their invalid entries dropped (no masking needed), as a plain CSR stream
    starts, ends = p.indptr[:-1].tolist(), p.indptr[1:].tolist()
    kept = [p.indices[s:e][p.indices[s:e] >= 0] for s, e in zip(starts, ends, strict=True)]
    indices = torch.cat(kept).to(torch.int32)
    indptr = torch.tensor([0, *torch.tensor([k.numel() for k in kept]).cumsum(0).tolist()], dtype=torch.int32)
    want = reference(p.q, p.kv_cache, indices, indptr, p.softmax_scale)
    assert torch.isfinite(got.out).all()
    torch.testing.assert_close(got.out, want.out, rtol=1e-12, atol=0)
    torch.testing.assert_close(got.lse, want.lse, rtol=1e-12, atol=0)
