"""The reference's key gather zeroes masked slots (skipped only for blocks whose every slot holds a
key): invalid entries pointing at a poisoned row never reach the result."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from oracle import rows
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


@pytest.mark.parametrize("has_invalid", [False, True])
def test_mask_check_path_same_bits(monkeypatch: pytest.MonkeyPatch, has_invalid: bool) -> None:
    """Blocks known to be all valid (full rows, no has_invalid: the zeroing pass, the score mask
    and the empty-row selections skipped) give the bits of blocks that always mask, with and
    without masked slots."""
    recipe = Recipe(seed=8, n_q=5, heads=4, row_lengths=(130, 130, 130, 0, 130), cache_rows=300, has_invalid=has_invalid)
    if has_invalid:
        recipe = dataclasses.replace(recipe, invalid_pattern="scattered", invalid_permille=200)
    p = materialize(recipe, "cpu")
    p.indices[p.indices == 0] = 1  # row 0, where masked slots point, holds NaN codes and no key
    p.kv_cache.view(-1, 656)[0, :512] = 0x7F
    args = p.args
    skipped = reference(*args, has_invalid=has_invalid)
    gather = rows.gather_keys

    def always_mask(*a, **kw):  # type: ignore[no-untyped-def]
        block = gather(*a, **{**kw, "full": False})
        assert not block.all_valid
        return dataclasses.replace(block, keyed=False)

    monkeypatch.setattr(rows, "gather_keys", always_mask)
    masked = reference(*args, has_invalid=has_invalid)
    for a, b in ((skipped.out, masked.out), (skipped.lse, masked.lse)):
        assert torch.equal(a.view(torch.int64), b.view(torch.int64))
