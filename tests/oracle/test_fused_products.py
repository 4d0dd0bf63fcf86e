"""oracle.fused_products: the kernels (run by Triton's CPU interpreter where Triton is installed)
give the bmm's of the torch-decoded keys within the reference's rounding (gamma_m(2^-53) sum
|terms|), exactly on inputs whose sums are exact, NaN where the bmm's give NaN; reference()
through them agrees with the default path; the setting and the device gate keep the bmm's
elsewhere (the CPU default untouched).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kernel import fastpath
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES
from oracle import fused_products as fp
from oracle import key_decode, rows
from oracle.accumulation import gamma
from oracle.reference import block_reference, reference
from strategies.materialize import materialize
from strategies.recipe import Recipe
from tests.recipes import RAGGED_OFFSET, SCATTERED_INVALID

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
CPU = torch.device("cpu")
U64 = 2.0**-53


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def products_of(flat: torch.Tensor) -> fp.Products:
    return fp.Products(flat, key_decode.code_table(flat.device))


def test_gate_off_cuda_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda0 = torch.device("cuda", 0)
    monkeypatch.delenv(fastpath.SETTING, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fastpath.forget()
    assert fastpath.choose(fp.FAST_PATH, CPU) is None  # the CPU default: the bmm's, even under the interpreter
    checked: list[str] = []
    monkeypatch.setattr(fp, "_checked", lambda device, variant: checked.append(variant) or True)
    monkeypatch.setattr(fp, "_dmma_supported", lambda device: device.type == "cuda")
    assert fastpath.choose(fp.FAST_PATH, cuda0) == "dmma"  # the default on CUDA: DMMA (where supported)
    monkeypatch.setattr(fp, "_dmma_supported", lambda device: False)
    assert fastpath.choose(fp.FAST_PATH, cuda0) is None  # unsupported: the bmm's, silently
    monkeypatch.setenv(fastpath.SETTING, "oracle.products=dmma")
    with pytest.warns(UserWarning, match="DMMA products need"):
        assert fastpath.choose(fp.FAST_PATH, cuda0) is None
    monkeypatch.setenv(fastpath.SETTING, "oracle.products=off")
    assert fastpath.choose(fp.FAST_PATH, cuda0) is None
    monkeypatch.setenv(fastpath.SETTING, "oracle.products=triton")
    assert fastpath.choose(fp.FAST_PATH, CPU) == ("triton" if importlib.util.find_spec("triton") else None)  # the interpreter
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert fastpath.choose(fp.FAST_PATH, CPU) is None  # compiled Triton does not run on the CPU
    assert checked == ["dmma", "triton"][: 2 if importlib.util.find_spec("triton") else 1]
    monkeypatch.setenv(fastpath.SETTING, "oracle.products=yes")
    with pytest.raises(ValueError, match="oracle.products='yes'"):
        fastpath.choose(fp.FAST_PATH, CPU)
    fastpath.forget()


def test_probe_covers_the_classes() -> None:
    flat, q, rows_, slots = fp.probe_problem(CPU)
    assert flat.shape == (2048, RECORD_BYTES) and q.shape[2] == HEAD_DIM
    used = slots[slots >= 0]
    assert torch.equal(torch.unique(used[used < 1024]), torch.arange(1024))  # every special record
    assert bool((slots < 0).all(dim=1).any())  # rows without a key
    assert bool(((slots < 0).any(dim=1) & (slots >= 0).any(dim=1)).any())  # masked slots in keyed rows
    keys = fp._decode_torch(flat, slots)
    assert bool(keys.isnan().any()) and bool(keys.isinf().any())
    plain = ((slots >= 1024) | (slots < 0)).all(dim=1)
    assert bool(torch.isfinite(keys[plain]).all())  # rows whose results test the rounding bound


@needs_triton
@pytest.mark.parametrize("heads", [1, 5, 16, 40])
def test_self_check_passes(interpreter: None, heads: int) -> None:
    res = fp.self_check(CPU, heads=heads)
    assert res.ok, res


@needs_triton
def test_self_check_catches_a_wrong_kernel(interpreter: None) -> None:
    """A decode that differs (a wrong code table: every value times 1 + 2^-20) fails the check."""
    flat, *_ = fp.probe_problem(CPU)
    table = key_decode.code_table(CPU) * (1 + 2.0**-20)
    res = fp.self_check(CPU, fp.Products(flat, table))
    assert not res.ok


def random_problem(
    seed: int, heads: int, n_rows: int, width: int, exact: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(flat, q_ref, rows, slots): records of random codes (no NaN code) and scales; exact: codes
    of small integers (|value| <= 8, multiples of 1), scales powers of two, rope small integers
    and q small integers, so every sum is exact in any order."""
    gen = torch.Generator().manual_seed(seed)
    n = 300
    if exact:
        ints = torch.randint(-8, 9, (n, LATENT_DIM), generator=gen).to(torch.float32)
        codes = ints.to(torch.float8_e4m3fn).view(torch.uint8)
        scales = torch.pow(2.0, torch.randint(-3, 4, (n, 4), generator=gen).to(torch.float32))
        rope = torch.randint(-16, 17, (n, 64), generator=gen).to(torch.bfloat16)
        q = torch.randint(-8, 9, (n_rows + 3, heads, HEAD_DIM), generator=gen).to(torch.float64)
    else:
        codes = torch.randint(0, 256, (n, LATENT_DIM), generator=gen, dtype=torch.int32)
        codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes).to(torch.uint8)
        scales = torch.rand(n, 4, generator=gen) * torch.pow(2.0, torch.randint(-10, 10, (n, 4), generator=gen).to(torch.float32))
        rope = torch.randn(n, 64, generator=gen).to(torch.bfloat16)
        q = torch.randn(n_rows + 3, heads, HEAD_DIM, generator=gen, dtype=torch.float64).to(torch.bfloat16).to(torch.float64)
    flat = torch.cat((codes, scales.view(torch.uint8).view(n, 16), rope.view(torch.uint8).view(n, 128)), dim=1).contiguous()
    slots = torch.randint(0, n, (n_rows, width), generator=gen)
    slots[torch.rand(n_rows, width, generator=gen) < 0.2] = -1
    slots[-1] = -1
    rows_ = torch.randperm(n_rows + 3, generator=gen)[:n_rows]
    return flat, q, rows_, slots


@needs_triton
@pytest.mark.parametrize(("heads", "width"), [(3, 70), (16, 33), (20, 100)])
def test_products_within_the_rounding_bound(interpreter: None, heads: int, width: int) -> None:
    flat, q, rows_, slots = random_problem(heads, heads, 6, width, exact=False)
    products = products_of(flat)
    keys = fp._decode_torch(flat, slots)
    want = torch.bmm(q[rows_], keys.transpose(1, 2))
    got = products.scores(q, rows_, slots, fp.Shapes(score_keys=32, score_dims=32))
    bound = gamma(HEAD_DIM, U64) * torch.bmm(q[rows_].abs(), keys.abs().transpose(1, 2))
    assert bool(((got - want).abs() <= bound).all())
    w = torch.rand(6, heads, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want_o = torch.bmm(w, keys[..., :LATENT_DIM])
    got_o = products.weighted(w, slots, fp.Shapes(out_keys=16, out_cols=64))
    bound_o = gamma(width, U64) * torch.bmm(w, keys[..., :LATENT_DIM].abs())
    assert bool(((got_o - want_o).abs() <= bound_o).all())
    assert torch.equal(got_o[-1], torch.zeros_like(got_o[-1]))  # a row without a key: 0


@needs_triton
@pytest.mark.parametrize("shapes", [fp.Shapes(), fp.Shapes(score_keys=16, score_dims=32, out_keys=16, out_cols=32, max_heads=16)])
def test_products_exact_on_exact_inputs(interpreter: None, shapes: fp.Shapes) -> None:
    """Small-integer q, codes and rope under power-of-two scales: every sum is exact, so the
    kernels give the bmm's bits (any summation order, any launch shape)."""
    heads = 18  # two head blocks with max_heads 16
    flat, q, rows_, slots = random_problem(7, heads, 5, 50, exact=True)
    products = products_of(flat)
    keys = fp._decode_torch(flat, slots)
    want = torch.bmm(q[rows_], keys.transpose(1, 2))
    got = products.scores(q, rows_, slots, shapes)
    assert torch.equal(got, want)
    w = torch.randint(-4, 5, (5, heads, 50), generator=torch.Generator().manual_seed(2)).to(torch.float64)
    got_o = products.weighted(w.contiguous(), slots, shapes)
    assert torch.equal(got_o, torch.bmm(w, keys[..., :LATENT_DIM]))


@needs_triton
def test_masked_slots_never_read(interpreter: None) -> None:
    """Masked slots read nothing: a NaN record at KV row 0 (where the torch path's masked slots
    point) and at every masked position changes no result."""
    flat, q, rows_, slots = random_problem(9, 4, 4, 40, exact=True)
    flat[0, :LATENT_DIM] = 0x7F
    slots = torch.where(slots == 0, 1, slots)
    products = products_of(flat)
    keys = fp._decode_torch(flat, slots)
    assert torch.equal(products.scores(q, rows_, slots), torch.bmm(q[rows_], keys.transpose(1, 2)))


@needs_triton
@pytest.mark.parametrize(
    "recipe",
    [
        RAGGED_OFFSET,
        SCATTERED_INVALID,
        Recipe(seed=5, n_q=2, heads=16, row_lengths=(20, 0), cache_rows=64, invalid_pattern="all", invalid_permille=1000, has_invalid=True),
    ],
)
def test_reference_through_the_kernels(interpreter: None, monkeypatch: pytest.MonkeyPatch, recipe: Recipe) -> None:
    """reference() with the fused products (several chunks) agrees with the default path within
    f64 rounding (the two products' differences through the softmax), empty rows 0 / -inf exactly."""
    p = materialize(recipe, "cpu")
    args = p.args
    monkeypatch.delenv(fastpath.SETTING, raising=False)
    want = reference(*args, has_invalid=p.has_invalid, key_budget=100)
    monkeypatch.setenv(fastpath.SETTING, "oracle.products=triton")
    fastpath.forget()
    got = reference(*args, has_invalid=p.has_invalid, key_budget=100)
    fastpath.forget()
    assert torch.equal(got.lse.isinf(), want.lse.isinf()) and torch.equal(got.out[want.lse.isinf()], want.out[want.lse.isinf()])
    torch.testing.assert_close(got.out, want.out, rtol=0, atol=1e-12 * float(want.out.abs().max().clamp_min(1)))
    torch.testing.assert_close(got.lse, want.lse, rtol=1e-14, atol=1e-14)


@needs_triton
def test_block_reference_exact_scores_same_lse_bits(interpreter: None) -> None:
    """block_reference on exact scores (small-integer q and keys) gives the bmm path's lse bits
    (the softmax is shared) and its out within the weighted sum's rounding (exp weights are not
    small integers); a row without a key gives 0 / -inf."""
    flat, q, rows_, slots = random_problem(11, 3, 4, 30, exact=True)
    valid = slots >= 0
    keys = fp._decode_torch(flat, slots)
    kb = rows.KeyBlock(rows=rows_, valid=valid, keys=keys)
    sb = rows.KeyBlock(rows=rows_, valid=valid, keys=None, slots=slots)
    old_out, old_lse = block_reference(q, kb, 2.0**-12)
    new_out, new_lse = block_reference(q, sb, 2.0**-12, products_of(flat))
    assert torch.equal(old_lse.view(torch.int64), new_lse.view(torch.int64))
    values = keys[..., :LATENT_DIM].abs()
    z = torch.bmm(q[rows_], keys.transpose(1, 2)).mul_(2.0**-12).masked_fill_(~valid.unsqueeze(1), float("-inf"))
    p = torch.softmax(z, dim=-1).nan_to_num(0.0)
    bound = 2 * gamma(2 * 30 + 4, U64) * torch.bmm(p, values)
    assert bool(((new_out - old_out).abs() <= bound).all())
    assert torch.equal(new_out[-1], torch.zeros_like(new_out[-1])) and bool(new_lse[-1].eq(float("-inf")).all())
