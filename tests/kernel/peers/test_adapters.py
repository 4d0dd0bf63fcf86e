"""The adapters to FlashMLA's sparse prefill (`flashmla-prefill`, with a fake `flash_mla` module so
it runs on any CPU) and to PyTorch's fused SDPA (`torch-sdpa`, real on the CPU), and their shared
gather / bf16 dequantisation step, against the float64 oracle.
"""

from __future__ import annotations

import gc
import math
import sys
import types
from functools import partial
from typing import Any

import pytest
import torch

from conformance.tools.op_count import SCALAR_READS, OpCounter
from kernel import engines
from kernel.peers import dequant_cache, flashmla_prefill, plumbing, protocol, sglang_decode, torch_sdpa, vllm_decode, vllm_sparse
from kernel.peers import keys as peer_keys
from kernel.peers.dequant_cache import DequantCache, dequantise_whole
from kernel.peers.flashmla import FlashMLAEngine
from kernel.peers.keys import KeptKeys
from kernel.peers.plumbing import LayoutCache
from kernel.peers.protocol import CallArgs, backend_from_adapter, run_peer
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
    keys = peer_keys.dequantise_bf16(records)
    assert keys.dtype == torch.bfloat16 and keys.shape == (64, 576)
    assert torch.equal(keys[:, :LATENT_DIM].double(), dec.latent)
    assert torch.equal(keys[:, LATENT_DIM:].double(), dec.rope)


def test_dequantise_bf16_keeps_nan_codes() -> None:
    records = encode_records(torch.ones(2, LATENT_DIM), torch.zeros(2, 64, dtype=torch.bfloat16), "pow2")
    records[1, 7] = 0x7F
    keys = peer_keys.dequantise_bf16(records)
    assert bool(keys[1, 7].isnan()) and not bool(keys[0].isnan().any())


def test_gather_rows_masks_negatives_and_zeroes_empty_slots() -> None:
    p = make_problem([3, 0, 70, -2, 3], 2, negative_every=4)
    p["kv_cache"][0, :512] = 0x7F  # NaN codes in row 0: an empty slot must not carry them
    rows = peer_keys.gather_rows(p["indices"], p["indptr"], p["kv_cache"], multiple=64)
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


def _engine(name: str, fake: Any) -> Any:
    """The adapter's engine around a fake kernel module (the reader too, for sglang-decode)."""
    if name == "flashmla-prefill":
        return FlashMLAEngine(fake)
    if name == "sglang-decode":
        return sglang_decode.SglangEngine(fake, fake)
    if name == "vllm-decode":
        return vllm_decode.VllmDecodeEngine(fake, 132)
    return vllm_sparse.VllmSparseEngine(fake)


ADAPTERS: dict[str, Any] = {
    "flashmla-prefill": flashmla_prefill.ADAPTER,
    "sglang-decode": sglang_decode.ADAPTER,
    "vllm-decode": vllm_decode.ADAPTER,
    "vllm-sparse": vllm_sparse.ADAPTER,
}


def _run(name: str, fake: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The adapter's contract call (kernel.peers.protocol.run_peer) on a fake kernel module."""
    return run_peer(ADAPTERS[name], *args, engine=_engine(name, fake), **kwargs)


@pytest.mark.parametrize("heads", [1, 5, 16])
@pytest.mark.parametrize("scale", [0.06, -0.04, 0.0])
def test_prefill_adapter_against_oracle(fake: FakePrefill, heads: int, scale: float) -> None:
    p = make_problem([0, 1, 127, 128, 129, 300, 2], heads, seed=heads)
    out, lse = _run("flashmla-prefill", fake, **p, softmax_scale=scale, return_lse=True)
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
    out, lse = run_peer(
        flashmla_prefill.ADAPTER, **p, engine=FlashMLAEngine(fake), softmax_scale=0.05, has_invalid=True, return_lse=True, out=out_view
    )
    assert out is out_view and bool((buf[:, 0] == 7).all()) and bool((buf[:, 5] == 7).all())
    assert lse is not None and bool(torch.isneginf(lse[2]).all()) and bool(torch.isneginf(lse[3]).all())
    sent = fake.calls[0]["indices"]
    assert int(sent.min()) == -1
    check_against_oracle(p, out, lse, 0.05, has_invalid=True, out_tol=2**-7, lse_tol=1e-6)


def test_prefill_adapter_without_lse_and_no_rows(fake: FakePrefill) -> None:
    p = make_problem([5], 2)
    out, lse = _run("flashmla-prefill", fake, **p, softmax_scale=0.1)
    assert lse is None and out.shape == (1, 2, LATENT_DIM)
    empty = make_problem([], 2)
    out0, lse0 = _run("flashmla-prefill", fake, **empty, softmax_scale=0.1, return_lse=True)
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
    # the CPU path is another kernel than the one the profile is derived for: not offered to the suite
    assert backend.devices == ("cuda",) and backend.accepts_out
    assert backend.bounded_index_reads is False


@pytest.mark.parametrize("scale", [0.05, -0.03, 0.0])
def test_torch_sdpa_against_oracle(scale: float) -> None:
    p = make_problem([5, 0, 70, 1, 130, 64], 7, seed=2, negative_every=5)
    out, lse = run_peer(torch_sdpa.ADAPTER, **p, softmax_scale=scale, has_invalid=True, return_lse=True)
    assert out.shape == (6, 7, LATENT_DIM) and out.dtype == torch.bfloat16
    assert lse is not None and lse.dtype == torch.float32
    check_against_oracle(p, out, lse, scale, has_invalid=True, out_tol=2**-6, lse_tol=2**-14)


def test_torch_sdpa_nan_row_zero_and_strided_out() -> None:
    p = make_problem([3, 0, 40], 3, seed=4)
    p["kv_cache"][0, :RECORD_BYTES] = 0xFF  # row 0 all NaN codes and NaN scales, never referenced
    p["indices"].clamp_(min=1)
    buf = torch.zeros(3, 6, LATENT_DIM, dtype=torch.bfloat16)
    out, lse = run_peer(torch_sdpa.ADAPTER, **p, softmax_scale=0.07, return_lse=True, out=buf[:, ::2])
    assert not bool(out.isnan().any()) and lse is not None and not bool(lse.isnan().any())
    check_against_oracle(p, out, lse, 0.07, has_invalid=False, out_tol=2**-6, lse_tol=2**-14)


# ------------------------------------------------------------------------------ sglang / vLLM Triton kernels (fakes)
#
# Each fake stands in for the engine's module on the CPU: it checks the argument layout the real
# kernel relies on, computes in float64 what the kernel computes (the same split rule, per-split
# lse, the kernel's own empty-row result: NaN from 0 / 0, or vLLM sparse's -1e30 sentinel) and
# leaves what the kernel leaves unwritten as NaN, so the adapters' mapping is what is tested.


def _softmax_rows(q: torch.Tensor, keys: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(o [H, 512], lse [H]) in float64 of one row: q [H, 576], keys [n, 576] (n >= 1)."""
    s = (q.double() @ keys.double().T) * scale
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[:, None]) @ keys.double()[:, :LATENT_DIM], lse


class FakeSglang(types.ModuleType):
    """sglang's decode_attention (decode_attention_fwd) and dequant_k_cache (dequantize_k_cache_paged)."""

    def __init__(self) -> None:
        super().__init__("fake_sglang")
        self.calls: list[dict[str, Any]] = []

    def dequantize_k_cache_paged(self, quant_k_cache, page_table_1_flattened):  # type: ignore[no-untyped-def]
        assert quant_k_cache.dtype == torch.float8_e4m3fn and quant_k_cache.shape[-1] == RECORD_BYTES
        assert page_table_1_flattened.dtype == torch.int32
        rec = quant_k_cache.view(-1, RECORD_BYTES).view(torch.uint8)[page_table_1_flattened.long()]
        codes = rec[:, :512].view(torch.float8_e4m3fn).float().view(-1, 4, 128)
        scales = rec[:, 512:528].contiguous().view(torch.float32).view(-1, 4, 1)
        latent = (codes * scales).view(-1, 512).to(torch.bfloat16)
        return torch.cat([latent, rec[:, 528:].contiguous().view(torch.bfloat16)], dim=1).view(-1, 1, 576)

    def decode_attention_fwd(  # type: ignore[no-untyped-def]
        self,
        q,
        k_buffer,
        v_buffer,
        o,
        kv_indptr,
        kv_indices,
        attn_logits,
        attn_lse,
        num_kv_splits,
        max_kv_splits,
        sm_scale,
        k_scale,
        v_scale,
    ):
        n, heads, dim = q.shape
        assert q.dtype == torch.bfloat16 and dim == 576 and heads >= 2 and q.stride(-1) == 1
        assert k_buffer.dtype == torch.bfloat16 and k_buffer.shape[1:] == (1, 576)
        assert v_buffer.data_ptr() == k_buffer.data_ptr() and v_buffer.shape[-1] == 512
        assert kv_indptr.dtype == torch.int32 and kv_indptr.shape == (n + 1,) and kv_indices.dtype == torch.int32
        assert attn_logits.shape == (n, heads, max_kv_splits, 512) and attn_lse.shape == (n, heads, max_kv_splits)
        assert num_kv_splits.dtype == torch.int32 and k_scale == 1.0 and v_scale == 1.0 and o.stride(-1) == 1
        self.calls.append({"heads": heads, "rows": n, "splits": int(max_kv_splits), "o_ptr": o.data_ptr(), "kv_rows": k_buffer.shape[0]})
        attn_lse.fill_(float("nan"))
        for r in range(n):
            start, stop = int(kv_indptr[r]), int(kv_indptr[r + 1])
            length, splits = stop - start, int(num_kv_splits[r])
            per = -(-(-(-length // splits)) // 32) * 32
            keys = k_buffer[kv_indices[start:stop].long(), 0]
            parts = []
            for s in range(splits):
                lo, hi = s * per, min(s * per + per, length)
                if hi > lo:
                    po, pl = _softmax_rows(q[r], keys[lo:hi], sm_scale)
                    attn_lse[r, :, s] = pl.float()
                    parts.append((po, pl))
            if not parts:
                o[r] = float("nan")
                continue
            lse = torch.logsumexp(torch.stack([pl for _, pl in parts]), dim=0)
            o[r] = sum(po * torch.exp(pl - lse)[:, None] for po, pl in parts).to(torch.bfloat16)


class FakeVllmDecode(types.ModuleType):
    """vLLM's triton_decode_attention (decode_attention_fwd, page size 1, is_mla)."""

    def __init__(self) -> None:
        super().__init__("fake_vllm_decode")
        self.calls: list[dict[str, Any]] = []

    def decode_attention_fwd(  # type: ignore[no-untyped-def]
        self,
        q,
        k_buffer,
        v_buffer,
        o,
        lse,
        req_to_token,
        b_seq_len,
        attn_logits,
        num_kv_splits,
        sm_scale,
        page_size=1,
        logit_cap=0.0,
        k_scale=None,
        v_scale=None,
        is_mla=False,
    ):
        n, heads, _ = q.shape
        assert heads >= 2 and is_mla and page_size == 1 and k_buffer.shape[1:] == (1, 1, 576) and v_buffer.shape[-1] == 512
        assert req_to_token.dtype == torch.int32 and req_to_token.shape[0] == n and b_seq_len.dtype == torch.int32
        assert attn_logits.shape == (n, heads, num_kv_splits, 513) and lse.dtype == torch.float32 and lse.stride() == (heads, 1)
        self.calls.append({"heads": heads, "splits": num_kv_splits, "width": req_to_token.shape[1], "kv_rows": k_buffer.shape[0]})
        for r in range(n):
            length = int(b_seq_len[r])
            if length == 0:
                o[r], lse[r] = float("nan"), float("-inf")
                continue
            po, pl = _softmax_rows(q[r], k_buffer[req_to_token[r, :length].long(), 0, 0], sm_scale)
            o[r], lse[r] = po.to(torch.bfloat16), pl.float()


class FakeVllmSparse(types.ModuleType):
    """vLLM's xpu_mla_sparse (triton_bf16_mla_sparse_interface)."""

    def __init__(self) -> None:
        super().__init__("fake_vllm_sparse")
        self.calls: list[dict[str, Any]] = []

    def triton_bf16_mla_sparse_interface(self, q, kv, indices, sm_scale, d_v=512, block_dpe=64):  # type: ignore[no-untyped-def]
        n, heads, _ = q.shape
        assert kv.shape[1:] == (1, 576) and indices.dtype == torch.int32 and indices.shape[:2] == (n, 1)
        assert indices.shape[2] % 16 == 0 and indices.is_contiguous()
        self.calls.append({"indices": indices.clone(), "rows": kv.shape[0], "kv_rows": kv.shape[0]})
        out = torch.zeros(n, heads, 512, dtype=q.dtype)
        lse = torch.zeros(n, heads, dtype=torch.float32)
        for r in range(n):
            idx = indices[r, 0].long()
            live = idx[(idx >= 0) & (idx < kv.shape[0])]
            if live.numel() == 0:
                lse[r] = math.log(2) * (-1e30 + math.log2(idx.numel()))
                continue
            po, pl = _softmax_rows(q[r], kv[live, 0], sm_scale)
            out[r], lse[r] = po.to(torch.bfloat16), pl.float()
        return out, lse.clone(), lse


@pytest.mark.parametrize("heads", [1, 3, 16])
@pytest.mark.parametrize("scale", [0.06, -0.04])
def test_sglang_decode_adapter_against_oracle(heads: int, scale: float) -> None:
    fake = FakeSglang()
    p = make_problem([0, 1, 31, 32, 33, 300, 2], heads, seed=heads, negative_every=7)
    p["indices"][3] = 10_000  # beyond the cache: masked by the adapter's gather
    out, lse = _run("sglang-decode", fake, **p, softmax_scale=scale, has_invalid=True, return_lse=True)
    assert fake.calls[0]["heads"] == max(heads, 2) and fake.calls[0]["splits"] == 8
    assert out.shape == (7, heads, LATENT_DIM) and lse is not None and lse.shape == (7, heads)
    p_ref = dict(p)
    p_ref["indices"] = torch.where(p["indices"] >= 300, -1, p["indices"])
    check_against_oracle(p_ref, out, lse, scale, has_invalid=True, out_tol=2**-7, lse_tol=1e-6)


def test_sglang_decode_writes_out_in_place() -> None:
    fake = FakeSglang()
    p = make_problem([5, 0, 70], 4, seed=5)
    buf = torch.full((3, 6, LATENT_DIM), 7.0, dtype=torch.bfloat16)
    view = buf[:, 1:5]
    out, lse = _run("sglang-decode", fake, **p, softmax_scale=0.05, out=view)
    assert out is view and fake.calls[0]["o_ptr"] == view.data_ptr() and lse is None
    assert bool((buf[:, 0] == 7).all()) and bool((buf[:, 5] == 7).all()) and not bool(view[1].any())
    check_against_oracle(p, out, None, 0.05, has_invalid=False, out_tol=2**-7, lse_tol=1e-6)


def test_sglang_split_lse_uses_only_splits_with_keys() -> None:
    counts = torch.tensor([0, 1, 32, 33, 300], dtype=torch.int32)
    att = torch.full((5, 2, 8), float("nan"))
    want = torch.full((5, 2), float("-inf"))
    for r, n in enumerate(counts.tolist()):
        per = -(-(-(-n // 8)) // 32) * 32 if n else 1
        used = [s for s in range(8) if s * per < n]
        for s in used:
            att[r, :, s] = torch.tensor([0.5 * s + r, -3.0 * s])
        if used:
            want[r] = torch.logsumexp(att[r][:, used], dim=-1)
    assert [len([s for s in range(8) if s * 32 < 33]), len([s for s in range(8) if s * 64 < 300])] == [2, 5]
    got = sglang_decode.split_lse(att, counts)
    assert torch.allclose(got, want, rtol=0, atol=1e-6) and bool(torch.isneginf(got[0]).all())


def test_int32_row_chunks_bound_the_slot_offsets() -> None:
    chunks = plumbing.int32_row_chunks(5000, 2048)
    assert chunks[0] == (0, 1820) and chunks[-1][1] == 5000 and all(b - a <= 1820 for a, b in chunks)
    assert all(b * 0 + (b - a) * 2048 * 576 < 2**31 for a, b in chunks)
    assert plumbing.int32_row_chunks(3, 64) == [(0, 3)]


@pytest.mark.parametrize("heads", [1, 9])
def test_vllm_decode_adapter_against_oracle(heads: int) -> None:
    fake = FakeVllmDecode()
    p = make_problem([4, 0, 600, 1, 65], heads, seed=11, negative_every=5)
    out, lse = _run("vllm-decode", fake, **p, softmax_scale=0.07, has_invalid=True, return_lse=True)
    call = fake.calls[0]
    assert call["heads"] == max(heads, 2) and call["width"] == 672 and call["splits"] == 1
    check_against_oracle(p, out, lse, 0.07, has_invalid=True, out_tol=2**-7, lse_tol=1e-6)


def test_vllm_split_rule() -> None:
    assert [vllm_decode.num_kv_splits(n, 132) for n in (1, 511, 1024, 2048, 3000, 1 << 20)] == [1, 1, 2, 4, 8, 264]


def test_vllm_sparse_adapter_against_oracle_and_bounds() -> None:
    fake = FakeVllmSparse()
    p = make_problem([3, 0, 17, 130, 16], 5, seed=12, negative_every=4)
    p["indices"][1] = 300  # == rows: masked by the adapter, as the kernel masks >= seq_kv
    buf = torch.zeros(5, 5, LATENT_DIM, dtype=torch.bfloat16)
    out, lse = _run("vllm-sparse", fake, **p, softmax_scale=0.05, has_invalid=True, return_lse=True, out=buf)
    sent = fake.calls[0]["indices"]
    assert out is buf and sent.shape == (5, 1, 176) and int(sent.min()) == -1 and int(sent.max()) < fake.calls[0]["rows"]
    assert lse is not None and bool(torch.isneginf(lse[1]).all())
    p_ref = dict(p)
    p_ref["indices"] = torch.where(p["indices"] >= 300, -1, p["indices"])
    check_against_oracle(p_ref, out, lse, 0.05, has_invalid=True, out_tol=2**-7, lse_tol=1e-6)


@pytest.mark.parametrize("name", ["sglang-decode", "vllm-decode", "vllm-sparse"])
def test_triton_peers_unavailable_without_cuda(name: str) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(BackendUnavailable, match=f"{name}: no CUDA device"):
        resolve(name)


def _write_tree(root: Any, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def engine_tree(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Package trees shaped like the H200 install: sglang whose __init__ and srt.utils need absent
    server packages, vLLM whose platform layer imports its absent compiled ops library."""
    _write_tree(
        tmp_path,
        {
            "sglang/__init__.py": "import pybase64_absent_here\n",
            "sglang/srt/utils/__init__.py": "import orjson_absent_here\n",
            "sglang/srt/layers/attention/triton_ops/decode_attention.py": (
                "from sglang.srt.utils import is_hip\n_is_hip = is_hip()\ndef decode_attention_fwd(*a):\n    return 'sglang-decode'\n"
            ),
            "sglang/srt/layers/attention/nsa/dequant_k_cache.py": "def dequantize_k_cache_paged(*a):\n    return 'reader'\n",
            "vllm/__init__.py": "",
            "vllm/platforms/__init__.py": "import vllm._C_stable_libtorch\ncurrent_platform = 'cuda'\n",
            "vllm/v1/attention/ops/xpu_mla_sparse.py": (
                "from vllm.platforms import current_platform\ndef triton_bf16_mla_sparse_interface(*a):\n    return current_platform\n"
            ),
            "vllm/v1/attention/ops/triton_decode_attention.py": (
                "from vllm.platforms import current_platform\ndef decode_attention_fwd(*a):\n    return 'vllm-decode'\n"
            ),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for key in [k for k in sys.modules if k.split(".")[0] in ("sglang", "vllm")]:
        monkeypatch.delitem(sys.modules, key)
    yield tmp_path
    for key in [k for k in sys.modules if k.split(".")[0] in ("sglang", "vllm")]:
        del sys.modules[key]


def test_engine_imports_take_the_fallback_routes(engine_tree: Any) -> None:
    kernel, route = engines.load_sglang(sglang_decode.KERNEL_MODULE, "sglang-decode")
    reader, route2 = engines.load_sglang(sglang_decode.READER_MODULE, "sglang-decode")
    assert kernel.decode_attention_fwd() == "sglang-decode" and reader.dequantize_k_cache_paged() == "reader"
    assert route.startswith("by path") and "pybase64_absent_here" in route and route2 == route
    assert engines.load_sglang(sglang_decode.KERNEL_MODULE, "sglang-decode")[0] is kernel
    sparse, vroute = engines.load_vllm(vllm_sparse.KERNEL_MODULE, "vllm-sparse")
    decode, vroute2 = engines.load_vllm(vllm_decode.KERNEL_MODULE, "vllm-decode")
    assert sparse.triton_bf16_mla_sparse_interface() == "cuda" and decode.decode_attention_fwd() == "vllm-decode"
    assert vroute.startswith("empty vllm._C_stable_libtorch") and "_C_stable_libtorch" in vroute
    assert vroute2 == "plain import"  # the stub stays in place for the next module


def test_engine_import_failure_names_the_backend(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_tree(tmp_path, {"vllm/__init__.py": "", "vllm/v1/attention/ops/xpu_mla_sparse.py": "raise RuntimeError('broken kernel file')\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    for key in [k for k in sys.modules if k.split(".")[0] == "vllm"]:
        monkeypatch.delitem(sys.modules, key)
    with pytest.raises(BackendUnavailable, match="vllm-sparse: cannot import vllm.v1.attention.ops.xpu_mla_sparse.*broken kernel file"):
        engines.load_vllm(vllm_sparse.KERNEL_MODULE, "vllm-sparse")
    for key in [k for k in sys.modules if k.split(".")[0] == "vllm"]:
        del sys.modules[key]


def test_row_chunks_give_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches split over row chunks (the int32 offset limit) address the right keys and outputs."""
    p = make_problem([3, 40, 0, 17, 65], 3, seed=21, negative_every=6)
    whole_s = _run("sglang-decode", FakeSglang(), **p, softmax_scale=0.05, return_lse=True, has_invalid=True)
    whole_v = _run("vllm-sparse", FakeVllmSparse(), **p, softmax_scale=0.05, return_lse=True, has_invalid=True)
    chunks = lambda n_q, width, row_elements=576: [(0, 2), (2, 3), (3, n_q)]  # noqa: E731
    monkeypatch.setattr(peer_keys, "int32_row_chunks", chunks)
    fake = FakeSglang()
    parts_s = _run("sglang-decode", fake, **p, softmax_scale=0.05, return_lse=True, has_invalid=True)
    sparse = FakeVllmSparse()
    parts_v = _run("vllm-sparse", sparse, **p, softmax_scale=0.05, return_lse=True, has_invalid=True)
    assert len(fake.calls) == 3 and len(sparse.calls) == 3
    for whole, parts in ((whole_s, parts_s), (whole_v, parts_v)):
        assert torch.equal(whole[0], parts[0]) and torch.equal(whole[1], parts[1])
    check_against_oracle(p, parts_s[0], parts_s[1], 0.05, has_invalid=True, out_tol=2**-7, lse_tol=1e-6)


def test_backends_built_around_the_engine_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The three Backend objects (as resolve() builds them on a GPU machine) with the engines'
    modules replaced by the fakes: declarations and one call each against the oracle."""
    fakes = {sglang_decode.KERNEL_MODULE: FakeSglang(), sglang_decode.READER_MODULE: FakeSglang()}
    fakes[vllm_decode.KERNEL_MODULE] = FakeVllmDecode()
    fakes[vllm_sparse.KERNEL_MODULE] = FakeVllmSparse()
    monkeypatch.setattr(protocol, "cuda_reason", lambda name: "")
    monkeypatch.setattr(sglang_decode, "load_sglang", lambda module, name: (fakes[module], "fake"))
    monkeypatch.setattr(vllm_decode, "load_vllm", lambda module, name: (fakes[module], "fake"))
    monkeypatch.setattr(vllm_sparse, "load_vllm", lambda module, name: (fakes[module], "fake"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(multi_processor_count=132))
    p = make_problem([7, 0, 90], 4, seed=31, negative_every=5)
    for adapter, invariant, bounded in (
        (sglang_decode.ADAPTER, True, False),
        (vllm_decode.ADAPTER, False, False),
        (vllm_sparse.ADAPTER, True, True),
    ):
        backend = backend_from_adapter(adapter)
        assert backend.devices == ("cuda",) and backend.max_heads == 16 and backend.accepts_out
        assert backend.batch_invariant is invariant and backend.bounded_index_reads is bounded
        assert str(backend.profile).endswith(".toml") and backend.limits
        assert not backend.supports(**p, softmax_scale=0.05)  # a CPU call: the backend runs on CUDA only
        out, lse = backend(**p, softmax_scale=0.05, has_invalid=True, return_lse=True)
        check_against_oracle(p, out, lse, 0.05, has_invalid=True, out_tol=2**-7, lse_tol=1e-6)


# ------------------------------------------------------------------------------ kept cache (Triton peers)
#
# The backends keep the whole cache dequantised per cache tensor (kernel.peers.dequant_cache;
# dequant_cache.DequantCache with sglang's reader) and the kernels read it at the rows' own cache rows:
# every call must give the bits of the per-slot path (dequant_cache=None) on the cache as it is now.

TRITON_PEERS = ("sglang-decode", "vllm-decode", "vllm-sparse")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def _fake_for(name: str) -> Any:
    return {"sglang-decode": FakeSglang, "vllm-decode": FakeVllmDecode, "vllm-sparse": FakeVllmSparse}[name]()


def _kept_for(name: str, fake: Any) -> DequantCache:
    return sglang_decode.kept_cache(fake) if name == "sglang-decode" else DequantCache()


def _peer_call(
    name: str, p: dict[str, Any], fake: Any, kept: DequantCache | None, layouts: LayoutCache | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    state = KeptKeys(dequant=kept, layouts=layouts)
    return _run(name, fake, **p, softmax_scale=0.05, has_invalid=True, return_lse=True, state=state)


def _slot_rows(name: str, p: dict[str, Any]) -> int:
    """Rows of the per-slot key buffer: n_q x the stream length rounded up to the adapter's multiple."""
    multiple = vllm_sparse.TOPK_MULTIPLE if name == "vllm-sparse" else sglang_decode.SLOT_MULTIPLE
    return (p["indptr"].numel() - 1) * -(-p["indices"].numel() // multiple) * multiple


def _same_bits(got: tuple[torch.Tensor, torch.Tensor | None], want: tuple[torch.Tensor, torch.Tensor | None]) -> bool:
    assert got[1] is not None and want[1] is not None
    return torch.equal(_bits(got[0]), _bits(want[0])) and torch.equal(_bits(got[1]), _bits(want[1]))


def _kept_problem(rows: int, writer: str) -> dict[str, Any]:
    p = make_problem([0, 5, 40, 1, 90], 3, seed=41, rows=rows, negative_every=6, writer=writer)
    p["indices"][2] = rows  # one past the cache: masked
    p["indices"][p["indices"] == 0] = 1
    p["kv_cache"][0, :512] = 0x7F  # NaN codes in a record no valid slot reads (the per-slot path's padding record)
    return p


@pytest.mark.parametrize("name", TRITON_PEERS)
@pytest.mark.parametrize("writer", ["pow2", "raw"])
@pytest.mark.parametrize("rows", [300, 2000])
def test_kept_cache_gives_the_per_slot_bits(name: str, writer: str, rows: int) -> None:
    """Several calls through one kept cache: the per-slot bits on every call, the cache built once
    per cache state (at once when it has no more rows than the call's slots, 720 or 800, else on
    the second sight), built again after an in-place write and for a different cache tensor; the
    index layouts kept per index tensors alongside (LayoutCache), rebuilt when the indices are written."""
    p = _kept_problem(rows, writer)
    fake = _fake_for(name)
    kept = _kept_for(name, fake)
    layouts = LayoutCache(plumbing.LAYOUTS_KEPT)
    first = _peer_call(name, p, _fake_for(name), None)
    sights = 1 if rows <= _slot_rows(name, p) else 2
    for call in range(3):
        assert _same_bits(_peer_call(name, p, fake, kept, layouts), first)
        assert fake.calls[-1]["kv_rows"] == (rows + 1 if call >= sights - 1 else _slot_rows(name, p))
    assert kept.builds == 1
    read = int(p["indices"][5])  # row 1's first key: valid, never record 0
    p["kv_cache"][read] = p["kv_cache"][2 if read == 1 else 1]  # an in-place write: version counter bumped
    mutated = _peer_call(name, p, _fake_for(name), None)
    assert not _same_bits(mutated, first)
    for _ in range(sights + 1):
        assert _same_bits(_peer_call(name, p, fake, kept, layouts), mutated)
    assert kept.builds == 2 and fake.calls[-1]["kv_rows"] == rows + 1
    other = dict(p, kv_cache=p["kv_cache"].clone())
    other["kv_cache"][read] = p["kv_cache"][4 if read == 3 else 3]
    want = _peer_call(name, other, _fake_for(name), None)
    for _ in range(sights + 1):
        assert _same_bits(_peer_call(name, other, fake, kept, layouts), want)
    assert kept.builds == 3 and fake.calls[-1]["kv_rows"] == rows + 1
    other["indices"][5:9] = torch.tensor([2, rows + 5, -1, 7], dtype=torch.int32)  # the kept layout's indices written in place
    written = _peer_call(name, other, _fake_for(name), None)
    assert not _same_bits(written, want)
    assert _same_bits(_peer_call(name, other, fake, kept, layouts), written) and kept.builds == 3


def test_kept_cache_uses_the_given_reader() -> None:
    """DequantCache(dequantise=reader): the whole copy by its reader (sglang's here, which rounds raw scales unlike
    dequantise_bf16), DequantCache's policy (first sight, hit, in-place write, freed source)."""
    p = make_problem([4], 2, seed=42, rows=200, writer="raw")
    kv = p["kv_cache"]
    reader = partial(sglang_decode.sglang_dequantise, FakeSglang())
    want = dequant_cache.dequantise_whole(kv, 64, dequantise=reader)
    assert torch.equal(_bits(want[:-1]), _bits(reader(kv))) and not bool(want[-1].any()) and not bool(want[-1].signbit().any())
    assert not torch.equal(_bits(want), _bits(dequantise_whole(kv)))
    assert torch.equal(_bits(dequant_cache.dequantise_whole(kv, 64, dequantise=peer_keys.dequantise_bf16)), _bits(dequantise_whole(kv)))
    kept = dequant_cache.DequantCache(dequantise=reader)
    assert kept.get(kv, slots=100) is None  # more rows than slots, first sight
    got = kept.get(kv, slots=100)
    assert got is not None and torch.equal(_bits(got), _bits(want)) and kept.builds == 1
    assert kept.get(kv, slots=100) is got and kept.builds == 1
    kv[7, 600] ^= 1
    assert kept.get(kv, slots=100) is None and kept.get(kv, slots=100) is not None and kept.builds == 2
    small = kv[:50].clone()
    assert kept.get(small, slots=64) is not None and kept.builds == 3
    del small
    gc.collect()
    assert kept._bf16 is None
    assert dequant_cache.DequantCache(1000, dequantise=reader).get(kv, slots=1 << 20) is None


@pytest.mark.parametrize("name", TRITON_PEERS)
def test_kept_cache_past_the_int32_offsets_is_not_used(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache whose bf16 copy the kernels could not address (row * 576 past int32) is never
    built: the keys are gathered per slot, with the same bits."""
    p = _kept_problem(300, "pow2")
    monkeypatch.setattr(peer_keys, "MAX_KEPT_ROWS", 300)
    fake = _fake_for(name)
    kept = _kept_for(name, fake)
    want = _peer_call(name, p, _fake_for(name), None)
    for _ in range(2):
        assert _same_bits(_peer_call(name, p, fake, kept), want)
    assert kept.builds == 0 and fake.calls[-1]["kv_rows"] == _slot_rows(name, p)


@pytest.mark.parametrize("name", TRITON_PEERS)
@pytest.mark.parametrize("lengths", [[0, 5, 40, 1, 90], [3000, 1200]])
def test_kept_cache_call_has_no_host_sync(name: str, lengths: list[int]) -> None:
    """The adapter's own work (prepare, then finish after the kernel), building the kept copy or
    hitting it, reads nothing back from the device (no .item() / nonzero); a stream longer than
    the sync-free width (4096 entries) reads its longest row once, then never while its layout is kept."""
    p = make_problem(lengths, 3, seed=44, rows=300, negative_every=6)
    args = (p["q"], p["kv_cache"], p["indices"], p["indptr"], 0.05)
    fake = _fake_for(name)
    kept = _kept_for(name, fake)
    layouts = LayoutCache(plumbing.LAYOUTS_KEPT)
    for call_no in range(2):  # build, then hit
        with OpCounter() as ops:
            call: Any = ADAPTERS[name].prepare(_engine(name, fake), KeptKeys(kept, layouts), CallArgs(*args))
        call.run()
        with ops:
            call.finish(None, True)
        syncs = {op: n for op, n in ops.ops.items() if op in SCALAR_READS}
        assert syncs == ({"_local_scalar_dense": 1} if call_no == 0 and sum(lengths) > 4096 else {}), syncs
    assert kept.builds == 1


def test_valid_first_is_the_stable_sort_and_csr_holds_the_valid_slots() -> None:
    gen = torch.Generator().manual_seed(43)
    valid = torch.rand(6, 32, generator=gen) < 0.6
    valid[0], valid[1] = True, False
    table = torch.randint(0, 1000, (6, 32), generator=gen, dtype=torch.int32)
    counts = valid.sum(dim=1, dtype=torch.int32)
    keys = peer_keys.SlotKeys(keys=torch.zeros(1, 576), table=table, valid=valid, counts=counts, width=32, per_slot=False)
    order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices
    assert torch.equal(keys.valid_first(), torch.gather(table, 1, order))
    indptr, flat = sglang_decode.csr_of_valid(keys, 0, 6)
    assert torch.equal(indptr[1:].diff(prepend=indptr[:1]), counts) and int(indptr[0]) == 0
    assert torch.equal(flat[: int(indptr[-1])], table[valid])


@pytest.mark.parametrize("name", TRITON_PEERS)
def test_kept_layout_follows_the_cache_rows(name: str) -> None:
    """The same index tensors against a smaller cache (entries past its rows now masked) through
    the same kept caches: the per-slot bits of that cache, not the bigger one's layout."""
    p = _kept_problem(300, "pow2")
    fake = _fake_for(name)
    kept, layouts = _kept_for(name, fake), LayoutCache(plumbing.LAYOUTS_KEPT)
    for cache in (p["kv_cache"], p["kv_cache"][:200].clone()):
        q = dict(p, kv_cache=cache)
        want = _peer_call(name, q, _fake_for(name), None)
        for _ in range(2):
            assert _same_bits(_peer_call(name, q, fake, kept, layouts), want)
    assert not _same_bits(want, _peer_call(name, p, _fake_for(name), None))


def test_torch_sdpa_is_not_judged_on_the_cpu() -> None:
    from conformance.judging.target import TargetError, build_target

    with pytest.raises(TargetError, match="runs on .*cuda.*, not cpu"):
        build_target("torch-sdpa", device="cpu")
