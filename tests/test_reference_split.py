"""reference(): a key block's softmax on row slices (REFERENCE_SCORE_SLOTS) gives the whole
block's bits: the slices run the same batched ops on fewer rows, and each row's values are its own."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from oracle import reference as reference_mod
from strategies.materialize import materialize
from strategies.recipe import Recipe


@pytest.mark.parametrize("has_invalid", [False, True])
def test_score_slices_same_bits(monkeypatch: pytest.MonkeyPatch, has_invalid: bool) -> None:
    recipe = Recipe(seed=9, n_q=7, heads=3, row_lengths=(120, 120, 0, 120, 57, 120, 3), cache_rows=400, has_invalid=has_invalid)
    if has_invalid:
        recipe = dataclasses.replace(recipe, invalid_pattern="scattered", invalid_permille=300)
    p = materialize(recipe, "cpu")
    args = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
    whole = reference_mod.reference(*args, has_invalid=has_invalid, key_budget=1 << 12)
    slots = 2 * 3 * 120  # two rows of the widest block per slice (and one of narrower blocks' rows)
    monkeypatch.setitem(reference_mod.REFERENCE_SCORE_SLOTS, "cpu", slots)
    calls = []
    real = reference_mod.block_reference
    monkeypatch.setattr(reference_mod, "block_reference", lambda q, b, s: calls.append(b.rows.numel()) or real(q, b, s))
    sliced = reference_mod.reference(*args, has_invalid=has_invalid, key_budget=1 << 12)
    assert max(calls) <= 2 and len(calls) > 2
    for a, b in ((whole.out, sliced.out), (whole.lse, sliced.lse)):
        assert torch.equal(a.view(torch.int64), b.view(torch.int64))
