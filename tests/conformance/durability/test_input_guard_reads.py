"""The input guard after a clean call reads the host once, and still names every write."""

from __future__ import annotations

import torch

from conformance.durability import input_guard
from conformance.tools.op_count import count_ops
from strategies.materialize import materialize
from strategies.recipe import Recipe


def _problem(**kw: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    p = materialize(Recipe(n_q=3, heads=4, row_lengths=(5, 0, 9), cache_rows=64, seed=3, **kw))  # type: ignore[arg-type]
    return p.q, p.kv_cache, p.indices, p.indptr


def test_a_clean_call_costs_one_host_read() -> None:
    args = _problem()
    snap = input_guard.snapshot(*args)
    counter = count_ops(lambda: snap.changes(*args))
    assert counter.syncs == {"tolist": 1}, counter.syncs
    assert snap.changes(*args) == []


def test_the_copies_hold_the_logical_bytes_of_any_layout() -> None:
    base = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8).to(torch.bfloat16)
    for t in (base, base.transpose(0, 1), base[:, :1].expand(2, 3, 8), base[:, :, ::2]):
        assert torch.equal(input_guard._bytes(t), t.contiguous().view(torch.uint8).reshape(-1))


def test_each_written_input_is_named_on_its_own() -> None:
    for layout in ("rows", "shared_heads"):
        q, kv, indices, indptr = _problem(q_layout=layout)
        snap = input_guard.snapshot(q, kv, indices, indptr)
        kv[5, 100] ^= 1
        assert snap.changes(q, kv, indices, indptr) == ["the kernel wrote into kv_cache at rows [5] (1 records changed)"]
        kv[5, 100] ^= 1
        indptr[2] += 1
        assert snap.changes(q, kv, indices, indptr) == ["the kernel wrote into indptr at positions [2] (1 entries changed)"]
        indptr[2] -= 1
        q[0, 0, 0] = 7.0  # every head of a shared layout sees it
        (message,) = snap.changes(q, kv, indices, indptr)
        assert message.startswith("the kernel wrote into q at (row, head, dim) [(0, 0, 0)"), message
        indices[1:3] = -5
        assert snap.changes(q, kv, indices, indptr)[-1] == "the kernel wrote into indices at positions [1, 2] (2 entries changed)"


def test_inputs_are_compared_by_their_bits_where_they_are() -> None:
    """NaN compares equal to itself and -0.0 differs from 0.0 (bits, not values), in a strided q
    (a shared-heads layout: stride 0), with no copy of an input after the call."""
    q, kv, indices, indptr = _problem(q_layout="shared_heads")
    q[0, 0, 1] = float("nan")
    q[1, 0, 2] = 0.0
    snap = input_guard.snapshot(q, kv, indices, indptr)
    counter = count_ops(lambda: snap.changes(q, kv, indices, indptr))
    assert counter.ops["clone"] == 0, counter.ops
    assert snap.changes(q, kv, indices, indptr) == []
    q[1, 0, 2] = -0.0
    (message,) = snap.changes(q, kv, indices, indptr)
    assert message.startswith("the kernel wrote into q at (row, head, dim) [(1, 0, 2)"), message
