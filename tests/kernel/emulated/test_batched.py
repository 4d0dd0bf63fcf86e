"""The emulated kernel's batched tiles (run_emulated(batch_tiles=True)) against its per-tile loop,
bit for bit, and the launches it saves."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conformance.tools.op_count import SCALAR_READS, OpCounter
from kernel.emulated import gfx950 as emulated
from kernel.emulated.gfx950 import DEFAULT_STAGES, run_emulated, tiles_batchable
from strategies.materialize import materialize
from strategies.recipe import Recipe


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


RECIPES = [
    # ragged rows: rows end inside a group of tiles (masked past their count), empty and negative rows
    Recipe(seed=1, n_q=7, heads=5, row_lengths=(700, 1, 0, 129, -4, 300, 257), cache_rows=900),
    # has_invalid tails: a row's tile count stops at its last valid entry
    Recipe(
        seed=2,
        n_q=4,
        heads=16,
        row_lengths=(600, 40, 0, 390),
        cache_rows=1024,
        invalid_pattern="tail",
        invalid_permille=400,
        has_invalid=True,
    ),
    Recipe(
        seed=3,
        n_q=3,
        heads=3,
        row_lengths=(450, 90, 260),
        cache_rows=700,
        invalid_pattern="scattered",
        invalid_permille=500,
        has_invalid=True,
        poison=True,
    ),
    Recipe(seed=4, n_q=3, heads=4, row_lengths=(520, 33, 128), cache_rows=512, latent="above_cap", softmax_scale=-0.05),
    Recipe(seed=5, n_q=2, heads=2, row_lengths=(300, 20), cache_rows=128, corruptions=({"kind": "nan_codes", "count": 3},)),
    Recipe(seed=6, n_q=3, heads=4, row_lengths=(400, 40, 260), cache_rows=512, corruptions=({"kind": "zero_scale", "count": 6},)),
    Recipe(seed=7, n_q=5, heads=7, row_lengths=(260, 255, 256, 5, 600), cache_rows=400, index_pattern="duplicates", q="tiny_blocks"),
]


@pytest.mark.parametrize("budget", [None, 128, 640])
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: f"seed{r.seed}")
def test_batched_tiles_bit_identical_to_loop(recipe: Recipe, budget: int | None) -> None:
    p = materialize(recipe, "cpu")
    args = p.args
    kw = {"has_invalid": p.has_invalid, "return_lse": True, "row_key_budget": budget}
    loop_out, loop_lse = run_emulated(*args, batch_tiles=False, **kw)
    for group_slots in (1 << 10, 1 << 19):  # a CPU-sized group and one group for the whole chunk
        saved = emulated.TILE_GROUP_SLOTS["cpu"]
        emulated.TILE_GROUP_SLOTS["cpu"] = group_slots
        try:
            out, lse = run_emulated(*args, batch_tiles=True, **kw)
        finally:
            emulated.TILE_GROUP_SLOTS["cpu"] = saved
        assert torch.equal(_bits(out), _bits(loop_out))
        assert torch.equal(_bits(lse), _bits(loop_lse))


def test_batched_tiles_with_a_replaced_tile_count() -> None:
    """A variant whose tile_count stops early (a pre-loop stage) still runs batched and stops
    exactly where the loop does: tiles past a row's count are masked, not computed."""

    def short_count(indices, r_beg, r_len, has_invalid):  # type: ignore[no-untyped-def]
        return (emulated.tile_count(indices, r_beg, r_len, has_invalid) - 1).clamp_min(0)

    stages = dataclasses.replace(DEFAULT_STAGES, tile_count=short_count)
    assert tiles_batchable(stages)
    p = materialize(RECIPES[0], "cpu")
    # cache row 0 (what a masked slot reads) scores far above every key for each row's heads:
    # a tile past a row's count that were computed would raise that row's m
    rope = torch.full((64,), 256.0, dtype=torch.bfloat16) * torch.sign(p.q[..., 512:].float().sum(dim=(0, 1))).to(torch.bfloat16)
    p.kv_cache.view(-1, 656)[0, 528:] = rope.view(torch.uint8)
    args = p.args
    loop = run_emulated(*args, return_lse=True, stages=stages, batch_tiles=False)
    saved = emulated.TILE_GROUP_SLOTS["cpu"]
    emulated.TILE_GROUP_SLOTS["cpu"] = 1 << 19  # one group: rows end inside it
    try:
        batched = run_emulated(*args, return_lse=True, stages=stages, batch_tiles=True)
    finally:
        emulated.TILE_GROUP_SLOTS["cpu"] = saved
    assert torch.equal(_bits(batched[0]), _bits(loop[0])) and torch.equal(_bits(batched[1]), _bits(loop[1]))
    full = run_emulated(*args, return_lse=True)
    assert not torch.equal(_bits(full[0]), _bits(batched[0]))  # the variant does compute something else


def test_replaced_tile_stage_runs_the_loop() -> None:
    assert tiles_batchable(DEFAULT_STAGES)
    for name in ("load_slots", "gather_records", "qk_scores", "online_softmax", "scale_p", "pv_accumulate"):
        stages = dataclasses.replace(DEFAULT_STAGES, **{name: lambda *a: None})
        assert not tiles_batchable(stages), name


def test_batched_call_launches_and_syncs() -> None:
    """8 tiles of one row: the batched call dispatches under a third of the loop's ops, and reads
    device data back twice (the chunk's tile counts, the slot check at the end)."""
    p = materialize(Recipe(seed=9, n_q=1, heads=2, row_lengths=(1024,), cache_rows=4096), "cpu")
    args = p.args
    counts = {}
    for batched in (False, True):
        saved = emulated.TILE_GROUP_SLOTS["cpu"]
        emulated.TILE_GROUP_SLOTS["cpu"] = 1 << 19
        try:
            with OpCounter() as ops:
                run_emulated(*args, return_lse=True, batch_tiles=batched)
        finally:
            emulated.TILE_GROUP_SLOTS["cpu"] = saved
        counts[batched] = ops
    assert counts[True].total * 3 < counts[False].total
    assert counts[True].count(SCALAR_READS) <= 1  # int(peak) in check_slots; the tile counts come back through tolist


def test_batched_ops_per_tile() -> None:
    """In one group, each further tile costs the running-state updates only: m (1 op), l (2),
    o (5), with the per-tile views taken once per group: at most 10 dispatched ops a tile."""
    counts = []
    for keys in (1024, 2048):
        p = materialize(Recipe(seed=10, n_q=2, heads=4, row_lengths=(keys, keys), cache_rows=4096), "cpu")
        args = p.args
        saved = emulated.TILE_GROUP_SLOTS["cpu"]
        emulated.TILE_GROUP_SLOTS["cpu"] = 1 << 19
        try:
            run_emulated(*args, return_lse=True, batch_tiles=True)  # cached tables built
            with OpCounter() as ops:
                run_emulated(*args, return_lse=True, batch_tiles=True)
        finally:
            emulated.TILE_GROUP_SLOTS["cpu"] = saved
        counts.append(ops.total)
    assert counts[1] - counts[0] <= 10 * 8  # 8 more tiles
