"""The compiled FlyDSL kernel, run by the ISA interpreter (kernel/isa, `flydsl-isa`), reads rows
whose indptr start is negative or whose end runs past the index buffer like the emulated kernel
(not indices[p] at position p of a row starting before the buffer, where emulated reads 0,
i.e. KV row 0). Bit-exact on exact-arithmetic inputs, with the
interpreter's checkers (out-of-bounds, LDS races, DMA reads before their wait, uninitialized
registers) finding nothing.

The interpreter's scaled-MFMA fp8 operand layout is set to "split", the one this kernel and the
seed's documentation use (docs/explanation/flydsl-kernel.md, "Hardware semantics"; docs/explanation/isa-interpreter.md finding F1).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")
om = pytest.importorskip("kernel.isa.ops_matrix")

from kernel.emulated.gfx950 import run_emulated  # noqa: E402 - after the importorskip: skip without flydsl
from kernel.flydsl.isa_backend import flydsl_isa_sparse_mla, last_stats  # noqa: E402 - after the importorskip
from strategies.materialize import materialize  # noqa: E402 - after the importorskip
from tests.recipes import exact_isa  # noqa: E402 - after the importorskip


@pytest.mark.parametrize("cfg", [(5, False, True), (8, True, True)], ids=["h5_i0_l1", "h8_i1_l1"])
def test_negative_and_past_the_end_indptr_bit_exact(cfg, monkeypatch):
    h, hi, rl = cfg
    monkeypatch.setattr(om, "F8_LAYOUT", "split")
    p = materialize(exact_isa(h, hi, rl, seed=11), "cpu")
    n = p.indices.numel()
    # row 0 starts 5 entries before the buffer (positions 0..4 read KV row 0), row 2 runs 150
    # entries past its end (those read KV row 0 too)
    indptr = torch.tensor([-5, 60, n - 20, n + 150], dtype=torch.int32)
    out, lse = flydsl_isa_sparse_mla(p.q, p.kv_cache, p.indices, indptr, p.softmax_scale, has_invalid=hi, return_lse=rl)
    assert last_stats[0].findings == []
    eo, el = run_emulated(p.q, p.kv_cache, p.indices, indptr, p.softmax_scale, has_invalid=hi, return_lse=rl)
    same = out.view(torch.int16) == eo.view(torch.int16)
    assert bool(same.all()), f"{int((~same).sum())} of {same.numel()} out elements differ"
    if rl:
        assert bool((lse.view(torch.int32) == el.view(torch.int32)).all())
    # the old reading (indices[p] at position p of row 0) would attend to other keys: the
    # emulated rows with the start clamped to 0 differ, so agreement is not vacuous
    clamped = indptr.clone()
    clamped[0] = 0
    co, _ = run_emulated(p.q, p.kv_cache, p.indices, clamped, p.softmax_scale, has_invalid=hi, return_lse=rl)
    assert not bool((co[0].view(torch.int16) == eo[0].view(torch.int16)).all())
