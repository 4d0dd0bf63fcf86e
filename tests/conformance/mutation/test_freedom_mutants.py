"""The contract's freedoms that the strategies draw since the freedom table (docs/reference/contract.md), and
the broken kernels only those draws catch.

Freedoms: a paged / multi-dim cache (`cache_shape`), a cache of 0 rows with every row empty
(`cache_rows` 0), an index stream longer than the rows consume (`stream_tail`), negative and
zero softmax scales; then q laid out head-major, with a stride 0 or overlapping heads
(`q_layout`), a head-major out= (`out_layout`), garbage in unconsumed index entries
(`unconsumed`), a one-row cache (`cache_rows` 1). For each:
- the strategy draws it (hypothesis.find over strategies.hypothesis_recipes.recipes);
- recipes carrying it stay plain JSON, replay bit-identically, and recipes without it keep the
  JSON (and content hash) they had before the field existed;
- its mutant (conformance.mutation.catalogue) fails the suite's differential check on a recipe
  with the freedom, while the emulated kernel passes it;
- on recipes drawn without any of the new freedoms the eight mutants agree with the emulated kernel
  bit for bit (so only the new draws catch them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from conformance.judging.checks import differential
from conformance.judging.harness import call_kernel
from conformance.judging.target import Target, build_target
from conformance.mutation import catalogue
from conformance.records.corpus import corpus_files, load_entry, recipe_hash
from strategies.hypothesis_recipes import recipes
from strategies.materialize import materialize
from strategies.recipe import Recipe, RecipeError

SMALL = {"max_n_q": 4, "max_total_keys": 300}
BASE = {"seed": 5, "n_q": 3, "heads": 2, "row_lengths": (100, 100, 100), "cache_rows": 2000}

FREEDOMS: dict[str, tuple[dict[str, object], object]] = {
    # mutant: (a recipe with the freedom, the feature the strategy must draw)
    "paged_cache_as_rows": ({"cache_shape": (125, 16)}, lambda r: r.cache_shape is not None and len(r.cache_shape) == 2),
    "empty_cache_early_return": ({"row_lengths": (0, -1, 0), "stream_offset": 2, "cache_rows": 0}, lambda r: r.cache_rows == 0),
    "uniform_rows_from_stream_length": ({"stream_tail": 40}, lambda r: r.stream_tail > 0),
    "scale_magnitude": ({"softmax_scale": "negative"}, lambda r: r.softmax_scale == "negative"),
    "q_extent_from_row_stride": ({"q_layout": "heads", "q_pad": (0, 3)}, lambda r: r.q_layout == "heads" and r.heads > 1),
    "out_extent_from_row_stride": ({"out_layout": "heads", "out_pad": (0, 0)}, lambda r: r.out_layout == "heads" and r.heads > 1),
    "stream_gathered_whole": (
        {"stream_offset": 3, "stream_tail": 20, "unconsumed": "garbage"},
        lambda r: r.unconsumed == "garbage" and r.stream_tail > 0 and r.cache_rows > 0,
    ),
    "one_row_cache_as_empty": ({"cache_rows": 1}, lambda r: r.cache_rows == 1 and r.total_keys > 0),
}
NEW_FIELDS = ("cache_shape", "stream_tail", "q_layout", "out_layout", "unconsumed")


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _target(name: str) -> Target:
    return build_target(name, device="cpu")


def _bits(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


@pytest.mark.parametrize("name", list(FREEDOMS))
def test_only_the_new_draw_kills_the_mutant(name: str) -> None:
    changes, drawn = FREEDOMS[name]
    recipe = Recipe(**{**BASE, **changes})  # type: ignore[arg-type]
    differential(_target("emulated"), recipe, use_target=False)  # the unbroken kernel passes
    with pytest.raises(AssertionError, match="outside the a-priori bound|non-finite|not -inf|a valid call raised"):
        differential(_target(catalogue.CATALOGUE[name].spec), recipe, use_target=False)
    # the first draw with the freedom (no shrinking: the draw, not its simplest form, is the point)
    settings_ = settings(
        database=None, max_examples=2000, derandomize=True, phases=[Phase.generate], suppress_health_check=list(HealthCheck), deadline=None
    )
    found = find(recipes(**SMALL), drawn, settings=settings_)  # type: ignore[arg-type]
    assert drawn(found)


def _without_new_freedoms(recipe: Recipe) -> Recipe:
    """The recipe as the strategies drew it before the freedom table."""
    scale = recipe.softmax_scale if recipe.softmax_scale not in ("negative", "zero") else "default"
    rows = recipe.cache_rows if recipe.cache_rows >= 2 else 64
    return dataclasses.replace(
        recipe,
        cache_shape=None,
        stream_tail=0,
        softmax_scale=scale,
        cache_rows=rows,
        poison=recipe.poison and rows >= 2,
        q_layout="rows",
        out_layout="rows",
        unconsumed="valid",
    )


@settings(database=None, max_examples=8, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(recipe=recipes(**SMALL).map(_without_new_freedoms))
def test_mutants_agree_with_emulated_without_the_new_freedoms(recipe: Recipe) -> None:
    want, want_lse = call_kernel(materialize(recipe), catalogue.emulated.emulated_backend())
    for name in FREEDOMS:
        got, got_lse = call_kernel(materialize(recipe), catalogue.CATALOGUE[name].backend)
        assert torch.equal(_bits(got), _bits(want)), name
        assert (got_lse is None) == (want_lse is None) and (want_lse is None or torch.equal(_bits(got_lse), _bits(want_lse))), name


def test_new_fields_are_plain_json_and_replay_bit_identically() -> None:
    recipe = Recipe(**{**BASE, "cache_shape": (2, 63, 16), "cache_rows": 2016, "stream_tail": 7, "softmax_scale": "zero"})
    again = Recipe.from_json(recipe.to_json())
    assert again == recipe and json.loads(recipe.to_json())["cache_shape"] == [2, 63, 16]
    a, b = materialize(recipe), materialize(again)
    assert tuple(a.kv_cache.shape) == (2, 63, 16, 656) and a.indices.numel() == int(a.indptr.max()) + 7
    assert torch.equal(a.kv_cache, b.kv_cache) and torch.equal(a.indices, b.indices)
    flat = materialize(dataclasses.replace(recipe, cache_shape=None))
    assert torch.equal(flat.kv_cache, a.kv_cache.reshape(-1, 656))  # the layout changes the view, not the rows
    empty = materialize(Recipe(seed=1, n_q=2, heads=1, row_lengths=(0, 0), cache_rows=0))
    assert tuple(empty.kv_cache.shape) == (0, 656)


@pytest.mark.parametrize("layout", ["heads", "shared_rows", "shared_heads", "overlapping_heads"])
def test_q_layouts_are_plain_json_and_replay_bit_identically(layout: str) -> None:
    recipe = Recipe(**{**BASE, "q_layout": layout, "q_pad": (3, 5), "out_layout": "heads", "out_pad": (1, 2)})
    again = Recipe.from_json(recipe.to_json())
    assert again == recipe and json.loads(recipe.to_json())["q_layout"] == layout
    a, b = materialize(recipe), materialize(again)
    plain = materialize(dataclasses.replace(recipe, q_layout="rows", out_layout="rows"))
    want = {"heads": (579, 3 * 579 + 5), "shared_rows": (0, 581), "shared_heads": (579, 0), "overlapping_heads": (69 + 576 + 3, 69)}
    assert (a.q.stride(0), a.q.stride(1)) == want[layout] and (a.out.stride(0), a.out.stride(1)) == (513, 3 * 513 + 2)
    assert torch.equal(_bits(a.q), _bits(b.q)) and torch.isnan(a.out).all()
    if layout == "heads":  # the same values, laid out differently
        assert torch.equal(_bits(a.q), _bits(plain.q))
    if layout == "shared_rows":  # every row reads the last row's vector
        assert all(torch.equal(_bits(a.q[i]), _bits(plain.q[-1])) for i in range(a.q.shape[0]))


def test_garbage_sits_only_in_unconsumed_entries() -> None:
    # indptr 60, 70, 0, 20: entries [20, 60) lie between slices, [70, 100) after them
    recipe = Recipe(**{**BASE, "row_lengths": (10, -70, 20), "stream_offset": 60, "stream_tail": 30, "unconsumed": "garbage"})
    a, valid = materialize(recipe), materialize(dataclasses.replace(recipe, unconsumed="valid"))
    ptr = a.indptr.tolist()
    consumed = torch.zeros(a.indices.numel(), dtype=torch.bool)
    for q in range(recipe.n_q):
        consumed[ptr[q] : max(ptr[q], ptr[q + 1])] = True
    assert torch.equal(a.indices[consumed], valid.indices[consumed])
    rows = recipe.cache_rows
    garbage = a.indices[~consumed].to(torch.int64)
    assert garbage.numel() == 40 + 30 and bool(((garbage < 0) | (garbage >= rows)).all())
    assert {-1, -(2**31), rows, 2**31 - 1} <= set(garbage.tolist())


def test_recipes_without_new_fields_keep_their_json() -> None:
    for path in corpus_files():
        entry = load_entry(path)
        raw = json.loads(path.read_text(encoding="utf-8"))["recipe"]
        if any(name in raw for name in NEW_FIELDS):  # an entry that draws a new freedom on purpose (edge-paged-cache)
            continue
        assert not any(name in entry.recipe.to_json_dict() for name in NEW_FIELDS)
        assert recipe_hash(entry.recipe) == recipe_hash(Recipe.from_json_dict(raw))
        assert set(entry.recipe.to_json_dict()) >= set(raw)


def test_the_strategies_draw_zero_rows_only_with_every_row_empty() -> None:
    @settings(database=None, max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        recipe = data.draw(recipes(**SMALL))
        assert recipe.cache_rows > 0 or recipe.total_keys == 0

    check()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"q_layout": "columns"}, "q_layout must be one of"),
        ({"out_layout": "heads"}, "out_layout 'heads' needs a preallocated out"),
        ({"out_layout": "diagonal", "out_pad": (0, 0)}, "out_layout must be one of"),
        ({"unconsumed": "poison"}, "unconsumed must be one of"),
    ],
)
def test_new_fields_are_validated(changes: dict[str, object], message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        Recipe.from_json_dict({**BASE, "row_lengths": list(BASE["row_lengths"]), **changes})  # type: ignore[call-overload]
