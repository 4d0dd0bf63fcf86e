"""The dequantised-cache path of the bf16-KV adapters (kernel.peers.dequant_cache): the same
bits as the per-slot gather, kept only while the cache is unchanged, and no host sync; on CUDA
the torch-sdpa adapter's fused key decode (kernel.peers.bf16_key_decode) gives the same bits."""

from __future__ import annotations

import gc
import types

import pytest
import torch

from conformance.tools.op_count import OpCounter
from kernel import fastpath
from kernel.peers import bf16_key_decode, flashmla_prefill, torch_sdpa
from kernel.peers.dequant_cache import DequantCache, dequantise_whole
from kernel.peers.flashmla import FlashMLAEngine
from kernel.peers.keys import KeptKeys
from kernel.peers.plumbing import LayoutCache
from kernel.peers.protocol import CallArgs, backend_from_adapter, run_peer
from strategies.materialize import materialize
from strategies.recipe import Recipe

RECIPES = [
    Recipe(seed=1, n_q=5, heads=4, row_lengths=(0, 7, -3, 200, 65), cache_rows=64, stream_offset=3),
    Recipe(
        seed=2,
        n_q=4,
        heads=3,
        row_lengths=(130, 40, 0, 300),
        cache_rows=1024,
        invalid_pattern="scattered",
        invalid_permille=300,
        has_invalid=True,
    ),
    Recipe(
        seed=3,
        n_q=3,
        heads=16,
        row_lengths=(150, 90, 260),
        cache_rows=700,
        invalid_pattern="tail",
        invalid_permille=500,
        has_invalid=True,
        poison=True,
    ),
    Recipe(seed=4, n_q=3, heads=5, row_lengths=(100, 33, 128), cache_rows=20000, index_pattern="duplicates", softmax_scale=-0.05),
]


def _problem(recipe: Recipe):  # type: ignore[no-untyped-def]
    p = materialize(recipe, "cpu")
    return p, p.args


def run_torch_sdpa(*args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    return run_peer(torch_sdpa.ADAPTER, *args, **kwargs)  # type: ignore[arg-type]


def prepare_prefill(*args: object, dequant_cache: DequantCache | None = None) -> flashmla_prefill.PrefillCall:
    """The sparse prefill's inputs as its adapter builds them (a module it never calls: prepare builds inputs only)."""
    engine = FlashMLAEngine(types.ModuleType("flash_mla"))
    state = flashmla_prefill.PrefillState(dequant=dequant_cache)
    return flashmla_prefill.ADAPTER.prepare(engine, state, CallArgs(*args))  # type: ignore[arg-type]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def _poison_row0(kv: torch.Tensor) -> None:
    """NaN codes in cache row 0 (where the per-slot gather's empty slots point before zeroing)."""
    kv.view(-1, 656)[0, :512] = 0x7F


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"seed{r.seed}")
def test_sdpa_whole_cache_same_bits(recipe: Recipe) -> None:
    p, args = _problem(recipe)
    _poison_row0(p.kv_cache)
    base_out, base_lse = run_torch_sdpa(*args, has_invalid=p.has_invalid, return_lse=True)
    cache = DequantCache()
    for _ in range(2):  # the first call may decline (more rows than slots), the second builds
        out, lse = run_torch_sdpa(*args, has_invalid=p.has_invalid, return_lse=True, state=KeptKeys(cache, LayoutCache()))
        assert torch.equal(_bits(out), _bits(base_out)) and torch.equal(_bits(lse), _bits(base_lse))
    assert cache.builds == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"seed{r.seed}")
def test_sdpa_same_bits_through_the_fused_key_decode(recipe: Recipe, monkeypatch: pytest.MonkeyPatch) -> None:
    if fastpath.choose(bf16_key_decode.FAST_PATH, torch.device("cuda")) is None:
        pytest.skip("the fused decode did not pass its self-check on this device")
    p = materialize(recipe, "cuda")
    args = p.args
    fused_out, fused_lse = run_torch_sdpa(*args, has_invalid=p.has_invalid, return_lse=True)
    monkeypatch.setenv(fastpath.SETTING, "peers.bf16-keys=off")
    out, lse = run_torch_sdpa(*args, has_invalid=p.has_invalid, return_lse=True)
    assert torch.equal(_bits(fused_out), _bits(out)) and torch.equal(_bits(fused_lse), _bits(lse))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"seed{r.seed}")
def test_prefill_whole_cache_reads_the_same_keys(recipe: Recipe) -> None:
    """Every position the sparse prefill attends (j < topk_length, index != -1) reads the same
    bf16 key through either KV layout, and the same positions are masked."""
    p, args = _problem(recipe)
    _poison_row0(p.kv_cache)
    slot_call = prepare_prefill(*args)
    cache = DequantCache()
    prepare_prefill(*args, dequant_cache=cache)
    whole_call = prepare_prefill(*args, dequant_cache=cache)
    assert cache.builds == 1 and whole_call.kv.shape[0] == p.kv_cache.numel() // 656 + 1
    assert torch.equal(slot_call.q, whole_call.q) and torch.equal(slot_call.topk_length, whole_call.topk_length)
    n_q, _, width = slot_call.indices.shape
    attended = torch.arange(width) < slot_call.topk_length.long().unsqueeze(1)
    for call in (slot_call, whole_call):
        assert call.indices.dtype == torch.int32 and call.indices.shape == (n_q, 1, width)
    slot_idx, whole_idx = slot_call.indices.view(n_q, width).long(), whole_call.indices.view(n_q, width).long()
    assert torch.equal(slot_idx == -1, whole_idx == -1)
    read = attended & (slot_idx >= 0)
    slot_keys = slot_call.kv.view(-1, 576)[slot_idx.clamp_min(0)][read]
    whole_keys = whole_call.kv.view(-1, 576)[whole_idx.clamp_min(0)][read]
    assert read.any() or not torch.any(p.indptr[1:] > p.indptr[:-1])
    assert torch.equal(_bits(slot_keys), _bits(whole_keys))


def test_whole_cache_rows_match_the_per_record_dequantisation() -> None:
    from kernel.peers.keys import dequantise_bf16

    p, _ = _problem(RECIPES[1])
    flat = p.kv_cache.view(-1, 656)
    whole = dequantise_whole(p.kv_cache, chunk_rows=100)  # several build passes
    assert torch.equal(_bits(whole[:-1]), _bits(dequantise_bf16(flat.contiguous())))
    assert torch.equal(_bits(whole[-1]), torch.zeros(576, dtype=torch.int16))


def test_written_cache_is_dequantised_again() -> None:
    p, args = _problem(RECIPES[1])
    backend = backend_from_adapter(torch_sdpa.ADAPTER)
    backend(*args, has_invalid=p.has_invalid, return_lse=True)
    backend(*args, has_invalid=p.has_invalid, return_lse=True)  # kept now
    p.kv_cache.view(-1, 656)[:, 528:540] = 0x3C  # rope of every record changed in place
    got = backend(*args, has_invalid=p.has_invalid, return_lse=True)
    want = run_torch_sdpa(*args, has_invalid=p.has_invalid, return_lse=True)
    assert torch.equal(_bits(got[0]), _bits(want[0])) and torch.equal(_bits(got[1]), _bits(want[1]))


def test_cache_policy() -> None:
    kv = torch.zeros(100, 656, dtype=torch.uint8)
    cache = DequantCache()
    assert cache.get(kv, slots=50) is None  # more rows than slots, first sight
    assert cache.get(kv, slots=50) is not None and cache.builds == 1  # the same cache again
    assert cache.get(kv, slots=50) is not None and cache.builds == 1  # kept
    other = torch.zeros(10, 656, dtype=torch.uint8)
    assert cache.get(other, slots=64) is not None and cache.builds == 2  # few rows: built at once
    del other
    gc.collect()
    assert cache._bf16 is None  # the copy goes with its source
    assert DequantCache(max_bytes=1000).get(kv, slots=1 << 20) is None  # over the size limit
    with torch.inference_mode():
        frozen = torch.zeros(10, 656, dtype=torch.uint8)
    assert cache.get(frozen, slots=64) is None  # no version counter: never kept


def test_sdpa_call_has_no_host_sync() -> None:
    p, args = _problem(RECIPES[0])
    backend = backend_from_adapter(torch_sdpa.ADAPTER)
    for _ in range(2):
        backend(*args, return_lse=True)
    for fresh in (False, True):
        call_args = (args[0], p.kv_cache.clone(), *args[2:]) if fresh else args
        with OpCounter() as ops:
            backend(*call_args, return_lse=True)
        assert "_local_scalar_dense" not in ops.ops and "nonzero" not in ops.ops
    with OpCounter() as ops:
        prepare_prefill(*args, dequant_cache=DequantCache())
    assert "_local_scalar_dense" not in ops.ops and "nonzero" not in ops.ops
