"""The adapters to FlashMLA's sparse prefill (`flashmla-prefill`, with a fake `flash_mla` module so
it runs on any CPU) and to PyTorch's fused SDPA (`torch-sdpa`, real on the CPU), and their shared
gather / bf16 dequantisation step, against the float64 oracle.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from kernel.backends import flashmla_prefill, gathered, torch_sdpa
from kernel.record import LATENT_DIM, RECORD_BYTES, decode_records, encode_records
from kernel.registry import BackendUnavailable, resolve
from oracle.reference import reference


def make_problem(
    lengths: list[int], heads: int, *, seed: int = 0, rows: int = 300, negative_every: int = 0, writer: str = "pow2"
) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(rows, LATENT_DIM, generator=gen) * 2.0 ** torch.randint(-3, 4, (rows, 1), generator=gen)
    kv = encode_records(latent, torch.randn(rows, 64, generator=gen).to(torch.bfloat16), writer)  # type: ignore[arg-type]
    ptr = [0]
    for length in lengths:
        ptr.append(ptr[-1] + length)
    idx = torch.randint(0, rows, (max(ptr[-1], 0),), generator=gen, dtype=torch.int64).to(torch.int32)
    if negative_every:
        idx[::negative_every] = -1 - torch.arange(idx[::negative_every].numel(), dtype=torch.int32) % 3 * 7
    q = torch.randn(len(lengths), heads, 576, generator=gen).to(torch.bfloat16)
    return {"q": q, "kv_cache": kv, "indices": idx, "indptr": torch.tensor(ptr, dtype=torch.int32)}


def check_against_oracle(
    p: dict[str, Any], out: torch.Tensor, lse: torch.Tensor | None, scale: float, *, has_invalid: bool, out_tol: float, lse_tol: float
) -> None:
    ref = reference(p["q"], p["kv_cache"], p["indices"], p["indptr"], scale, has_invalid=has_invalid)
    empty = torch.isneginf(ref.lse)
    err = (out.to(torch.float64) - ref.out).abs()
    assert bool((err <= out_tol * (ref.out.abs() + ref.out.abs().amax(dim=-1, keepdim=True) * 2**-4) + 1e-30).all()), float(err.max())
    assert not bool(out[empty].any())
    if lse is not None:
        assert torch.equal(torch.isneginf(lse), empty)
        assert bool(((lse.to(torch.float64) - ref.lse)[~empty].abs() <= lse_tol * (1 + ref.lse[~empty].abs())).all())


# ------------------------------------------------------------------------------ gather / dequantise


@pytest.mark.parametrize("writer", ["pow2", "pow2-floor"])
def test_dequantise_bf16_is_exact_for_power_of_two_scales(writer: str) -> None:
    gen = torch.Generator().manual_seed(1)
    latent = torch.randn(64, LATENT_DIM, generator=gen) * 2.0 ** torch.randint(-12, 12, (64, 1), generator=gen)
    latent[3] = 0.0  # a zero tile (pow2-floor stores 2^-13)
    records = encode_records(latent, torch.randn(64, 64, generator=gen).to(torch.bfloat16), writer)  # type: ignore[arg-type]
    dec = decode_records(records)
    keys = gathered.dequantise_bf16(records)
    assert keys.dtype == torch.bfloat16 and keys.shape == (64, 576)
    assert torch.equal(keys[:, :LATENT_DIM].double(), dec.latent)
    assert torch.equal(keys[:, LATENT_DIM:].double(), dec.rope)


def test_dequantise_bf16_keeps_nan_codes() -> None:
    records = encode_records(torch.ones(2, LATENT_DIM), torch.zeros(2, 64, dtype=torch.bfloat16), "pow2")
    records[1, 7] = 0x7F
    keys = gathered.dequantise_bf16(records)
    assert bool(keys[1, 7].isnan()) and not bool(keys[0].isnan().any())


def test_gather_rows_masks_negatives_and_zeroes_empty_slots() -> None:
    p = make_problem([3, 0, 70, -2, 3], 2, negative_every=4)
    p["kv_cache"][0, :512] = 0x7F  # NaN codes in row 0: an empty slot must not carry them
    rows = gathered.gather_rows(p["indices"], p["indptr"], p["kv_cache"], multiple=64)
    assert rows.width == 128 and rows.keys.shape == (5, 128, 576)
    ptr = p["indptr"].tolist()
    for q in range(5):
        length = max(ptr[q + 1] - ptr[q], 0)
        entries = p["indices"][ptr[q] : ptr[q] + length]
        want = torch.zeros(128, dtype=torch.bool)
        want[:length] = entries >= 0
        assert torch.equal(rows.valid[q], want)
        assert not bool(rows.keys[q][~want].any()) and not bool(rows.keys[q][~want].isnan().any())
    assert rows.lengths.tolist() == [3, 0, 70, 0, 3]


# ------------------------------------------------------------------------------ flashmla-prefill (fake kernel)


class FakePrefill(types.ModuleType):
    """Stands in for `flash_mla`: checks what the SM90 sparse prefill checks, records each call and
    returns the float64 softmax over indices[:topk_length] (-1 and >= s_kv masked), rounded like
    the kernel: out bf16 [s_q, h_q, 512], max_logits, lse f32 [s_q, h_q] with +inf for no key."""

    def __init__(self) -> None:
        super().__init__("flash_mla")
        self.calls: list[dict[str, Any]] = []

    def has_legacy(self) -> bool:
        return True

    def flash_mla_sparse_fwd(
        self, q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, use_legacy=False, return_log2_lse=None
    ):  # type: ignore[no-untyped-def]
        self.calls.append(
            {"q": q, "kv": kv, "indices": indices, "topk_length": topk_length, "sm_scale": sm_scale, "use_legacy": use_legacy}
        )
        s_q, h_q, d = q.shape
        assert use_legacy and d_v == 512 and q.dtype == torch.bfloat16 and d == 576 and h_q in (64, 128) and q.is_contiguous()
        assert kv.dtype == torch.bfloat16 and kv.dim() == 3 and kv.shape[1:] == (1, 576)
        assert indices.dtype == torch.int32 and indices.shape[:2] == (s_q, 1) and indices.shape[2] % 128 == 0
        assert topk_length is not None and topk_length.dtype == torch.int32 and topk_length.shape == (s_q,)
        assert sm_scale > 0
        idx = indices[:, 0].to(torch.int64)
        width = idx.shape[1]
        live = (torch.arange(width) < topk_length.to(torch.int64).unsqueeze(1)) & (idx >= 0) & (idx < kv.shape[0])
        keys = kv[:, 0].double()[idx.clamp(0, kv.shape[0] - 1)]  # [s_q, W, 576]
        s = torch.einsum("qhd,qkd->qhk", q.double(), keys) * sm_scale
        s = s.masked_fill(~live.unsqueeze(1), float("-inf"))
        peak = s.amax(-1, keepdim=True)
        w = torch.exp(s - peak.nan_to_num(neginf=0.0))
        total = w.sum(-1, keepdim=True)
        out = torch.einsum("qhk,qkd->qhd", w, keys[..., :512]) / total
        lse = (peak + torch.log(total)).squeeze(-1)
        empty = ~live.any(-1)
        out[empty] = 0
        lse = torch.where(empty.unsqueeze(-1), float("inf"), lse)
        return out.to(torch.bfloat16), peak.squeeze(-1).float(), lse.float()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakePrefill:
    module = FakePrefill()
    monkeypatch.setitem(sys.modules, "flash_mla", module)
    return module


@pytest.mark.parametrize("heads", [1, 5, 16])
@pytest.mark.parametrize("scale", [0.06, -0.04, 0.0])
def test_prefill_adapter_against_oracle(fake: FakePrefill, heads: int, scale: float) -> None:
    p = make_problem([0, 1, 127, 128, 129, 300, 2], heads, seed=heads)
    out, lse = flashmla_prefill.run_flashmla_prefill(**p, softmax_scale=scale, return_lse=True)
    call = fake.calls[0]
    assert call["q"].shape == (7, 64, 576) and not bool(call["q"][:, heads:].any())
    assert call["indices"].shape[2] % 128 == 0 and call["topk_length"].tolist() == [0, 1, 127, 128, 129, 300, 2]
    assert out.shape == (7, heads, LATENT_DIM) and out.is_contiguous() and lse is not None
    check_against_oracle(p, out, lse, scale, has_invalid=False, out_tol=2**-7, lse_tol=1e-6)


def test_prefill_adapter_has_invalid_and_strided_out(fake: FakePrefill) -> None:
    p = make_problem([10, 65, 3, 0, 128], 4, seed=3, negative_every=3)
    p["indices"][int(p["indptr"][2]) : int(p["indptr"][3])] = -5  # a row of only invalid entries
    buf = torch.full((5, 6, LATENT_DIM), 7.0, dtype=torch.bfloat16)
    out_view = buf[:, 1:5]
    out, lse = flashmla_prefill.run_flashmla_prefill(**p, softmax_scale=0.05, has_invalid=True, return_lse=True, out=out_view)
    assert out is out_view and bool((buf[:, 0] == 7).all()) and bool((buf[:, 5] == 7).all())
    assert lse is not None and bool(torch.isneginf(lse[2]).all()) and bool(torch.isneginf(lse[3]).all())
    sent = fake.calls[0]["indices"]
    assert int(sent.min()) == -1
    check_against_oracle(p, out, lse, 0.05, has_invalid=True, out_tol=2**-7, lse_tol=1e-6)


def test_prefill_adapter_without_lse_and_no_rows(fake: FakePrefill) -> None:
    p = make_problem([5], 2)
    out, lse = flashmla_prefill.run_flashmla_prefill(**p, softmax_scale=0.1)
    assert lse is None and out.shape == (1, 2, LATENT_DIM)
    empty = make_problem([], 2)
    out0, lse0 = flashmla_prefill.run_flashmla_prefill(**empty, softmax_scale=0.1, return_lse=True)
    assert out0.shape == (0, 2, LATENT_DIM) and lse0 is not None and lse0.shape == (0, 2)


def test_prefill_backend_unavailable_without_hopper() -> None:
    if torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] == 9:
        pytest.skip("a Hopper GPU is present")
    with pytest.raises(BackendUnavailable, match="flashmla-prefill"):
        resolve("flashmla-prefill")


# ------------------------------------------------------------------------------ torch-sdpa (real, CPU)


def test_torch_sdpa_backend_declarations() -> None:
    backend = resolve("torch-sdpa")
    assert backend.name == "torch-sdpa" and backend.profile.endswith("torch-sdpa-mem-eff.toml")
    assert "cpu" in backend.devices and "cuda" in backend.devices and backend.accepts_out
    assert backend.bounded_index_reads is False


@pytest.mark.parametrize("scale", [0.05, -0.03, 0.0])
def test_torch_sdpa_against_oracle(scale: float) -> None:
    p = make_problem([5, 0, 70, 1, 130, 64], 7, seed=2, negative_every=5)
    out, lse = torch_sdpa.run_torch_sdpa(**p, softmax_scale=scale, has_invalid=True, return_lse=True)
    assert out.shape == (6, 7, LATENT_DIM) and out.dtype == torch.bfloat16
    assert lse is not None and lse.dtype == torch.float32
    check_against_oracle(p, out, lse, scale, has_invalid=True, out_tol=2**-6, lse_tol=2**-14)


def test_torch_sdpa_nan_row_zero_and_strided_out() -> None:
    p = make_problem([3, 0, 40], 3, seed=4)
    p["kv_cache"][0, :RECORD_BYTES] = 0xFF  # row 0 all NaN codes and NaN scales, never referenced
    p["indices"].clamp_(min=1)
    buf = torch.zeros(3, 6, LATENT_DIM, dtype=torch.bfloat16)
    out, lse = torch_sdpa.run_torch_sdpa(**p, softmax_scale=0.07, return_lse=True, out=buf[:, ::2])
    assert not bool(out.isnan().any()) and lse is not None and not bool(lse.isnan().any())
    check_against_oracle(p, out, lse, 0.07, has_invalid=False, out_tol=2**-6, lse_tol=2**-14)
