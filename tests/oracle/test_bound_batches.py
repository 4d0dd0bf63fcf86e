"""The bound's batches of chunks (oracle.rows.chunk_plan_batches): the same bits as one chunk at a
time, the same first broken precondition, and a number of host reads and operations that does not
grow with the number of chunks."""

from __future__ import annotations

import pytest
import torch

from conformance.tools.op_count import SCALAR_READS, OpCounter
from oracle import rows
from oracle.bound import evaluate_modes
from oracle.profiles import load_profile
from oracle.rows import PreconditionError
from strategies.materialize import materialize
from strategies.recipe import Recipe

_INT_VIEW = {8: torch.int64, 4: torch.int32, 2: torch.int16}

FIELDS = ("out", "lse", "out_bound", "lse_bound", "window")

RECIPES = {
    "uniform": Recipe(seed=1, n_q=12, heads=3, row_lengths=(40,) * 12, cache_rows=300),
    "ragged": Recipe(seed=2, n_q=9, heads=4, row_lengths=(40, 40, 7, 40, 0, 13, 13, 40, -2), cache_rows=200),
    "invalid": Recipe(
        seed=3,
        n_q=10,
        heads=2,
        row_lengths=(30,) * 10,
        cache_rows=200,
        invalid_pattern="scattered",
        invalid_permille=700,
        has_invalid=True,
        poison=True,
    ),
    "invalid_rows": Recipe(seed=4, n_q=8, heads=2, row_lengths=(20,) * 8, cache_rows=100, invalid_pattern="leading_tile", has_invalid=True),
    # short rows, most entries masked: rows without a valid key dropped inside a batch
    "keyless_rows": Recipe(
        seed=7,
        n_q=40,
        heads=3,
        row_lengths=(3,) * 40,
        cache_rows=64,
        invalid_pattern="scattered",
        invalid_permille=800,
        has_invalid=True,
    ),
}


def test_keyless_rows_are_dropped_with_their_chunks() -> None:
    p = materialize(RECIPES["keyless_rows"], "cpu")
    start, length = rows.row_bounds(p.indptr)
    (plan,) = rows.chunk_plan_batches(length, key_budget=30, batch_budget=1 << 20)
    chunk = rows.gather_bound_batch(plan, start, length, p.indices, p.kv_cache, has_invalid=True)
    assert chunk is not None and chunk.segment is not None and plan.n_segments == 4
    assert 0 < chunk.rows.numel() < plan.rows.numel()
    assert torch.equal(chunk.segment, torch.searchsorted(torch.tensor([10, 20, 30]), _positions(plan.rows, chunk.rows), right=True))


def _positions(batch_rows: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """Where each kept row sits in the batch's rows."""
    return torch.tensor([batch_rows.tolist().index(r) for r in kept.tolist()])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = _INT_VIEW[a.element_size()]
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


def test_batch_plan_keeps_the_chunks() -> None:
    """Batches are runs of chunk_plan's chunks of one width, in order, with their row counts."""
    length = torch.tensor([5, 40, 40, 0, 40, 7, 40, 40, 13, 40])
    chunks = rows.chunk_plan(length, key_budget=80)  # width 40: 3 chunks of 2 rows; width 13: rows 8, 5, 0
    plans = rows.chunk_plan_batches(length, key_budget=80, batch_budget=1 << 20)
    assert torch.equal(torch.cat([p.rows for p in plans]), torch.cat(chunks))
    assert [(p.width, p.segment_rows, p.n_segments, p.full, p.rows.numel()) for p in plans] == [(40, 2, 3, True, 6), (13, 3, 1, False, 3)]
    # a batch holds at most batch_budget slots (or one chunk)
    small = rows.chunk_plan_batches(length, key_budget=80, batch_budget=160)
    assert [p.n_segments for p in small] == [2, 1, 1]


@pytest.mark.parametrize("profile_name", ["gfx950", "bf16-q-bf16-p", "sglang-triton-decode"])
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_batches_bit_identical_to_chunks(name: str, profile_name: str) -> None:
    p = materialize(RECIPES[name], "cpu")
    args = p.args
    profile = load_profile(profile_name)
    kw = {"profile": profile, "has_invalid": p.has_invalid, "key_budget": 30 if name == "keyless_rows" else 60}
    one = evaluate_modes(*args, batch_budget=1, **kw)  # every chunk its own batch
    merged = evaluate_modes(*args, batch_budget=1 << 20, **kw)
    for mode in one:
        for field in FIELDS:
            assert _same(getattr(one[mode], field), getattr(merged[mode], field)), (mode, field)


def test_first_broken_chunk_named_across_a_batch() -> None:
    """Two chunks of one batch break different preconditions: the first chunk's is raised (NaN
    codes), not the one a check over the whole batch would name first (the scale)."""
    p = materialize(Recipe(seed=5, n_q=6, heads=2, row_lengths=(30,) * 6, cache_rows=4096), "cpu")
    args = p.args
    start, length = rows.row_bounds(p.indptr)
    order = torch.argsort(length, descending=True, stable=True).tolist()

    def read(row_ids: list[int]) -> set[int]:
        return {int(x) for r in row_ids for x in p.indices[int(start[r]) : int(start[r] + length[r])]}

    chunk0, chunk1 = read(order[0:2]), read(order[2:4])  # key_budget 60: two rows per chunk
    flat = p.kv_cache.view(-1, 656)
    flat[min(chunk0), 0] = 0x7F
    flat[min(chunk1 - chunk0), 512:516] = torch.tensor([1.5], dtype=torch.float32).view(torch.uint8)
    messages = []
    for batch in (1, 1 << 20):
        with pytest.raises(PreconditionError) as err:
            evaluate_modes(*args, profile=load_profile("gfx950"), key_budget=60, batch_budget=batch)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "NaN codes" in messages[0]


def test_ops_and_syncs_do_not_grow_with_chunks() -> None:
    """48 chunks in one batch cost the operations and host reads of 1 chunk."""
    counts = []
    for n_q in (1, 48):
        p = materialize(Recipe(seed=6, n_q=n_q, heads=4, row_lengths=(64,) * n_q, cache_rows=256), "cpu")
        args = p.args
        with OpCounter() as count:
            evaluate_modes(*args, profile=load_profile("gfx950"), key_budget=64, batch_budget=1 << 20)
        counts.append((count.total, count.count(SCALAR_READS)))
    (ops1, syncs1), (ops48, syncs48) = counts
    assert syncs48 == syncs1 <= 4
    assert ops48 <= ops1 + 10


@pytest.mark.parametrize("profile_name", ["gfx950", "fp32", "flashmla-sparse-prefill"])
def test_modes_share_one_pass_of_the_bound(profile_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the GPU's grouping (oracle.bound.mode_groups: both modes in one stacked pass) both
    comparison modes cost about one mode's device operations, not two (separate passes cost
    1.5-1.6x one mode's operations), and give the bits of one pass per mode (the CPU's grouping).
    Launched ops as op_count counts them."""
    from conformance.tools.op_count import count_ops
    from oracle import bound

    p = materialize(Recipe(seed=3, n_q=4, heads=8, row_lengths=(40, 7, 0, 90), cache_rows=256))
    profile = load_profile(profile_name)
    args = p.args
    assert bound.mode_groups(2, torch.device("cpu")) == ((0,), (1,))
    assert bound.mode_groups(2, torch.device("cuda")) == ((0, 1),) and bound.mode_groups(1, torch.device("cuda")) == ((0,),)
    separate = evaluate_modes(*args, profile=profile)
    monkeypatch.setattr(bound, "mode_groups", lambda n, device: (tuple(range(n)),))
    stacked = evaluate_modes(*args, profile=profile)
    for mode in bound.MODES:
        for field in FIELDS:
            assert _same(getattr(stacked[mode], field), getattr(separate[mode], field)), (mode, field)

    def launched(modes: tuple[str, ...]) -> int:
        call = lambda: evaluate_modes(*args, profile=profile, modes=modes)  # noqa: E731
        return sum(count_ops(call).launched.values())

    alone = max(launched(("exact-steps",)), launched(("float64",)))
    assert launched(("float64", "exact-steps")) <= 1.15 * alone
