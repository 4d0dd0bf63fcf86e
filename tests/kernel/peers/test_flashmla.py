"""kernel.peers.flashmla: the CSR -> fixed-width conversion, head padding, lse mapping and out= handling
(with a fake `flash_mla` module injected, so it runs on any CPU), availability on a machine
without a Hopper GPU, and, on a machine with FlashMLA and an SM90 GPU, a smoke test of the real
kernel against the float64 oracle and the `bf16-q-bf16-p` error bound.

Set FLASHMLA_SMOKE_JSON=PATH to have the GPU smoke test write its per-case error/bound ratios.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import sys
import types
from typing import Any

import pytest
import torch

from conformance.judging.harness import call_kernel
from kernel.contract import ContractError
from kernel.fp8 import decode_e4m3
from kernel.peers import flashmla, plumbing
from kernel.peers.protocol import CallArgs, backend_from_adapter, run_peer
from kernel.record import LATENT_DIM, RECORD_BYTES, decode_records, encode_records
from kernel.registry import BackendUnavailable, resolve
from oracle.reference import reference

# ------------------------------------------------------------------------------ CSR -> padded


def padded_by_loop(indices: list[int], indptr: list[int], *, has_invalid: bool, multiple: int = 64) -> list[list[int]]:
    """The obvious per-row Python reference of csr_to_padded."""
    rows = []
    for q in range(len(indptr) - 1):
        start, length = indptr[q], max(indptr[q + 1] - indptr[q], 0)
        row = [indices[p] if 0 <= p < len(indices) else -1 for p in range(start, start + length)]
        if has_invalid:
            row = [-1 if v < 0 else v for v in row]
        rows.append(row)
    longest = max((len(r) for r in rows), default=0)
    width = max(multiple, -(-longest // multiple) * multiple)
    return [r + [-1] * (width - len(r)) for r in rows]


def make_stream(
    lengths: list[int], *, offset: int = 0, seed: int = 0, negative_every: int = 0, duplicates: bool = False
) -> tuple[list[int], list[int]]:
    """(indices, indptr) with the given row lengths (negative steps the pointer back)."""
    gen = torch.Generator().manual_seed(seed)
    ptr = [offset]
    for length in lengths:
        ptr.append(ptr[-1] + length)
    n_idx = max(ptr) if ptr else 0
    values = torch.randint(0, 1000, (n_idx,), generator=gen).tolist()
    if duplicates:
        values = [v % 5 for v in values]
    if negative_every:
        for i in range(0, n_idx, negative_every):
            values[i] = -1 - 7 * (i % 3)  # -1, -8, -15
    return values, ptr


STREAMS = {
    "empty_rows": {"lengths": [0, 0, 3, 0]},
    "all_empty": {"lengths": [0, 0, 0]},
    "negative_length": {"lengths": [5, -3, 70, 0, -2, 1], "offset": 10},
    "len_1": {"lengths": [1]},
    "len_63": {"lengths": [63, 2]},
    "len_64": {"lengths": [64, 64]},
    "len_65": {"lengths": [65, 1]},
    "len_129": {"lengths": [129, 0, 64]},
    "mixed": {"lengths": [0, 1, 63, 64, 65, 129, 2048]},
    "invalid_entries": {"lengths": [10, 65, 3, 0, 64], "negative_every": 4},
    "duplicates": {"lengths": [40, 70, 5], "duplicates": True},
    "offset_stream": {"lengths": [7, 9], "offset": 33},
}


@pytest.mark.parametrize("has_invalid", [False, True])
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_csr_to_padded_matches_loop(name: str, has_invalid: bool) -> None:
    indices, indptr = make_stream(**STREAMS[name])
    got = plumbing.csr_to_padded(torch.tensor(indices, dtype=torch.int32), torch.tensor(indptr, dtype=torch.int32), has_invalid=has_invalid)
    want = padded_by_loop(indices, indptr, has_invalid=has_invalid)
    assert got.indices.dtype == torch.int32 and got.indices.is_contiguous()
    assert got.indices.tolist() == want
    assert got.width % 64 == 0 and got.width >= 64 and got.width == len(want[0])
    assert got.lengths.tolist() == [max(b - a, 0) for a, b in itertools.pairwise(indptr)]
    if has_invalid:
        assert int(got.indices.min()) >= -1  # FlashMLA masks exactly -1; nothing else negative


def test_csr_to_padded_widths_and_random_streams() -> None:
    for longest, width in ((0, 64), (1, 64), (63, 64), (64, 64), (65, 128), (129, 192), (2048, 2048)):
        rows = plumbing.csr_to_padded(
            torch.arange(longest, dtype=torch.int32), torch.tensor([0, longest], dtype=torch.int32), has_invalid=False
        )
        assert rows.width == width
    gen = torch.Generator().manual_seed(5)
    for trial in range(20):
        n_q = int(torch.randint(1, 12, (1,), generator=gen))
        lengths = torch.randint(-5, 200, (n_q,), generator=gen).tolist()
        offset = 10
        indices, indptr = make_stream(lengths, offset=offset, seed=trial, negative_every=int(trial % 3) * 5)
        if min(indptr) < 0:
            continue
        for has_invalid in (False, True):
            got = plumbing.csr_to_padded(
                torch.tensor(indices, dtype=torch.int32), torch.tensor(indptr, dtype=torch.int32), has_invalid=has_invalid
            )
            assert got.indices.tolist() == padded_by_loop(indices, indptr, has_invalid=has_invalid)


def test_csr_to_padded_masks_positions_outside_the_stream() -> None:
    # A broken stream (row reaching past the buffer) must not fault the host: those slots are -1.
    got = plumbing.csr_to_padded(torch.tensor([4, 5], dtype=torch.int32), torch.tensor([1, 4], dtype=torch.int32), has_invalid=False)
    assert got.indices[0, :4].tolist() == [5, -1, -1, -1]


# ------------------------------------------------------------------------------ small pieces


def test_pad_heads_copies_strided_q_and_zero_pads() -> None:
    base = torch.randn(5, 3 * 600 + 7, dtype=torch.float32).to(torch.bfloat16)
    q = base[:, : 3 * 600].view(5, 3, 600)[:, :, :576]  # padded row and head strides
    assert q.stride() != (3 * 576, 576, 1)
    for heads_to in (64, 128):
        buf = plumbing.pad_heads(q, heads_to)
        assert buf.shape == (5, 1, heads_to, 576) and buf.is_contiguous() and buf.dtype == torch.bfloat16
        assert torch.equal(buf[:, 0, :3], q)
        assert not bool(buf[:, 0, 3:].any())
    assert torch.equal(plumbing.pad_heads(q, 64, sign=-1.0)[:, 0, :3], -q)
    assert not bool(plumbing.pad_heads(q, 64, sign=0.0).any())
    with pytest.raises(ValueError):
        plumbing.pad_heads(torch.zeros(1, 65, 576, dtype=torch.bfloat16), 64)


def test_cache_blocks_addresses_flat_rows() -> None:
    kv = torch.randint(0, 256, (128, RECORD_BYTES), dtype=torch.uint8)
    for bs, want in ((1, (128, 1, 1, RECORD_BYTES)), (64, (2, 64, 1, RECORD_BYTES))):
        blocks = flashmla.cache_blocks(kv, bs)
        assert tuple(blocks.shape) == want and blocks.data_ptr() == kv.data_ptr()
        assert blocks.stride(1) == RECORD_BYTES  # FlashMLA: rows of a block contiguous, 656 B apart
        for r in (0, 1, 63, 64, 127):
            assert torch.equal(blocks[r // want[1], r % want[1], 0], kv[r])
    odd = torch.zeros(3, 5, RECORD_BYTES, dtype=torch.uint8)  # paged leading shape, 15 rows
    assert tuple(flashmla.cache_blocks(odd, 64).shape) == (15, 1, 1, RECORD_BYTES)


def test_map_lse_and_effective_scale() -> None:
    raw = torch.tensor([[[1.5, float("inf"), -2.0, 7.0]], [[float("inf"), 0.0, 3.0, 4.0]]])  # [n_q, 1, H_pad]
    got = plumbing.map_lse(raw, 2, 3)
    assert got.dtype == torch.float32 and got.shape == (2, 3)
    assert got.tolist() == [[1.5, float("-inf"), -2.0], [float("-inf"), 0.0, 3.0]]
    assert torch.equal(plumbing.map_lse(raw.transpose(1, 2), 2, 3), got)  # [n_q, H_pad, 1] layout too
    odd = torch.tensor([[[float("nan"), float("-inf"), 3.4e38, -0.0, 1e-45]]])  # other values pass unchanged
    mapped = plumbing.map_lse(odd, 1, 5)
    assert mapped.is_contiguous() and mapped.data_ptr() != odd.data_ptr()
    assert torch.equal(mapped.view(torch.int32), odd.view(1, 5).view(torch.int32))
    from conformance.tools.op_count import count_ops

    launched = count_ops(lambda: plumbing.map_lse(raw, 2, 3)).launched
    assert launched == {"nan_to_num": 1}, launched  # one elementwise op per call
    assert plumbing.effective_scale(0.25) == (1.0, 0.25)
    assert plumbing.effective_scale(-0.25) == (-1.0, 0.25)
    assert plumbing.effective_scale(0.0) == (0.0, 1.0)


# ------------------------------------------------------------------------------ fake flash_mla


def flashmla_k_latent(codes_value: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The latent as FlashMLA's SM90 dequant makes it: bf16(bf16(code) * bf16(scale)) (f64 out).

    codes_value: f64 [..., 512] decoded e4m3 values; scales: f32 [..., 4]."""
    scale_bf16 = scales.to(torch.bfloat16).to(torch.float64).repeat_interleave(128, dim=-1)
    return (codes_value * scale_bf16).to(torch.float32).to(torch.bfloat16).to(torch.float64)


def dense_softmax(
    q: torch.Tensor, rows: torch.Tensor, idx: torch.Tensor, scale: float, *, k_model: str = "exact"
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 attention of q [b, H, 576] over the padded index rows idx [b, W] (< 0: masked) of
    the flat records rows [N, 656]: (out f64 [b, H, 512], lse f64 [b, H], -inf without keys).

    k_model "exact": latent = code * scale; "flashmla": flashmla_k_latent (bf16 scale and product)."""
    valid = idx >= 0
    dec = decode_records(rows[idx.clamp_min(0)])
    latent = dec.latent if k_model == "exact" else flashmla_k_latent(decode_e4m3(dec.codes), dec.scales)
    latent = latent.masked_fill(~valid.unsqueeze(-1), 0.0)
    keys = torch.cat((latent, dec.rope.masked_fill(~valid.unsqueeze(-1), 0.0)), dim=-1)  # [b, W, 576]
    scores = torch.bmm(q.to(torch.float64), keys.transpose(1, 2)) * scale
    scores = scores.masked_fill(~valid.unsqueeze(1), float("-inf"))
    has = valid.any(dim=1)
    peak = torch.where(has.view(-1, 1, 1), scores.amax(dim=-1, keepdim=True), torch.zeros((), dtype=torch.float64, device=q.device))
    w = torch.exp(scores - peak)
    total = w.sum(dim=-1, keepdim=True)
    out = torch.bmm(w / torch.where(total > 0, total, 1.0), latent)
    lse = torch.where(has.view(-1, 1), (peak + torch.log(total)).squeeze(-1), float("-inf"))
    return out, lse


class FakeSched:
    pass


class FakeFlashMLA(types.ModuleType):
    """Stands in for `flash_mla`: checks what FlashMLA's checks would, records each call, and
    returns the float64 softmax of the padded rows (-1 masked), rounded like FlashMLA's outputs:
    out bf16 [b, 1, H_pad, 512], lse f32 [b, 1, H_pad], +inf for a row without keys."""

    def __init__(self) -> None:
        super().__init__("flash_mla")
        self.calls: list[dict[str, Any]] = []
        self.legacy = True

    def has_legacy(self) -> bool:
        return self.legacy

    def get_mla_metadata(self, *args: Any, **kwargs: Any) -> tuple[FakeSched, None]:
        return FakeSched(), None

    def flash_mla_with_kvcache(
        self,
        q,
        k_cache,
        block_table=None,
        cache_seqlens=None,
        head_dim_v=512,
        tile_scheduler_metadata=None,
        num_splits=None,
        softmax_scale=None,
        causal=False,
        is_fp8_kvcache=None,
        indices=None,
        use_legacy=False,
        kv_format=None,
        **extra,
    ):  # type: ignore[no-untyped-def]
        self.calls.append(
            {
                "q": q.clone(),
                "k_cache": k_cache,
                "indices": indices.clone(),
                "softmax_scale": softmax_scale,
                "head_dim_v": head_dim_v,
                "use_legacy": use_legacy,
                "kv_format": kv_format,
                "is_fp8_kvcache": is_fp8_kvcache,
                "num_splits": num_splits,
                "block_table": block_table,
                "sched": tile_scheduler_metadata,
                "extra": extra,
            }
        )
        b, s_q, h_q, d = q.shape
        assert q.dtype == torch.bfloat16 and q.is_contiguous() and s_q == 1 and d == 576 and h_q in (64, 128)
        assert k_cache.dtype in (torch.uint8, torch.int8) and k_cache.dim() == 4 and k_cache.shape[2] == 1
        assert k_cache.shape[3] == RECORD_BYTES and k_cache.stride(1) == RECORD_BYTES
        assert indices.dtype == torch.int32 and indices.shape[:2] == (b, 1) and indices.shape[2] % 64 == 0
        assert indices.is_contiguous()
        assert use_legacy and kv_format == "V32" and head_dim_v == 512 and is_fp8_kvcache and num_splits is None
        assert isinstance(tile_scheduler_metadata, FakeSched)
        assert softmax_scale > 0
        rows = k_cache.shape[0] * k_cache.shape[1]
        idx = indices[:, 0].to(torch.int64)
        bad = (idx != -1) & ((idx < 0) | (idx >= rows))
        if bool(bad.any()):
            raise RuntimeError("CUDA error: an illegal memory access was encountered (fake)")
        out, lse = dense_softmax(q[:, 0], k_cache.reshape(rows, RECORD_BYTES), idx, softmax_scale)
        lse = torch.where(torch.isneginf(lse), float("inf"), lse)
        return out.to(torch.bfloat16).unsqueeze(1), lse.to(torch.float32).unsqueeze(1)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeFlashMLA:
    module = FakeFlashMLA()
    monkeypatch.setitem(sys.modules, "flash_mla", module)
    return module


def run_flashmla(*args: Any, module: Any = None, padded_heads: int = 64, page_block_size: int = 1, **kwargs: Any) -> Any:
    """The adapter's contract call (kernel.peers.protocol.run_peer) on `module` (default: the
    `flash_mla` in sys.modules, the fake in these tests), everything built per call."""
    adapter = flashmla.FlashMLAAdapter(padded_heads=padded_heads, page_block_size=page_block_size)
    engine = flashmla.FlashMLAEngine(sys.modules["flash_mla"] if module is None else module)
    return run_peer(adapter, *args, engine=engine, **kwargs)


def make_problem(
    lengths: list[int], heads: int, *, seed: int = 0, rows: int = 300, negative_every: int = 0, q_pad: tuple[int, int] = (0, 0)
) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(rows, LATENT_DIM, generator=gen) * 2.0 ** torch.randint(-3, 4, (rows, 1), generator=gen)
    kv = encode_records(latent, torch.randn(rows, 64, generator=gen).to(torch.bfloat16), "pow2")
    ptr = [0]
    for length in lengths:
        ptr.append(ptr[-1] + length)
    n_idx = max(ptr)
    idx = torch.randint(0, rows, (n_idx,), generator=gen, dtype=torch.int64).to(torch.int32)
    if negative_every:
        idx[::negative_every] = torch.tensor([-1, -8, -15], dtype=torch.int32).repeat(n_idx)[: idx[::negative_every].numel()]
    n_q = len(lengths)
    q_full = torch.randn(n_q, heads, 576, generator=gen).to(torch.bfloat16)
    head_stride = 576 + q_pad[1]
    row_stride = heads * head_stride + q_pad[0]
    storage = torch.full((max(n_q * row_stride, 1),), float("nan"), dtype=torch.bfloat16)
    q = storage.as_strided((n_q, heads, 576), (row_stride, head_stride, 1))
    q.copy_(q_full)
    return {"q": q, "kv_cache": kv, "indices": idx, "indptr": torch.tensor(ptr, dtype=torch.int32)}


def assert_matches_reference(p: dict[str, Any], out: torch.Tensor, lse: torch.Tensor | None, scale: float, has_invalid: bool) -> None:
    ref = reference(p["q"], p["kv_cache"], p["indices"], p["indptr"], scale, has_invalid=has_invalid)
    tol = 2.0**-7 * ref.out.abs() + 1e-12  # 1 bf16 ulp (the fake rounds the f64 value once) + f64 sum-order noise
    assert bool(((out.to(torch.float64) - ref.out).abs() <= tol).all())
    empty = torch.isneginf(ref.lse)
    assert not bool(out[empty].any())
    if lse is not None:
        assert torch.equal(torch.isneginf(lse), empty)
        assert bool(((lse.to(torch.float64) - ref.lse)[~empty].abs() <= 1e-6 * (1 + ref.lse[~empty].abs())).all())


@pytest.mark.parametrize("heads", [1, 3, 16])
def test_adapter_pads_heads_and_maps_outputs(fake: FakeFlashMLA, heads: int) -> None:
    lengths = [0, 1, 63, 64, 65, 130, -2, 5]
    p = make_problem([max(x, 0) for x in lengths], heads, seed=heads, q_pad=(3, 5))
    p["indptr"][7] = p["indptr"][6] - 2  # a negative length row
    p["indptr"][8] = p["indptr"][7] + 5
    out, lse = run_flashmla(**p, softmax_scale=0.07, return_lse=True)
    assert len(fake.calls) == 1
    call = fake.calls[0]
    assert call["q"].shape == (8, 1, 64, 576)
    assert torch.equal(call["q"][:, 0, :heads], p["q"]) and not bool(call["q"][:, 0, heads:].any())
    # A short stream is padded to its own length (rounded to 64) without a host sync.
    n_idx = p["indices"].numel()
    assert call["indices"].shape == (8, 1, plumbing.round_up(n_idx, 64))
    assert out.shape == (8, heads, LATENT_DIM) and out.dtype == torch.bfloat16 and out.is_contiguous()
    assert lse is not None and lse.shape == (8, heads) and lse.dtype == torch.float32
    assert bool(torch.isneginf(lse[0]).all()) and bool(torch.isneginf(lse[6]).all())
    assert not bool(out[0].any()) and not bool(out[6].any())
    assert not bool(torch.isinf(lse[[1, 2, 3, 4, 5, 7]]).any())
    assert_matches_reference(p, out, lse, 0.07, has_invalid=False)


def test_adapter_has_invalid_sends_only_minus_one(fake: FakeFlashMLA) -> None:
    p = make_problem([10, 65, 3, 64, 1], 4, seed=3, negative_every=3)
    p["indices"][int(p["indptr"][4])] = -8  # the last row's only entry
    out, lse = run_flashmla(**p, softmax_scale=0.05, has_invalid=True, return_lse=True)
    sent = fake.calls[0]["indices"]
    assert int(sent.min()) == -1 and bool(((sent >= 0) | (sent == -1)).all())
    assert lse is not None and bool(torch.isneginf(lse[4]).all())  # row of one entry, which is -1
    assert_matches_reference(p, out, lse, 0.05, has_invalid=True)


def test_adapter_fills_strided_out_and_skips_lse(fake: FakeFlashMLA) -> None:
    p = make_problem([70, 0, 3], 2, seed=4)
    storage = torch.full((3 * (2 * 520 + 9),), float("nan"), dtype=torch.bfloat16)
    out = storage.as_strided((3, 2, 512), (2 * 520 + 9, 520, 1))
    got, lse = run_flashmla(**p, softmax_scale=0.1, out=out)
    assert got is out and lse is None
    assert not bool(torch.isnan(out).any()) and not bool(out[1].any())
    assert_matches_reference(p, out, None, 0.1, has_invalid=False)
    gaps = storage.view(3, -1)[:, 2 * 520 : 2 * 520 + 9]
    assert bool(torch.isnan(gaps).all())  # bytes between rows untouched


@pytest.mark.parametrize("scale", [-0.08, 0.0])
def test_adapter_non_positive_scale_is_exact_rewrite(fake: FakeFlashMLA, scale: float) -> None:
    p = make_problem([5, 64, 0], 3, seed=6)
    out, lse = run_flashmla(**p, softmax_scale=scale, return_lse=True)
    call = fake.calls[0]
    assert call["softmax_scale"] > 0
    if scale < 0:
        assert torch.equal(call["q"][:, 0, :3], -p["q"]) and call["softmax_scale"] == -scale
    else:
        assert not bool(call["q"].any()) and call["softmax_scale"] == 1.0
        assert lse is not None and abs(float(lse[0, 0]) - math.log(5)) < 1e-6
    assert_matches_reference(p, out, lse, scale, has_invalid=False)


def test_adapter_validates_and_handles_no_rows(fake: FakeFlashMLA) -> None:
    p = make_problem([3], 1)
    with pytest.raises(ContractError):
        run_flashmla(p["q"].expand(1, 17, 576), p["kv_cache"], p["indices"], p["indptr"], 0.1)
    with pytest.raises(ContractError):
        run_flashmla(p["q"], p["kv_cache"], p["indices"].to(torch.int64), p["indptr"], 0.1)
    out, lse = run_flashmla(
        torch.zeros(0, 2, 576, dtype=torch.bfloat16), p["kv_cache"], p["indices"], torch.zeros(1, dtype=torch.int32), 0.1, return_lse=True
    )
    assert out.shape == (0, 2, 512) and lse is not None and lse.shape == (0, 2)
    assert not fake.calls


def test_adapter_page_block_64_and_128_heads(fake: FakeFlashMLA) -> None:
    p = make_problem([70, 2], 5, seed=8, rows=256)
    out1, lse1 = run_flashmla(**p, softmax_scale=0.06, return_lse=True, page_block_size=64, padded_heads=128)
    call = fake.calls[0]
    assert tuple(call["k_cache"].shape) == (4, 64, 1, RECORD_BYTES) and call["q"].shape[2] == 128
    out2, lse2 = run_flashmla(**p, softmax_scale=0.06, return_lse=True)
    assert tuple(fake.calls[1]["k_cache"].shape) == (256, 1, 1, RECORD_BYTES)
    assert torch.equal(out1, out2) and torch.equal(lse1, lse2)


def test_backend_with_fake_module(fake: FakeFlashMLA, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flashmla, "device_reason", lambda device=None: "")
    backend = backend_from_adapter(flashmla.ADAPTER)
    assert backend.name == "flashmla" and backend.profile == "bf16-q-bf16-p"
    assert backend.devices == ("cuda",) and backend.max_heads == 16 and backend.accepts_out
    assert not backend.bounded_index_reads and backend.limits
    p = make_problem([9, 0], 2, seed=9)
    assert not backend.supports(**p, softmax_scale=0.1)  # CPU tensors: the backend runs on cuda only
    out, lse = backend(**p, softmax_scale=0.1, return_lse=True)  # calling it still goes through the fake
    assert_matches_reference(p, out, lse, 0.1, has_invalid=False)
    assert backend.extra_support is not None
    empty_info = types.SimpleNamespace(kv_rows=0, device=torch.device("cpu"))
    assert "row" in backend.extra_support(empty_info)  # type: ignore[arg-type]


def test_legacy_missing_and_import_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    module = FakeFlashMLA()
    module.legacy = False
    monkeypatch.setitem(sys.modules, "flash_mla", module)
    with pytest.raises(BackendUnavailable, match="legacy"):
        flashmla.load_flash_mla()
    monkeypatch.setitem(sys.modules, "flash_mla", None)  # import raises ImportError
    with pytest.raises(BackendUnavailable, match="cannot import 'flash_mla'.*sgl-flash-mla==1.0.0"):
        flashmla.load_flash_mla()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_resolve_flashmla_on_cpu_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendUnavailable) as info:
        resolve("flashmla")
    assert "no CUDA device" in str(info.value)
    monkeypatch.setitem(sys.modules, "flash_mla", FakeFlashMLA())  # even with flash_mla importable
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        resolve("flashmla")


# ------------------------------------------------------------------------------ the real kernel


def _flashmla_or_skip() -> Any:
    try:
        return resolve("flashmla")
    except BackendUnavailable as err:
        pytest.skip(str(err))


def smoke_recipes() -> list[tuple[str, dict[str, Any]]]:
    """(name, recipe fields) of the GPU smoke cases (n_q 4..64, H 1/3/16, lengths 0..2048)."""
    base = {"cache_rows": 40_000, "return_lse": True}
    mixed = [0, 1, 63, 64, 65, 2048]
    return [
        ("mixed_h16_pow2", dict(base, seed=1, n_q=6, heads=16, row_lengths=mixed)),
        (
            "mixed_h3_invalid_floor",
            dict(
                base,
                seed=2,
                n_q=6,
                heads=3,
                row_lengths=mixed,
                has_invalid=True,
                invalid_pattern="scattered",
                invalid_permille=250,
                writer="pow2-floor",
            ),
        ),
        (
            "h1_n64_strided_peaked",
            dict(
                base,
                seed=3,
                n_q=64,
                heads=1,
                row_lengths=[mixed[i % 6] for i in range(64)],
                softmax_scale="peaked",
                q_pad=[7, 3],
                out_pad=[5, 9],
            ),
        ),
        ("h16_n16_2048_heavy_flat", dict(base, seed=4, n_q=16, heads=16, row_lengths=[2048] * 16, latent="heavy", softmax_scale="flat")),
        ("neg_lengths_offset", dict(base, seed=5, n_q=8, heads=3, row_lengths=[5, -3, 70, 0, -2, 129, 64, 1], stream_offset=20)),
        ("all_invalid", dict(base, seed=6, n_q=4, heads=16, row_lengths=[64, 65, 1, 0], has_invalid=True, invalid_pattern="all")),
        (
            "poison_tail_invalid",
            dict(
                base,
                seed=7,
                n_q=8,
                heads=3,
                row_lengths=[1, 63, 64, 65, 200, 0, 128, 2048],
                has_invalid=True,
                invalid_pattern="tail",
                poison=True,
            ),
        ),
        (
            "duplicates_floor",
            dict(
                base,
                seed=8,
                n_q=8,
                heads=16,
                row_lengths=[2048, 64, 65, 1, 300, 5, 63, 1000],
                index_pattern="duplicates",
                writer="pow2-floor",
            ),
        ),
        ("large_scores", dict(base, seed=9, n_q=8, heads=16, row_lengths=[2048, 64, 65, 1, 300, 5, 63, 1000], q="large", latent="large")),
        (
            "zero_and_tiny_blocks",
            dict(
                base,
                seed=10,
                n_q=8,
                heads=3,
                row_lengths=[2048, 64, 65, 1, 300, 5, 63, 1000],
                q="tiny_blocks",
                latent="zero_blocks",
                rope="tiny",
            ),
        ),
        ("negative_scale", dict(base, seed=11, n_q=4, heads=3, row_lengths=[100, 2048, 1, 0], softmax_scale=-0.06)),
        ("zero_scale", dict(base, seed=12, n_q=4, heads=3, row_lengths=[100, 2048, 1, 0], softmax_scale=0.0)),
        ("n1_2048_split", dict(base, seed=13, n_q=1, heads=16, row_lengths=[2048])),
        ("n64_64_unsplit", dict(base, seed=14, n_q=64, heads=16, row_lengths=[64] * 64)),
        (
            "beyond_4gib",
            dict(base, seed=15, n_q=4, heads=16, row_lengths=[2048, 65, 64, 1], index_pattern="beyond_4gib", cache_rows=6_600_000),
        ),
    ]


def _max_ratio(err: torch.Tensor, bound: torch.Tensor) -> tuple[float, int]:
    """(max err / bound, elements over the bound); err > 0 where bound == 0 counts as inf."""
    ratio = torch.where(bound > 0, err / torch.where(bound > 0, bound, 1.0), torch.where(err > 0, float("inf"), 0.0))
    return (float(ratio.max()) if ratio.numel() else 0.0), int((ratio > 1).sum())


def _compare(problem: Any, out: torch.Tensor, lse: torch.Tensor, ev: Any) -> dict[str, Any]:
    out64, lse64 = out.to(torch.float64), lse.to(torch.float64)
    empty = torch.isneginf(ev.lse)
    nan_out, nan_lse = int(torch.isnan(out64).sum()), int(torch.isnan(lse64).sum())
    err = (out64 - ev.out).abs().nan_to_num(nan=float("inf"))
    lse_err = torch.where(empty, torch.where(torch.isneginf(lse64), 0.0, float("inf")), (lse64 - ev.lse).abs()).nan_to_num(nan=float("inf"))
    out_ratio, out_over = _max_ratio(err, ev.out_bound)
    lse_ratio, lse_over = _max_ratio(lse_err, ev.lse_bound)
    worst = int(torch.argmax(torch.where(ev.out_bound > 0, err / ev.out_bound.clamp_min(1e-300), err).flatten())) if err.numel() else 0
    return {
        "out_ratio": out_ratio,
        "out_over": out_over,
        "lse_ratio": lse_ratio,
        "lse_over": lse_over,
        "max_abs_err_out": float(err.max()) if err.numel() else 0.0,
        "max_abs_err_lse": float(lse_err[~empty].max()) if bool((~empty).any()) else 0.0,
        "nan_out": nan_out,
        "nan_lse": nan_lse,
        "empty_rows_exact": bool((~out[empty].bool()).all()) and bool(torch.isneginf(lse[empty]).all()),
        "worst_out_index": list(torch.unravel_index(torch.tensor(worst), tuple(out.shape))) if err.numel() else [],
        "out_bound_at_worst": float(ev.out_bound.flatten()[worst]) if err.numel() else 0.0,
        "err_at_worst": float(err.flatten()[worst]) if err.numel() else 0.0,
        "ref_at_worst": float(ev.out.flatten()[worst]) if err.numel() else 0.0,
    }


def _variant(row: dict[str, Any], key: str, fn: Any) -> None:
    """row[key] = fn(), or the error it raised (a variant never hides the main verdict)."""
    try:
        row[key] = fn()
    except Exception as err:  # noqa: BLE001 -- a variant's failure is data for the report
        row[key] = f"error: {type(err).__name__}: {err}"


def _shape_with_block_64(problem: Any, module: Any) -> str:
    args = problem.args
    return str(tuple(run_flashmla(*args, has_invalid=problem.has_invalid, return_lse=True, page_block_size=64, module=module)[0].shape))


def _invariance_checks(row: dict[str, Any], backend: Any, module: Any, problem: Any, out: torch.Tensor, lse: torch.Tensor) -> None:
    """Reported, not judged: a second run bitwise equal; page blocks of 64 rows bitwise equal
    (when the row count allows); largest |out| difference with 128 padded heads."""
    args = problem.args

    def again() -> bool:
        out2, lse2 = call_kernel(problem, backend, out=torch.empty_like(out))
        return bool(torch.equal(out, out2) and lse2 is not None and torch.equal(lse.nan_to_num(), lse2.nan_to_num()))

    def block64() -> bool:
        out64, lse64 = run_flashmla(*args, has_invalid=problem.has_invalid, return_lse=True, page_block_size=64, module=module)
        return bool(torch.equal(out, out64) and lse64 is not None and torch.equal(lse.nan_to_num(), lse64.nan_to_num()))

    def heads128() -> float:
        out128, _ = run_flashmla(*args, has_invalid=problem.has_invalid, return_lse=True, padded_heads=128, module=module)
        return float((out128.float() - out.float()).abs().nan_to_num(nan=float("inf")).max()) if out.numel() else 0.0

    _variant(row, "deterministic", again)
    if (problem.kv_cache.numel() // RECORD_BYTES) % 64 == 0:
        _variant(row, "page_block_64_bitwise_equal", block64)
    _variant(row, "heads128_max_abs_diff", heads128)


def run_smoke(
    backend: Any, module: Any, device: torch.device, cases: list[tuple[str, dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Run `backend` on the smoke recipes and judge each against the bf16-q-bf16-p bound (mode
    exact-steps); one dict per case with error/bound ratios, exactness of empty rows, NaNs, and
    (reported only) run-to-run determinism and page-block-64 / 128-head invariance."""
    from oracle.bound import evaluate
    from oracle.profiles import get_profile
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    profile = get_profile(backend.profile)
    report: list[dict[str, Any]] = []
    for name, fields in cases if cases is not None else smoke_recipes():
        recipe = Recipe.from_json_dict(fields)
        problem = materialize(recipe, device)
        row: dict[str, Any] = {
            "case": name,
            "n_q": recipe.n_q,
            "heads": recipe.heads,
            "has_invalid": recipe.has_invalid,
            "writer": recipe.writer,
            "max_len": max(recipe.row_lengths),
            "recipe": fields,
        }
        args = problem.args
        rows = problem.kv_cache.numel() // RECORD_BYTES
        try:
            out, lse = call_kernel(problem, backend)
            assert lse is not None
            if device.type == "cuda":
                torch.cuda.synchronize()
            if problem.out is not None:
                row["out_is_given_tensor"] = out is problem.out
            _invariance_checks(row, backend, module, problem, out, lse)
            ev = evaluate(*args, profile=profile, mode="exact-steps", has_invalid=problem.has_invalid)
            row.update(_compare(problem, out, lse, ev))
            row["status"] = (
                "ok" if row["out_over"] == 0 and row["lse_over"] == 0 and row["empty_rows_exact"] and row["nan_out"] == 0 else "OVER BOUND"
            )
        except Exception as err:  # noqa: BLE001 -- report every case; the caller fails on any non-ok status
            row["status"] = f"error: {type(err).__name__}: {err}"
            if rows % 64 == 0:  # does the kernel run at all with 64-row page blocks?
                _variant(row, "page_block_64_runs", functools.partial(_shape_with_block_64, problem, module))
        report.append(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return report


def raw_writer_probe(backend: Any, device: torch.device, max_len: int = 2048) -> list[dict[str, Any]]:
    """Raw-writer (non-pow2 scale) calls, a precondition violation, measured not judged: the
    largest |out - ref| against the stored-scale reference and against a reference whose latent is
    FlashMLA's bf16(bf16(code) * bf16(scale)), both relative to max |ref|."""
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    found = []
    for name, fields in (
        (
            "raw_h16_mixed",
            {"seed": 21, "n_q": 6, "heads": 16, "row_lengths": [1, 63, 64, 65, 300, 2048], "cache_rows": 40_000, "writer": "raw"},
        ),
        (
            "raw_h3_heavy",
            {
                "seed": 22,
                "n_q": 6,
                "heads": 3,
                "row_lengths": [2048, 2048, 100, 1, 64, 65],
                "cache_rows": 40_000,
                "writer": "raw",
                "latent": "heavy",
            },
        ),
    ):
        fields["row_lengths"] = [min(x, max_len) for x in fields["row_lengths"]]  # type: ignore[attr-defined]
        problem = materialize(Recipe.from_json_dict(fields), device)
        row: dict[str, Any] = {"case": name}
        try:
            out, lse = call_kernel(problem, backend)
            padded = plumbing.csr_to_padded(problem.indices, problem.indptr, has_invalid=problem.has_invalid)
            q = problem.q.contiguous()
            for model in ("exact", "flashmla"):
                ref, ref_lse = dense_softmax(q, problem.kv_cache, padded.indices.to(torch.int64), problem.softmax_scale, k_model=model)
                scale_ref = float(ref.abs().max())
                row[f"max_rel_err_vs_{model}_k"] = float((out.to(torch.float64) - ref).abs().max()) / scale_ref
                row[f"max_lse_err_vs_{model}_k"] = float((lse.to(torch.float64) - ref_lse).abs().max())
            row["status"] = "measured"
        except Exception as err:  # noqa: BLE001 -- measured, not judged: any failure is reported
            row["status"] = f"error: {type(err).__name__}: {err}"
        found.append(row)
    return found


def smoke_table(report: list[dict[str, Any]]) -> str:
    """The smoke report as text, one line per case."""
    nan = float("nan")
    lines = [
        f"{'case':<26} {'n_q':>4} {'H':>3} {'inv':>4} {'out err/bound':>14} {'lse err/bound':>14} "
        f"{'max|dout|':>10} {'det':>4} {'bs64':>5} {'h128 diff':>10}  status"
    ]
    for r in report:
        lines.append(
            f"{r['case']:<26} {r['n_q']:>4} {r['heads']:>3} {str(r['has_invalid'])[0]:>4} "
            f"{r.get('out_ratio', nan):>14.4g} {r.get('lse_ratio', nan):>14.4g} "
            f"{r.get('max_abs_err_out', nan):>10.3g} {str(r.get('deterministic', '-'))[0]:>4} "
            f"{str(r.get('page_block_64_bitwise_equal', '-'))[0]:>5} {r.get('heads128_max_abs_diff', nan):>10.3g}  {r['status']}"
        )
    return "\n".join(lines) + "\n"


def test_smoke_path_with_fake_kernel(fake: FakeFlashMLA, monkeypatch: pytest.MonkeyPatch) -> None:
    """The smoke harness itself, on the CPU with the fake kernel (exact f64 rounded once to bf16),
    which must sit inside the bound on small cases."""
    monkeypatch.setattr(flashmla, "device_reason", lambda device=None: "")
    backend = backend_from_adapter(flashmla.ADAPTER)
    cases = [
        (n, dict(f, cache_rows=1024))
        for n, f in smoke_recipes()
        if n in ("mixed_h3_invalid_floor", "neg_lengths_offset", "all_invalid", "negative_scale")
    ]
    for _, f in cases:
        f["row_lengths"] = [min(x, 130) for x in f["row_lengths"]]
    report = run_smoke(backend, fake, torch.device("cpu"), cases)
    assert [r["status"] for r in report] == ["ok"] * len(cases), smoke_table(report)
    assert all(r["deterministic"] is True and r["page_block_64_bitwise_equal"] is True and r["empty_rows_exact"] for r in report)
    assert all(r["heads128_max_abs_diff"] == 0.0 for r in report)
    raw = raw_writer_probe(backend, torch.device("cpu"), max_len=130)
    # the fake keeps exact K: no error against the exact-K reference, a visible one against bf16 K
    assert all(r["status"] == "measured" and r["max_rel_err_vs_exact_k"] < 2.0**-8 for r in raw), raw
    assert all(r["max_rel_err_vs_flashmla_k"] > r["max_rel_err_vs_exact_k"] for r in raw), raw


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (FlashMLA on SM90)")
def test_flashmla_smoke_against_bound() -> None:
    """The real kernel on the smoke recipes: |out - ref| <= bound and |lse - ref| <= bound
    everywhere (profile bf16-q-bf16-p, mode exact-steps), empty rows exact."""
    backend = _flashmla_or_skip()
    module = flashmla.load_flash_mla()
    report = run_smoke(backend, module, torch.device("cuda"))
    raw = raw_writer_probe(backend, torch.device("cuda"))
    print()
    print(smoke_table(report), end="")
    print("raw writer (precondition violation, measured):", json.dumps(raw, indent=1))
    path = os.environ.get("FLASHMLA_SMOKE_JSON")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "device": torch.cuda.get_device_name(),
                    "profile": backend.profile,
                    "mode": "exact-steps",
                    "cases": report,
                    "raw_writer": raw,
                },
                fh,
                indent=2,
                default=str,
            )
    bad = [r["case"] + ": " + r["status"] for r in report if r["status"] != "ok"]
    assert not bad, "\n".join(bad)


def test_sync_free_width_covers_every_row_and_gives_up_on_long_streams() -> None:
    assert plumbing.sync_free_width(0, 64) == 64
    assert plumbing.sync_free_width(1, 64) == 64
    assert plumbing.sync_free_width(2048, 64) == 2048
    assert plumbing.sync_free_width(2049, 128) == 2176
    assert plumbing.sync_free_width(plumbing.SYNC_FREE_TOPK, 64) == plumbing.SYNC_FREE_TOPK
    assert plumbing.sync_free_width(plumbing.SYNC_FREE_TOPK + 1, 64) is None
    # An explicit width gives the same rows as the synced width, padded further with -1.
    indices, indptr = make_stream([5, -3, 70, 0, 2], offset=4, seed=1, negative_every=3)
    ix, ip = torch.tensor(indices, dtype=torch.int32), torch.tensor(indptr, dtype=torch.int32)
    for has_invalid in (False, True):
        synced = plumbing.csr_to_padded(ix, ip, has_invalid=has_invalid)
        free = plumbing.csr_to_padded(ix, ip, has_invalid=has_invalid, width=plumbing.sync_free_width(ix.numel(), 64))
        assert torch.equal(free.indices[:, : synced.width], synced.indices)
        assert bool((free.indices[:, synced.width :] == -1).all())
        assert torch.equal(free.lengths, synced.lengths)
    with pytest.raises(ValueError):
        plumbing.csr_to_padded(ix, ip, has_invalid=False, width=100)


def test_backend_reuses_scheduler_metadata_per_shape(fake: FakeFlashMLA, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flashmla, "device_reason", lambda device=None: "")
    backend = backend_from_adapter(flashmla.ADAPTER)
    a = make_problem([5, 70], 3, seed=1)
    b = make_problem([5, 70], 3, seed=2)  # same shapes, other data
    c = make_problem([5, 70, 9], 3, seed=3)  # another batch size
    for p in (a, b, c, a):
        backend(**p, softmax_scale=0.05, return_lse=True)
    scheds = [call["sched"] for call in fake.calls]
    assert scheds[0] is scheds[1] is scheds[3] and scheds[2] is not scheds[0]
    cache = flashmla.SchedCache(fake, capacity=1)
    engine = flashmla.FlashMLAEngine(fake)

    def prepared(p: dict[str, Any]) -> flashmla.FlashMLACall:
        return flashmla.ADAPTER.prepare(engine, None, CallArgs(**p, softmax_scale=0.05))

    first = cache.get(prepared(a))
    cache.get(prepared(c))
    assert cache.get(prepared(a)) is not first  # evicted
