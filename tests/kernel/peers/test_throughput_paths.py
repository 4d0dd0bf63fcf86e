"""The throughput fast paths compute what the plain ones do: word gathers of records, the
contract prologue, the adapters' index-layout cache, and the SDPA adapter's aligned query."""

from __future__ import annotations

import torch

from kernel.contract import begin_call
from kernel.peers import torch_sdpa
from kernel.peers.plumbing import LayoutCache
from kernel.peers.protocol import run_peer
from kernel.record import RECORD_BYTES, index_records, record_words


def _cache(rows: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (rows, RECORD_BYTES), generator=gen, dtype=torch.int32).to(torch.uint8)


def test_record_words_pick_the_widest_word_the_address_allows() -> None:
    flat = _cache(8)
    assert record_words(flat).dtype == torch.int64
    buf = torch.zeros(8 * RECORD_BYTES + 16, dtype=torch.uint8)
    for offset, dtype in ((4, torch.int32), (2, torch.int16), (1, torch.uint8)):
        view = buf[offset : offset + 8 * RECORD_BYTES].view(8, RECORD_BYTES)
        assert record_words(view).dtype == dtype, offset


def test_index_records_equals_byte_indexing_at_every_alignment() -> None:
    rows = 50
    source = _cache(rows, seed=1)
    slots = torch.randint(0, rows, (300,), generator=torch.Generator().manual_seed(2))
    for offset in (0, 1, 2, 4, 8):
        buf = torch.zeros(rows * RECORD_BYTES + 8, dtype=torch.uint8)
        flat = buf[offset : offset + rows * RECORD_BYTES].view(rows, RECORD_BYTES)
        flat.copy_(source)
        for index in (slots, slots.to(torch.int32)):
            assert torch.equal(index_records(flat, index), flat[slots]), offset


def _call(n_q: int, heads: int = 2) -> tuple[torch.Tensor, ...]:
    q = torch.zeros(n_q, heads, 576, dtype=torch.bfloat16)
    kv = _cache(4)
    indices = torch.zeros(3 * n_q, dtype=torch.int32)
    indptr = torch.arange(0, 3 * n_q + 1, 3, dtype=torch.int32)
    return q, kv, indices, indptr


def test_begin_call_returns_the_empty_outputs_only_for_no_rows() -> None:
    q, kv, indices, indptr = _call(0)
    info, empty = begin_call(q, kv, indices, indptr, 0.1, return_lse=True)
    assert info.n_q == 0 and empty is not None
    assert empty[0].shape == (0, 2, 512) and empty[1] is not None and empty[1].shape == (0, 2)
    out = torch.empty(0, 2, 512, dtype=torch.bfloat16)
    assert begin_call(q, kv, indices, indptr, 0.1, out=out)[1] == (out, None)
    info, empty = begin_call(*_call(3), 0.1)
    assert info.n_q == 3 and empty is None


def test_layout_cache_hits_only_the_same_unchanged_index_tensors() -> None:
    cache = LayoutCache(capacity=2)
    built: list[int] = []

    def build() -> int:
        built.append(1)
        return len(built)

    indices = torch.arange(6, dtype=torch.int32)
    indptr = torch.tensor([0, 3, 6], dtype=torch.int32)
    assert cache.get(indices, indptr, ("p",), build) == 1
    assert cache.get(indices, indptr, ("p",), build) == 1  # same tensors, unchanged: reused
    assert cache.get(indices, indptr, ("other",), build) == 2  # other parameters
    assert cache.get(indices.clone(), indptr, ("p",), build) == 3  # equal values, another tensor
    indices[1:2].add_(1)  # an in-place write through a view bumps the version counter
    assert cache.get(indices, indptr, ("p",), build) == 4
    assert len(cache._entries) == 2  # capacity


def test_sdpa_adapter_hands_the_kernel_a_16_byte_aligned_query(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []
    original = torch_sdpa._attention

    def spy(q4: torch.Tensor, keys: torch.Tensor, bias: torch.Tensor, scale: float):  # type: ignore[no-untyped-def]
        seen.extend(t.data_ptr() % 16 for t in (q4, keys, keys[..., :512], bias))
        return original(q4, keys, bias, scale)

    monkeypatch.setattr(torch_sdpa, "_attention", spy)
    gen = torch.Generator().manual_seed(3)
    kv = _cache(16)
    kv[:, 512:528] = torch.tensor([0, 0, 128, 59] * 4, dtype=torch.uint8)  # scales 2^-8
    kv[:, :512] &= 0x77  # finite codes
    kv[:, 528:] = 0
    # one row of one head taken from a q with padded strides: contiguous, data_ptr % 16 == 8
    buf = torch.randn(2 * 580, generator=gen).to(torch.bfloat16)
    q = buf.as_strided((2, 1, 576), (580, 580, 1))[1:2]
    assert q.is_contiguous() and q.data_ptr() % 16 == 8
    indices = torch.arange(10, dtype=torch.int32)
    indptr = torch.tensor([0, 10], dtype=torch.int32)
    out, lse = run_peer(torch_sdpa.ADAPTER, q, kv, indices, indptr, 0.1, return_lse=True)
    assert seen and all(m == 0 for m in seen), seen
    ref, ref_lse = run_peer(torch_sdpa.ADAPTER, q.clone(), kv, indices, indptr, 0.1, return_lse=True)
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16)) and lse is not None and torch.equal(lse, ref_lse)


def test_fuzz_chunk_cut_by_the_budget_ends_cleanly(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """A nightly chunk of 1000 examples (--chunk-examples) always outlives a 2 s budget: the chunk stops at the
    deadline, and the campaign still ends clean (exit 0, no 'Hypothesis stopped': a test case
    that drew less once time was up would be inconsistent data generation to Hypothesis)."""
    from conformance.cli import main

    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))
    args = "fuzz --kernel emulated --seconds 2 --hypothesis-profile nightly --chunk-examples 1000 --property preconditions --no-save"
    code = main(args.split())
    out = capsys.readouterr().out
    assert code == 0 and "Hypothesis stopped" not in out, out
