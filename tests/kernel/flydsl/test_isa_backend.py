"""The `flydsl-isa` registry backend: declaration, limits, out= and staging paths."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from kernel.emulated.gfx950 import run_emulated
from kernel.registry import BUILTIN_NAMES, resolve
from strategies.materialize import materialize
from strategies.recipe import Recipe


def test_registry_resolves_flydsl_isa() -> None:
    assert "flydsl-isa" in BUILTIN_NAMES
    b = resolve("flydsl-isa")
    assert b.name == "flydsl-isa" and b.profile == "gfx950" and b.devices == ("cpu",) and b.accepts_out


def test_limits_refuse_large_calls() -> None:
    b = resolve("flydsl-isa")
    q = torch.zeros(300, 1, 576, dtype=torch.bfloat16)
    kv = torch.zeros(4, 656, dtype=torch.uint8)
    idx = torch.zeros(0, dtype=torch.int32)
    iptr = torch.zeros(301, dtype=torch.int32)
    s = b.supports(q, kv, idx, iptr, 0.1)
    assert not s.ok and "rows" in s.reason


def test_strided_out_and_q_through_staging_agree_with_emulated() -> None:
    """q with padded strides and a preallocated out with an odd row stride (8-byte alignment
    broken) go through the host wrapper's staging copies."""
    r = Recipe(
        seed=11,
        n_q=2,
        heads=5,
        row_lengths=(40, 3),
        cache_rows=100,
        latent="exact",
        rope="exact",
        q="exact",
        softmax_scale="exact",
        q_pad=(8, 8),
        return_lse=True,
    )
    p = materialize(r, "cpu")
    big = torch.full((2, 5, 512 + 3), 7.0, dtype=torch.bfloat16)
    out = big[:, :, 1:513]
    b = resolve("flydsl-isa")
    o, lse = b(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, return_lse=True, out=out)
    eo, el = run_emulated(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, return_lse=True)
    assert o.data_ptr() == out.data_ptr()
    assert bool((o.view(torch.int16) == eo.view(torch.int16)).all())
    assert bool((lse.view(torch.int32) == el.view(torch.int32)).all())
    assert bool((big[:, :, 0] == 7.0).all()) and bool((big[:, :, 513:] == 7.0).all())  # nothing outside out written


def test_empty_call() -> None:
    b = resolve("flydsl-isa")
    q = torch.zeros(0, 3, 576, dtype=torch.bfloat16)
    o, lse = b(
        q,
        torch.zeros(1, 656, dtype=torch.uint8),
        torch.zeros(0, dtype=torch.int32),
        torch.zeros(1, dtype=torch.int32),
        0.1,
        return_lse=True,
    )
    assert o.shape == (0, 3, 512) and lse is not None and lse.shape == (0, 3)
