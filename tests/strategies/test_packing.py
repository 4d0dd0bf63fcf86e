"""Packs (strategies.recipe, "Packs"; strategies.materialize.materialize_pack): one call holding several recipes'
rows. Each row of a pack reads what that row of its part reads alone, so a kernel computing rows
on their own returns every row's bits as for the part alone; a pack's fields follow from its
parts; a recipe of its own keeps its JSON (no parts key, same content hash); the strategy never
draws a pack larger than its limits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from conformance.judging.harness import call_kernel
from conformance.records.corpus import recipe_hash
from kernel.registry import resolve
from strategies import fresh, hypothesis_recipes
from strategies import materialize as materialize_module
from strategies.hypothesis_recipes import PART_FILL, packs
from strategies.materialize import materialize
from strategies.recipe import Recipe, RecipeError, memory_estimate

CALL = {"heads": 4, "softmax_scale": "peaked", "has_invalid": True, "return_lse": True}
PARTS = (
    # a poisoned cache, a stream with an offset, a step back, a tail and garbage between the slices
    Recipe(
        seed=1,
        n_q=3,
        row_lengths=(5, -2, 130),
        cache_rows=300,
        stream_offset=3,
        invalid_pattern="scattered",
        invalid_permille=300,
        poison=True,
        unconsumed="garbage",
        stream_tail=7,
        **CALL,
    ),
    Recipe(seed=2, n_q=2, row_lengths=(0, 257), cache_rows=64, index_pattern="duplicates", latent="heavy", cache_shape=(4, 16), **CALL),
    Recipe(seed=3, n_q=1, row_lengths=(40,), cache_rows=1000, writer="pow2-floor", invalid_pattern="tail", **CALL),
)


def _rows_match_parts(pack: Recipe) -> None:
    kernel = resolve("emulated")
    out, lse = call_kernel(materialize(pack), kernel)
    first = 0
    for part in pack.parts:
        alone_out, alone_lse = call_kernel(materialize(part), kernel)
        rows = slice(first, first + part.n_q)
        assert torch.equal(out[rows].view(torch.int16), alone_out.view(torch.int16)), part
        if part.return_lse:
            assert torch.equal(lse[rows].view(torch.int32), alone_lse.view(torch.int32)), part
        first += part.n_q
    assert first == out.shape[0]


def _tensors_match_parts(pack: Recipe) -> None:
    """The pack's q rows, cache rows and consumed index entries are its parts' alone (entries
    offset by the cache rows before the part's), byte for byte."""
    problem = materialize(pack)
    first_q = first_row = 0
    for part in pack.parts:
        alone = materialize(part)
        assert torch.equal(problem.q[first_q : first_q + part.n_q].view(torch.int16), alone.q.contiguous().view(torch.int16)), part
        assert torch.equal(problem.kv_cache[first_row : first_row + part.cache_rows], alone.kv_cache.reshape(-1, 656)), part
        for row in range(part.n_q):
            begin, end = int(alone.indptr[row]), int(alone.indptr[row]) + max(part.row_lengths[row], 0)
            mine = alone.indices[begin:end].to(torch.int64)
            at = first_q + row
            packed = problem.indices[int(problem.indptr[at]) : int(problem.indptr[at + 1])].to(torch.int64)
            assert torch.equal(packed, torch.where(mine >= 0, mine + first_row, mine)), (part, row)
        first_q, first_row = first_q + part.n_q, first_row + part.cache_rows


@pytest.mark.parametrize(
    "parts",
    [
        PARTS,
        # every writer and data kind the parts of a pack draw, so the parts are built together
        tuple(
            Recipe(seed=10 + i, n_q=2, row_lengths=(9, 3), cache_rows=50, writer=w, latent=lat, rope=rope, q=q, poison=i % 2 == 1, **CALL)
            for i, (w, lat, rope, q) in enumerate(
                [
                    ("pow2", "outliers", "large", "zero_blocks"),
                    ("raw", "zero_blocks", "zero", "tiny_blocks"),
                    ("pow2-floor", "max57344", "tiny", "large"),
                    ("pow2", "tiny_blocks", "normal", "tiny"),
                    ("raw", "large", "normal", "normal"),
                ]
            )
        ),
        # an exact part: each part is materialised alone and copied
        (
            PARTS[2],
            Recipe(
                seed=4,
                n_q=1,
                row_lengths=(6,),
                cache_rows=20,
                latent="exact",
                rope="exact",
                q="exact",
                softmax_scale="peaked",
                heads=4,
                has_invalid=True,
                return_lse=True,
            ),
        ),
    ],
    ids=["hand-made", "every-writer-and-kind", "exact-part"],
)
def test_a_pack_holds_its_parts_tensors(parts: tuple[Recipe, ...]) -> None:
    _tensors_match_parts(Recipe.pack(parts))


def test_each_row_of_a_pack_gets_the_bits_of_its_part_alone() -> None:
    pack = Recipe.pack(PARTS)
    assert pack.n_q == 6 and pack.row_lengths == (5, 0, 130, 0, 257, 40) and pack.cache_rows == 1364
    problem = materialize(pack)
    assert problem.kv_cache.shape == (1364, 656) and problem.q.is_contiguous() and problem.out is None
    assert problem.indptr.tolist() == [0, 5, 5, 135, 135, 392, 432]
    _rows_match_parts(pack)


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(packs(max_parts=4, max_n_q=12, max_total_keys=600, max_heads=4))
def test_drawn_packs_keep_their_parts_rows_and_limits(recipe: Recipe) -> None:
    assert recipe.n_q <= 12 and recipe.total_keys <= 600
    if recipe.parts:
        assert 2 <= len(recipe.parts) <= 4
        assert Recipe.from_json(recipe.to_json()) == recipe
        _tensors_match_parts(recipe)
        _rows_match_parts(recipe)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(packs(max_parts=8, max_n_q=40, max_total_keys=300, max_row=400, max_heads=2))
def test_a_packs_rows_and_keys_are_capped_as_a_call_alone(recipe: Recipe) -> None:
    assert recipe.n_q <= 40 and recipe.total_keys <= 300  # the call's cap spreads over every part's rows
    if len(recipe.parts) < 8:  # the parts filled the call's rows: its rows are the ones drawn for it
        part_rows = -(-PART_FILL * recipe.n_q // 8)
        assert all(part.n_q <= part_rows for part in recipe.parts)


@pytest.mark.parametrize("call_rows", [1, 3, 37, 256])
def test_a_packed_call_has_the_query_rows_a_call_alone_draws(monkeypatch: pytest.MonkeyPatch, call_rows: int) -> None:
    # the batch sizes a kernel sees do not move with packing: a pack draws its call's rows as a
    # recipe draws its own (_query_rows) and fills them with parts; here every draw of rows
    # takes its largest value, so the call has exactly call_rows rows, over several parts
    monkeypatch.setattr(hypothesis_recipes, "_query_rows", st.just)
    drawn: list[Recipe] = []

    @settings(max_examples=5, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(packs(max_parts=64, max_n_q=call_rows, max_total_keys=4096, max_row=300, max_heads=2))
    def collect(recipe: Recipe) -> None:
        drawn.append(recipe)

    collect()
    assert drawn and all(r.n_q == call_rows for r in drawn)
    parts = -(-call_rows // -(-PART_FILL * call_rows // 64))  # each part at its largest: 1, 3, 13 and 16 of them
    assert all(max(1, len(r.parts)) == parts for r in drawn)


def test_a_pack_draws_as_many_parts_as_it_may_and_shrinks_them_away() -> None:
    # every part drawn from the test's choices; one seed: the search's and the shrink's outcome
    # do not vary from run to run
    search = settings(database=None, derandomize=True, max_examples=200, suppress_health_check=list(HealthCheck))
    drawn = packs(max_parts=6, max_n_q=64, max_total_keys=4096, max_heads=2, fresh_parts=False)
    full = find(drawn, lambda r: len(r.parts) == 6, settings=search)
    assert len(full.parts) == 6 and full.n_q == 6  # the call's rows shrink to one per part
    two = find(drawn, lambda r: len(r.parts) >= 2, settings=search)
    assert len(two.parts) == 2 and two.n_q == 2  # toward one part


def test_a_pack_with_fresh_parts_shrinks_its_rows_and_its_drawn_part() -> None:
    # the fresh parts are not the test's choices: the shrink reaches the call's rows and the first
    # part (one row, the simplest recipe), the others are what the seed of that pack gives
    search = settings(database=None, derandomize=True, max_examples=200, suppress_health_check=list(HealthCheck))
    two = find(packs(max_parts=6, max_n_q=64, max_total_keys=4096, max_heads=2), lambda r: len(r.parts) >= 2, settings=search)
    first = two.parts[0]
    assert len(two.parts) == 2 and two.n_q == 2
    assert (first.n_q, first.row_lengths, first.latent, first.q, first.seed) == (1, (1,), "normal", "normal", 0)


@pytest.mark.skipif(not fresh.available(), reason="this Hypothesis has no fresh draws (strategies.fresh)")
def test_packs_hypothesis_builds_hold_new_parts() -> None:
    # Hypothesis builds most examples from earlier ones (a span copied over another, one choice
    # changed), which repeats the parts a pack draws from the test's choices; fresh parts are
    # drawn anew whenever anything before them changes
    def distinct_share(fresh_parts: bool) -> float:
        parts: list[str] = []

        @settings(max_examples=150, database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
        @given(packs(max_parts=16, max_n_q=64, max_total_keys=4096, max_heads=2, fresh_parts=fresh_parts))
        def collect(recipe: Recipe) -> None:
            parts.extend(part.to_json() for part in recipe.parts or (recipe,))

        collect()
        return len(set(parts)) / len(parts)

    assert distinct_share(True) > 0.9 > 0.5 > distinct_share(False)


def test_a_part_packed_again_reuses_its_index_side_and_gets_the_same_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = materialize_module._IndexedCache(max_bytes=1 << 30)
    monkeypatch.setattr(materialize_module, "PACKED_SIDES", cache)
    first = materialize(Recipe.pack(PARTS))
    assert (cache.hits, cache.misses) == (0, len(PARTS))
    again = materialize(Recipe.pack((PARTS[2], PARTS[0])))  # two parts of the first pack, in another order
    assert (cache.hits, cache.misses) == (2, len(PARTS))
    _tensors_match_parts(Recipe.pack((PARTS[2], PARTS[0])))  # each part's bytes as alone, from the cache too
    assert torch.equal(materialize(Recipe.pack(PARTS)).kv_cache, first.kv_cache) and again.q.shape[0] == PARTS[2].n_q + PARTS[0].n_q


def test_the_index_side_cache_keeps_to_its_bytes() -> None:
    one = materialize_module._indexed(PARTS[0])
    size = sum(t.numel() * t.element_size() for t in vars(one).values() if isinstance(t, torch.Tensor))
    cache = materialize_module._IndexedCache(max_bytes=size + 1)
    for part in (*PARTS, PARTS[0]):
        cache.get(part)
        assert cache.bytes <= size + 1
    assert cache.misses == len(PARTS) + 1  # PARTS[0] was evicted by the later parts
    assert materialize_module._IndexedCache(max_bytes=0).get(PARTS[1]).entries.numel() > 0  # too large to keep: still built


def test_a_recipe_of_its_own_keeps_its_json_and_hash() -> None:
    part = PARTS[2]
    assert "parts" not in part.to_json_dict() and not part.is_pack
    assert recipe_hash(part) == recipe_hash(Recipe.from_json(part.to_json()))
    assert '"parts"' not in part.to_json()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_q": 5, "row_lengths": [5, 0, 130, 0, 257]}, "a pack's n_q is 5; its parts make it 6"),
        ({"latent": "heavy"}, "a pack's latent is 'heavy'; its parts make it 'normal'"),
        ({"parts": []}, None),  # a recipe of its own then, whose fields no longer fit: refused by the plain checks or accepted as plain
    ],
)
def test_a_pack_whose_fields_disagree_with_its_parts_is_refused(change: dict[str, object], message: str | None) -> None:
    data = {**Recipe.pack(PARTS).to_json_dict(), **change}
    if message is None:
        assert Recipe.from_json_dict(data).parts == ()
        return
    with pytest.raises(RecipeError, match=message.replace("[", r"\[")):
        Recipe.from_json_dict(data)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ((PARTS[0],), "a pack needs at least 2 parts, got 1"),
        ((PARTS[0], Recipe(seed=4, n_q=1, row_lengths=(3,), cache_rows=8, **{**CALL, "heads": 2})), "part 1 has heads 2, part 0 4"),
        ((PARTS[0], Recipe(seed=4, n_q=1, row_lengths=(3,), cache_rows=8, q_layout="heads", **CALL)), "part 1 cannot be packed: q is not"),
        ((PARTS[0], Recipe(seed=4, n_q=1, row_lengths=(3,), cache_rows=8, out_pad=(0, 0), **CALL)), "cannot be packed: it passes out"),
        ((PARTS[0], Recipe.pack(PARTS[1:])), "part 1 cannot be packed: it is a pack itself"),
        ((PARTS[0], Recipe(seed=4, n_q=1, row_lengths=(3,), cache_rows=200_000, **CALL)), "part 1 cannot be packed: its cache"),
    ],
)
def test_parts_that_cannot_share_a_call_are_refused(parts: tuple[Recipe, ...], message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        Recipe.pack(parts)


def test_a_packs_memory_estimate_covers_its_parts() -> None:
    pack = Recipe.pack(PARTS)
    for device in ("cpu", "cuda"):
        whole = memory_estimate(pack, device)
        parts = [memory_estimate(part, device) for part in PARTS]
        assert whole.host_bytes > sum(p.host_bytes for p in parts)
        assert whole.device_bytes >= sum(p.device_bytes for p in parts)


def test_a_parts_strategy_is_made_once_per_arguments_and_draws_as_a_new_one() -> None:
    call = hypothesis_recipes.PackCall(heads=4, softmax_scale="peaked", has_invalid=True, return_lse=False)
    options = {"writers": ("pow2",), "heads": None}
    made = hypothesis_recipes._part_strategy(3, 512, call, options)
    assert hypothesis_recipes._part_strategy(3, 512, call, dict(options)) is made
    new = hypothesis_recipes.recipes(max_n_q=3, max_total_keys=512, call=call, **options)
    for seed in range(5):
        assert fresh.FreshDraws(seed).draw(made) == fresh.FreshDraws(seed).draw(new)
    unhashable = hypothesis_recipes._part_strategy(3, 512, call, {"writers": ["pow2"], "heads": None})  # a list: made anew
    assert fresh.FreshDraws(0).draw(unhashable) == fresh.FreshDraws(0).draw(new)


def test_an_index_sides_empty_fields_are_ordinary_tensors() -> None:
    side = materialize_module._indexed(PARTS[2])  # no poison, a small cache: written and poison_rows empty
    for name in ("written", "poison_rows"):
        empty = getattr(side, name)
        assert empty.numel() == 0 and empty.dtype == torch.int64
        assert empty.view(torch.uint8).numel() == 0  # a stride-0 tensor refuses this view
