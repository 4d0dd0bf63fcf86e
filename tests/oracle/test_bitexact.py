"""Invariants of the fast paths of the oracle, the bound and the emulator, bit for bit.

The fast paths (oracle.rows.gather_bound_chunk, the integer sum of |code|, the f32 count of
nonzero products, round_bf16's direct spacing, the pairwise output casts, the skipped masks of an
all-valid chunk, the index_select decoders) claim to give exactly the values of the direct
formulations they replaced. Each test recomputes one of them the direct way and compares the bits
(NaN payloads included: tensors are compared through their integer views). The end-to-end proof
over a fixed set of problems against a stored snapshot is `python -m conformance snapshot oracle`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernel.emulated import gfx950 as emulated
from kernel.fp8 import e4m3_table, pow2
from oracle import bound, key_decode, rows
from oracle import q_representation as qrep
from oracle.profiles import load_profile
from strategies.materialize import materialize
from strategies.recipe import Recipe

_INT_VIEW = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bits."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = _INT_VIEW[a.element_size()] if a.dtype.is_floating_point else a.dtype
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


RECIPES = {
    "plain": Recipe(seed=1, n_q=4, heads=3, row_lengths=(130, 0, 57, 130), cache_rows=300),
    "invalid_poison": Recipe(
        seed=2,
        n_q=5,
        heads=2,
        row_lengths=(90, 40, 0, 90, 12),
        cache_rows=200,
        invalid_pattern="scattered",
        invalid_permille=400,
        has_invalid=True,
        poison=True,
    ),
    "all_invalid_row": Recipe(
        seed=3, n_q=3, heads=2, row_lengths=(64, 64, 20), cache_rows=100, invalid_pattern="leading_tile", has_invalid=True
    ),
    "duplicates": Recipe(seed=4, n_q=2, heads=4, row_lengths=(200, 3), cache_rows=16, index_pattern="duplicates"),
    "corrupt_scales": Recipe(
        seed=5,
        n_q=3,
        heads=2,
        row_lengths=(80, 30, 50),
        cache_rows=128,
        corruptions=({"kind": "scale_not_pow2", "count": 4}, {"kind": "zero_scale", "count": 3}, {"kind": "scale_above_cap", "count": 3}),
    ),
    "nan_codes": Recipe(seed=6, n_q=2, heads=2, row_lengths=(40, 9), cache_rows=64, corruptions=({"kind": "nan_codes", "count": 2},)),
}


@pytest.mark.parametrize("scale_model", rows.SCALE_MODELS)
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_bound_chunk_equals_gather_chunk(name: str, scale_model: str) -> None:
    """gather_bound_chunk's tensors are gather_chunk's (rows without a key dropped), bit for bit."""
    p = materialize(RECIPES[name])
    start, length = rows.row_bounds(p.indptr)
    for plan in rows.chunk_plan(length, key_budget=150):
        old = rows.gather_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=p.has_invalid, scale_model=scale_model)
        new = rows.gather_bound_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=p.has_invalid, scale_model=scale_model)
        has_key = old.valid.any(dim=1)
        if not bool(has_key.any()):
            assert new is None
            continue
        assert new is not None
        assert torch.equal(new.rows, old.rows[has_key])
        assert torch.equal(new.valid, old.valid[has_key])
        assert new.all_valid == bool(old.valid[has_key].all())
        assert new.keys.is_contiguous() and new.values.stride(-1) == 1  # values may be K's latent part (a view)
        if scale_model == "stored":  # V is K's latent part: decoded once, shared
            assert new.values.data_ptr() == new.keys.data_ptr()
        assert same_bits(new.keys, torch.cat((old.k_latent, old.rope), dim=-1)[has_key])
        assert same_bits(new.values, old.latent[has_key])
        assert same_bits(new.codes, old.codes[has_key])
        assert same_bits(new.scales, old.scales[has_key])
        assert torch.equal(new.code_index, new.codes.reshape(-1).to(torch.int32))


@pytest.mark.parametrize("name", ["plain", "invalid_poison", "duplicates"])
def test_gather_keys_equals_gather_chunk(name: str) -> None:
    """The reference's key block (f64 table lookup) holds gather_chunk's keys, bit for bit."""
    p = materialize(RECIPES[name])
    start, length = rows.row_bounds(p.indptr)
    for plan in rows.chunk_plan(length, key_budget=150):
        old = rows.gather_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=p.has_invalid)
        new = rows.gather_keys(plan, start, length, p.indices, p.kv_cache, has_invalid=p.has_invalid)
        assert torch.equal(new.valid, old.valid)
        assert same_bits(new.keys, torch.cat((old.k_latent, old.rope), dim=-1))


def test_e4m3_decoders_match_the_table() -> None:
    """emulated.decode_codes is the f64 table gather; the torch key decode's code table
    (e4m3 -> f16 -> f64) holds torch's e4m3 -> f32 cast's bits, NaN codes included."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    shaped = codes.repeat(3, 7).view(3, 7, 2, 128)[:, 1:5]  # non-contiguous
    assert same_bits(emulated.decode_codes(shaped), e4m3_table("cpu", torch.float64)[shaped.to(torch.int64)])
    # the f16 decode (qk_scores) widens to the f64 decode's bits, NaN codes included
    assert same_bits(emulated.decode_codes(shaped, torch.float16).to(torch.float64), emulated.decode_codes(shaped))
    cast = codes.view(torch.float8_e4m3fn).to(torch.float32).to(torch.float64)
    assert same_bits(key_decode.code_table(torch.device("cpu")), cast)
    finite = (codes & 0x7F) != 0x7F
    assert same_bits(cast[finite], e4m3_table("cpu", torch.float64)[finite])


def test_integer_code_sum_is_the_f64_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    """sum_i |code_i| from integers (int32 and, for long rows, int64) is the f64 table sum."""
    p = materialize(RECIPES["duplicates"])
    start, length = rows.row_bounds(p.indptr)
    profile = load_profile("gfx950")
    rep = qrep.fp8_hi_lo(p.q)
    rep32 = dataclasses.replace(rep, terms=rep.terms.to(torch.float32))
    table = bound._abs_code_table(torch.device("cpu"))
    for limit in (bound._INT32_CODE_SUM_KEYS, 1):
        monkeypatch.setattr(bound, "_INT32_CODE_SUM_KEYS", limit)
        for plan in rows.chunk_plan(length):
            chunk = rows.gather_bound_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=False)
            assert chunk is not None
            stats = bound._chunk_stats(chunk, length, profile, table, rep32, p.softmax_scale, ())
            direct = e4m3_table("cpu", torch.float64).abs()[chunk.codes.to(torch.int64)].sum(dim=1).unsqueeze(1)
            assert stats.abs_code_sum is not None and same_bits(stats.abs_code_sum, direct)


def test_f32_nonzero_count_is_the_f64_count() -> None:
    """The count of nonzero products by an f32 GEMM equals the f64 GEMM's."""
    p = materialize(Recipe(seed=7, n_q=3, heads=5, row_lengths=(100, 7, 60), cache_rows=128, q="zero_blocks", latent="zero_blocks"))
    start, length = rows.row_bounds(p.indptr)
    rep = qrep.fp8_hi_lo(p.q)
    for plan in rows.chunk_plan(length):
        chunk = rows.gather_bound_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=False)
        assert chunk is not None
        mask = (chunk.keys != 0).transpose(1, 2)
        f64 = torch.bmm(rep.terms[chunk.rows], mask.to(torch.float64))
        f32 = torch.bmm(rep.terms[chunk.rows].to(torch.float32), mask.to(torch.float32)).to(torch.float64)
        assert same_bits(f32, f64)
        assert float(f64.max()) > 0


def test_round_bf16_spacing_is_pow2() -> None:
    """round_bf16's directly built spacing gives round(y / s) * s with s = pow2(max(e, -125) - 8)."""
    exps = torch.arange(-1074, 1024, dtype=torch.float64)
    mant = torch.tensor([1.0, 1.00390625, 1.005859375, 1.5, 1.99609375, 1.998046875, 1.9999999])
    y = (mant.view(-1, 1) * torch.pow(2.0, exps).view(1, -1)).flatten()
    y = torch.cat(
        (y, -y, torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 2.0**-126, 2.0**-133, 1.7976931348623157e308]))
    )
    _, e = torch.frexp(y)
    spacing = pow2(e.clamp_min(-125) - 8)
    assert same_bits(bound.round_bf16(y), torch.round(y / spacing) * spacing)


def test_pairwise_output_casts_are_the_stacked_min_max() -> None:
    """output_interval_bound with two casts equals the stacked amin / amax formulation."""
    gen = torch.Generator().manual_seed(5)
    ref = torch.randn(4000, generator=gen, dtype=torch.float64) * torch.pow(2.0, torch.randint(-140, 130, (4000,), generator=gen))
    d_pre = ref.abs() * torch.rand(4000, generator=gen, dtype=torch.float64) * 2.0 ** torch.randint(-30, 3, (4000,), generator=gen)
    ref[:8] = torch.tensor([0.0, -0.0, 2.0**-140, -(2.0**-140), 1e38, -1e38, 3.4e38, 0.0])
    d_pre[:8] = torch.tensor([0.0, 0.0, 0.0, 2.0**-150, 1e30, 0.0, 1e37, float("inf")])
    casts = ("direct", "via_f32")
    lo, hi = ref - d_pre, ref + d_pre
    lows = torch.stack((bound.round_bf16(lo), bound.round_bf16(bound.round_f32(lo)))).amin(dim=0)
    highs = torch.stack((bound.round_bf16(hi), bound.round_bf16(bound.round_f32(hi)))).amax(dim=0)
    direct = torch.maximum(ref - lows, highs - ref)
    direct = torch.where(torch.isfinite(d_pre), direct, torch.full_like(direct, float("inf")))
    assert same_bits(bound.output_interval_bound(ref, d_pre, casts), direct)


@pytest.mark.parametrize("profile_name", ["gfx950", "bf16-q-bf16-p", "fp32"])
def test_skipped_masks_are_the_identity(profile_name: str) -> None:
    """An all-valid chunk judged through the masked code path gives the same bits."""
    p = materialize(Recipe(seed=8, n_q=3, heads=4, row_lengths=(96, 96, 96), cache_rows=256))
    start, length = rows.row_bounds(p.indptr)
    profile = load_profile(profile_name)
    rep = bound._representation(p.q, profile)
    rep32 = dataclasses.replace(rep, terms=rep.terms.to(torch.float32))
    table = bound._abs_code_table(torch.device("cpu"))
    q_err = bound._q_representation_error(p.q, rep, profile)
    (plan,) = rows.chunk_plan(length)
    chunk = rows.gather_bound_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=False)
    assert chunk is not None and chunk.all_valid
    q_refs = (rep.q_hat, p.q.to(torch.float64))
    fast = bound._chunk_stats(chunk, length, profile, table, rep32, p.softmax_scale, q_refs)
    chunk = rows.gather_bound_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=False)  # keys were consumed
    assert chunk is not None
    slow = bound._chunk_stats(dataclasses.replace(chunk, all_valid=False), length, profile, table, rep32, p.softmax_scale, q_refs)
    for field in dataclasses.fields(fast):
        a, b = getattr(fast, field.name), getattr(slow, field.name)
        pairs = [(a, b)]
        if isinstance(a, tuple):  # the modes' stacked scores (sum p |v| among them), one entry per group of modes
            pairs = [(getattr(x, f.name), getattr(y, f.name)) for x, y in zip(a, b, strict=True) for f in dataclasses.fields(x)]
        for x, y in pairs:
            if isinstance(x, torch.Tensor):
                assert same_bits(x, y), field.name
    errs = (None, q_err)
    for a, b in zip(
        bound._chunk_bound(fast, fast.scores[0], errs, p.softmax_scale, profile),
        bound._chunk_bound(slow, slow.scores[0], errs, p.softmax_scale, profile),
        strict=True,
    ):
        assert same_bits(a, b)


@pytest.mark.parametrize("name", ["plain", "invalid_poison", "all_invalid_row"])
def test_one_mode_alone_equals_both_modes(name: str) -> None:
    """Sharing a chunk's statistics between the modes changes neither mode's bits."""
    p = materialize(RECIPES[name])
    profile = load_profile("gfx950")
    args = p.args
    both = bound.evaluate_modes(*args, profile=profile, has_invalid=p.has_invalid, key_budget=150)
    for mode in bound.MODES:
        alone = bound.evaluate_modes(*args, profile=profile, modes=(mode,), has_invalid=p.has_invalid, key_budget=150)[mode]
        for field in ("out", "lse", "out_bound", "lse_bound", "window"):
            assert same_bits(getattr(alone, field), getattr(both[mode], field)), (mode, field)
    # rows without a valid key: out 0, lse -inf, bounds 0
    empty = ~torch.isfinite(both["exact-steps"].lse[:, 0])
    for ev in both.values():
        assert bool((ev.out[empty] == 0).all()) and bool((ev.out_bound[empty] == 0).all()) and bool((ev.lse_bound[empty] == 0).all())


def test_v_range_of_a_ragged_chunk_is_the_masked_max_minus_min() -> None:
    """The valid slots' range per dim (masked slots replaced by -inf / +inf through an added
    bias) is the masked_fill formulation's, bit for bit (negative maxima and signed zeros)."""
    p = materialize(Recipe(seed=12, n_q=4, heads=2, row_lengths=(90, 3, 40, 1), cache_rows=64, latent="zero_blocks"))
    start, length = rows.row_bounds(p.indptr)
    profile = load_profile("gfx950")
    rep = qrep.fp8_hi_lo(p.q)
    rep32 = dataclasses.replace(rep, terms=rep.terms.to(torch.float32))
    (plan,) = rows.chunk_plan(length)
    chunk = rows.gather_bound_chunk(plan, start, length, p.indices, p.kv_cache, has_invalid=False)
    assert chunk is not None and not chunk.all_valid
    mask = chunk.valid.unsqueeze(-1)
    values = chunk.values
    direct = (values.masked_fill(~mask, float("-inf")).amax(dim=1) - values.masked_fill(~mask, float("inf")).amin(dim=1)).unsqueeze(1)
    # short rows have dims whose valid values are all negative: the masked slots' +0 must not count
    assert bool((values.masked_fill(~mask, float("-inf")).amax(dim=1) != values.amax(dim=1)).any())
    stats = bound._chunk_stats(chunk, length, profile, bound._abs_code_table(torch.device("cpu")), rep32, p.softmax_scale, ())
    assert same_bits(stats.v_range, direct)
