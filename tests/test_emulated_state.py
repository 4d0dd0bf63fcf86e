"""The emulated kernel's Triton kernels (kernel/backends/emulated_state.py: the running-state
updates, emulated_scores.py: the QK accumulation), under Triton's CPU interpreter, against the
torch operations, bit for bit, on their probes and through run_emulated; the probes' comparison
tells a one-ulp change apart."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kernel.backends import emulated, emulated_scores, emulated_state
from strategies.materialize import materialize
from strategies.recipe import Recipe

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


@needs_triton
def test_kernel_matches_torch_on_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert emulated_state.usable(torch.device("cpu"))
    assert emulated_state.self_check(torch.device("cpu"), emulated.lane_sums)
    assert emulated_scores.self_check(torch.device("cpu"))


def test_probe_comparison_sees_one_ulp() -> None:
    buffer, alpha, p, terms, counts = emulated_state.probe_inputs(torch.device("cpu"))
    a = buffer.clone()
    emulated_state.advance_torch(a, alpha, p, terms, counts, emulated.lane_sums)
    b = a.clone()
    assert emulated_state._same(a, b)
    finite = torch.isfinite(b).flatten().nonzero()[3]
    b.view(-1).view(torch.int32)[finite] += 1
    assert not emulated_state._same(a, b)


def test_rows_past_their_count_keep_their_state() -> None:
    buffer, alpha, p, terms, counts = emulated_state.probe_inputs(torch.device("cpu"))
    after = buffer.clone()
    emulated_state.advance_torch(after, alpha, p, terms, counts, emulated.lane_sums)
    assert counts[-1] == 0
    assert torch.equal(_bits(after[-1]), _bits(buffer[-1]))
    assert not torch.equal(_bits(after[0]), _bits(buffer[0]))


@needs_triton
def test_run_emulated_with_the_kernel_matches_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    p = materialize(Recipe(seed=3, n_q=3, heads=2, row_lengths=(300, 40, 129), cache_rows=256, latent="above_cap"), "cpu")
    args = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
    loop = emulated.run_emulated(*args, return_lse=True, batch_tiles=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(emulated.TILE_GROUP_SLOTS, "cpu", 1 << 19)
    cpu = torch.device("cpu")
    assert emulated_state.kernel_available(cpu, emulated.lane_sums) and emulated_scores.kernel_available(cpu)
    out, lse = emulated.run_emulated(*args, return_lse=True, batch_tiles=True)
    assert torch.equal(_bits(out), _bits(loop[0])) and torch.equal(_bits(lse), _bits(loop[1]))
