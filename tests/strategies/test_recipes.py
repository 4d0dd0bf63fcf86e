"""Recipes: JSON validation, deterministic and device-independent materialisation, strategies."""

from __future__ import annotations

import json
import os

import pytest
import torch
from hypothesis import given, settings

from oracle.preconditions import check_call, has_violation
from strategies.hypothesis_recipes import recipes, violating_recipes
from strategies.materialize import materialize
from strategies.recipe import ROWS_BEYOND_4GIB, Recipe, RecipeError

BASE = {"seed": 1, "n_q": 2, "heads": 3, "row_lengths": [5, 130], "cache_rows": 400}


def _bytes(problem) -> list[bytes]:  # type: ignore[no-untyped-def]
    tensors = [problem.q.contiguous(), problem.kv_cache, problem.indices, problem.indptr]
    return [t.cpu().contiguous().view(torch.uint8).numpy().tobytes() for t in tensors]


def test_json_round_trip_is_canonical() -> None:
    recipe = Recipe.from_json_dict({**BASE, "q_pad": [3, 4], "out_pad": [1, 2], "corruptions": [{"kind": "nan_codes", "count": 2}]})
    again = Recipe.from_json(recipe.to_json())
    assert again == recipe and again.to_json() == recipe.to_json()
    assert json.loads(recipe.to_json())["row_lengths"] == [5, 130]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "unknown recipe field"),
        ({"heads": 17}, "heads must be in"),
        ({"heads": True}, "heads must be an integer"),
        ({"row_lengths": [5]}, "row_lengths has 1 entries"),
        ({"row_lengths": [5, -9]}, "indptr below 0"),
        ({"writer": "pow3"}, "writer must be one of"),
        ({"softmax_scale": float("nan")}, "softmax_scale must be"),
        ({"index_pattern": "beyond_4gib"}, "beyond_4gib needs cache_rows"),
        ({"q_pad": [1]}, "q_pad must be two ints"),
        ({"corruptions": [{"kind": "melt"}]}, "corruption kind"),
        ({"version": 2}, "version must be 1"),
    ],
)
def test_bad_recipes_name_the_problem(change: dict, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        Recipe.from_json_dict({**BASE, **change})


def test_missing_fields_and_bad_json() -> None:
    with pytest.raises(RecipeError, match="missing field"):
        Recipe.from_json_dict({"seed": 1})
    with pytest.raises(RecipeError, match="not valid JSON"):
        Recipe.from_json("{seed: 1")
    with pytest.raises(RecipeError, match="JSON object"):
        Recipe.from_json("[1, 2]")


def test_materialisation_is_deterministic() -> None:
    recipe = Recipe.from_json_dict(
        {**BASE, "index_pattern": "sorted", "has_invalid": True, "invalid_pattern": "scattered", "invalid_permille": 200, "poison": True}
    )
    assert _bytes(materialize(recipe)) == _bytes(materialize(recipe))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU to compare devices")
def test_cpu_and_gpu_build_the_same_bits() -> None:
    for pattern, latent, q in (
        ("uniform", "normal", "normal"),
        ("duplicates", "outliers", "tiny_blocks"),
        ("reversed", "max57344", "exact"),
    ):
        recipe = Recipe.from_json_dict({**BASE, "index_pattern": pattern, "latent": latent, "q": q, "poison": True, "q_pad": [2, 3]})
        assert _bytes(materialize(recipe, "cpu")) == _bytes(materialize(recipe, "cuda")), pattern


def test_row_data_does_not_depend_on_other_rows() -> None:
    first = materialize(Recipe.from_json_dict({**BASE, "row_lengths": [5, 30], "cache_rows": 50}))
    second = materialize(Recipe.from_json_dict({**BASE, "row_lengths": [40, 1], "cache_rows": 50, "index_pattern": "clustered"}))
    shared = sorted(set(first.referenced_rows.tolist()) & set(second.referenced_rows.tolist()))
    assert shared
    assert torch.equal(first.kv_cache[shared], second.kv_cache[shared])


def test_poison_and_strides() -> None:
    recipe = Recipe.from_json_dict({**BASE, "poison": True, "q_pad": [7, 5], "out_pad": [3, 9]})
    p = materialize(recipe)
    assert 0 not in p.referenced_rows.tolist() and 0 in p.poison_rows.tolist()
    assert bool((p.kv_cache[p.poison_rows][:, :512] == 0xFF).all())
    assert p.q.stride() == (3 * 581 + 7, 581, 1)
    assert p.out is not None and p.out.stride() == (3 * 521 + 3, 521, 1)
    assert bool(torch.isnan(p.out.float()).all())  # unwritten out is NaN
    padding = p.q.as_strided((1,), (1,), p.q.storage_offset() + 576)
    assert bool(torch.isnan(padding.float()).all())


@settings(max_examples=30, deadline=None)
@given(recipe=recipes(max_n_q=8, max_row=600, max_total_keys=2000))
def test_drawn_recipes_meet_every_precondition(recipe: Recipe) -> None:
    p = materialize(recipe)
    findings = check_call(p.q, p.kv_cache, p.indices, p.indptr, has_invalid=p.has_invalid)
    assert not has_violation(findings), [f.kind for f in findings]
    assert Recipe.from_json(recipe.to_json()) == recipe


@settings(max_examples=30, deadline=None)
@given(recipe=violating_recipes(allow_out_of_range=True))
def test_violating_recipes_violate(recipe: Recipe) -> None:
    p = materialize(recipe)
    findings = check_call(p.q, p.kv_cache, p.indices, p.indptr, has_invalid=p.has_invalid)
    assert has_violation(findings), recipe.to_json()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_cache_over_4gib_costs_almost_no_ram() -> None:
    recipe = Recipe.from_json_dict({**BASE, "index_pattern": "beyond_4gib", "cache_rows": ROWS_BEYOND_4GIB + 1000, "poison": True})
    before = _rss_bytes()
    p = materialize(recipe)
    grown = _rss_bytes() - before
    assert p.kv_cache.numel() > 4 * 2**30
    assert int(p.referenced_rows.min()) >= ROWS_BEYOND_4GIB
    assert grown < 256 * 2**20, f"resident memory grew by {grown / 2**20:.0f} MiB"
