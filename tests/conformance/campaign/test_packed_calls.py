"""Packed calls in the fuzz campaign (conformance.campaign.fuzz, pack > 1;
conformance.judging.batch.differential_pack): a passing pack counts its parts not counted before
(the others are repeats); long_rows packs its own recipes; a failing pack
whose part fails alone is charged to that part, which replays alone; a bug that shows only in the
packed call is charged to the pack, which replays as the same call; a call that passed (a recipe
alone or a pack) is not made again; `fuzz --pack` is refused with --recipes-per-example; packed
calls are the default."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conformance.campaign import fuzz
from conformance.campaign.fuzz import Campaign, ProgressLine, campaign, summary_json
from conformance.judging.batch import differential_pack
from conformance.judging.checks import differential
from conformance.judging.target import build_target, judged_recipe
from strategies.recipe import Recipe
from tests.conformance.campaign.runs import isolate, records, run

PACK_KERNEL = "tests.conformance.campaign.pack_kernels:wrong_from_five_rows"
CALL = {"heads": 2, "softmax_scale": "default", "has_invalid": False, "return_lse": True}


PACK_FROM_CHUNK = fuzz.PACK_FROM_CHUNK


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path, "tests/conformance/campaign/test_packed_calls.py")
    monkeypatch.setattr(fuzz, "PACK_FROM_CHUNK", 0)  # packs from the first chunk: the tests below are about packs


def test_the_first_chunks_draw_recipes_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fuzz, "PACK_FROM_CHUNK", PACK_FROM_CHUNK)
    assert PACK_FROM_CHUNK >= 1
    run("emulated", chunks=PACK_FROM_CHUNK, examples=12, properties=["differential"], pack=4)
    early = [r["recipe"] for r in records(tmp_path) if r.get("mode") == "exact-steps"]
    assert early and not any(r.get("parts") for r in early)
    run("emulated", chunks=PACK_FROM_CHUNK + 1, examples=12, properties=["differential"], pack=4)
    calls = [r["recipe"] for r in records(tmp_path) if r.get("mode") == "exact-steps"]
    assert any(r.get("parts") for r in calls[len(early) :]), "no packed call in the chunk after the first ones"


def test_a_passing_pack_counts_its_new_parts(tmp_path: Path) -> None:
    _, state = run("emulated", chunks=1, examples=16, properties=["differential"], pack=4)
    calls = [r for r in records(tmp_path) if r.get("mode") == "exact-steps"]
    parts = [len(r["recipe"].get("parts", [])) or 1 for r in calls]
    assert any(n > 1 for n in parts), "no packed call drawn"
    assert any(n == 1 and "parts" not in r["recipe"] for n, r in zip(parts, calls, strict=True)), "no recipe alone drawn"
    held = [json.dumps(part, sort_keys=True) for r in calls for part in r["recipe"].get("parts") or [r["recipe"]]]
    assert state.examples["differential"] == state.outcomes["differential"]["pass"] == len(set(held))  # each recipe counted once
    assert sum(parts) == len(held)
    # no call made twice: a part judged again is in a new call (a repeat), a call that passed is not made again
    assert len({json.dumps(r["recipe"], sort_keys=True) for r in calls}) == len(calls)
    assert state.repeats >= len(held) - len(set(held))
    if not state.repeated_calls:
        assert state.examples["differential"] + state.repeats == len(held)
    assert not state.failures
    # the kernel calls judged and those packed, as the summary reports them
    assert state.calls["differential"] == len(calls)
    assert state.packed_calls["differential"] == sum(n > 1 for n in parts)
    data = summary_json(state, build_target("emulated"), budget_s=1e6, hypothesis_profile="ci", properties=["differential"], exit_code=0)
    summary = data["per_property"]["differential"]
    assert (summary["calls"], summary["packed_calls"]) == (len(calls), sum(n > 1 for n in parts))


def _two_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """The differential property drawing one of two calls (a recipe alone, a pack of two) from
    many choices, so Hypothesis draws each again; returns how often each was drawn."""
    from hypothesis import strategies as st

    calls = (_part(1, (40, 7)), Recipe.pack((_part(2, (9, 30, 3)), _part(3, (12,)))))
    drawn: Counter[int] = Counter()

    def pick(i: int) -> Recipe:
        drawn[i % 2] += 1
        return calls[i % 2]

    monkeypatch.setattr(fuzz, "_fuzz_strategies", lambda *args, **kwargs: {"differential": st.integers(0, 10**6).map(pick)})
    return drawn


def test_a_call_that_passed_is_not_made_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from conformance.judging import checks

    drawn = _two_calls(monkeypatch)
    told: list[dict[str, float]] = []
    replay = checks.replay_targets
    monkeypatch.setattr(checks, "replay_targets", lambda values: (told.append(dict(values)), replay(values)))
    _, state = run("emulated", chunks=1, examples=20, properties=["differential"], pack=4)
    assert drawn[0] > 1 and drawn[1] > 1
    # every example, made or not, gave Hypothesis its call's target() values: the same search
    assert len(told) == drawn[0] + drawn[1] and len({tuple(sorted(t.items())) for t in told}) == 2
    assert all({"out/exact-steps", "out/float64"} <= set(t) for t in told)
    calls = [r for r in records(tmp_path) if r.get("mode") == "exact-steps"]
    assert len(calls) == state.calls["differential"] == 2  # each call made once
    assert state.examples["differential"] == 3 and not state.failures  # the recipe alone and the pack's two parts
    assert state.repeated_calls == drawn[0] + drawn[1] - 2
    assert state.repeats == (drawn[0] - 1) + 2 * (drawn[1] - 1)  # every recipe of a call not made again
    text = fuzz.format_summary(state, build_target("emulated"), budget_s=1.0, hypothesis_profile="ci", report_path=None)
    assert f"({state.repeated_calls} call(s) that had passed before were not made again)" in text
    data = summary_json(state, build_target("emulated"), budget_s=1.0, hypothesis_profile="ci", properties=["differential"], exit_code=0)
    assert (data["repeats"], data["repeated_calls"]) == (state.repeats, state.repeated_calls)


def test_without_packing_every_call_is_made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    drawn = _two_calls(monkeypatch)
    _, state = run("emulated", chunks=1, examples=20, properties=["differential"], pack=1)
    calls = [r for r in records(tmp_path) if r.get("mode") == "exact-steps"]
    assert len(calls) == state.calls["differential"] == drawn[0] + drawn[1] and state.repeated_calls == 0


def test_long_rows_packs_its_own_recipes_into_calls_of_its_shape(tmp_path: Path) -> None:
    _, state = run("emulated", chunks=2, examples=16, properties=["long_rows"], pack=4)
    calls = [r["recipe"] for r in records(tmp_path) if r.get("mode") == "exact-steps"]
    packed = [r for r in calls if r.get("parts")]
    assert packed, "no packed long_rows call drawn"
    assert any("parts" not in r for r in calls), "no long_rows recipe alone drawn"
    for recipe in packed:
        assert 2 <= len(recipe["parts"]) <= 4
        assert recipe["n_q"] <= 4  # a long_rows call alone has at most 4 rows: so has its pack
    assert state.examples["long_rows"] == state.outcomes["long_rows"]["pass"] and not state.failures


def _part(seed: int, rows: tuple[int, ...]) -> Recipe:
    return Recipe(seed=seed, n_q=len(rows), row_lengths=rows, cache_rows=512, latent="heavy", **CALL)  # scales differ across blocks


def test_a_pack_failing_only_as_a_pack_is_charged_to_the_pack_and_replays() -> None:
    target = build_target(PACK_KERNEL, device="cpu")
    pack = Recipe.pack((_part(1, (40, 7)), _part(2, (9, 30, 3))))
    for part in pack.parts:
        differential(target, part, "test", use_target=False)  # under five rows: right
    with pytest.raises(AssertionError) as packed:
        differential_pack(target, pack, "test", use_target=False)
    assert judged_recipe(packed.value).recipe == pack
    with pytest.raises(AssertionError) as again:
        differential(target, Recipe.from_json(pack.to_json()), "replay", use_target=False)
    assert str(again.value).splitlines()[0] == str(packed.value).splitlines()[0]


def test_a_pack_whose_part_fails_alone_is_charged_to_that_part() -> None:
    target = build_target(PACK_KERNEL, device="cpu")
    big = _part(3, (4, 5, 6, 7, 8))  # five rows: wrong alone too
    pack = Recipe.pack((_part(1, (40,)), big))
    with pytest.raises(AssertionError) as packed:
        differential_pack(target, pack, "test", use_target=False)
    assert judged_recipe(packed.value).recipe == big


def test_a_campaign_finds_a_batch_size_bug_and_keeps_a_replayable_recipe() -> None:
    target, state = run(PACK_KERNEL, chunks=2, examples=25, properties=["differential"], pack=8, shrink_s=5.0)
    assert state.failures  # one bug, seen as one or more failure signatures (out, lse)
    data = summary_json(state, target, budget_s=1e6, hypothesis_profile="ci", properties=["differential"], exit_code=1)
    assert [f["property"] for f in data["found"]] == ["differential"] * len(state.failures)  # in the order first seen
    first = data["found"][0]
    assert 1 <= first["examples"] <= data["examples"] and 0 <= first["seconds"] <= data["seconds"]
    assert [f["seconds"] for f in data["found"]] == sorted(f["seconds"] for f in data["found"])
    for failure in state.failures.values():
        assert failure.recipe.n_q >= 5
        with pytest.raises(AssertionError):
            differential(target, Recipe.from_json(failure.recipe.to_json()), "replay", use_target=False)


def test_pack_parts_must_be_fresh_or_drawn() -> None:
    target = build_target("emulated", device="cpu")
    with pytest.raises(ValueError, match="pack_parts must be one of fresh, drawn"):
        campaign(
            target, Campaign(), progress=ProgressLine(io.StringIO()), budget_s=1.0, hypothesis_profile="ci",
            properties=["differential"], shrink_s=1.0, max_failures=1, save=False, pack=4, pack_parts="mixed",
        )  # fmt: skip


def test_pack_refuses_zero_and_recipe_lists() -> None:
    target = build_target("emulated", device="cpu")
    common: dict[str, Any] = dict(
        budget_s=1.0, hypothesis_profile="ci", properties=["differential"], shrink_s=1.0, max_failures=1, save=False
    )
    with pytest.raises(ValueError, match="pack must be >= 1"):
        campaign(target, Campaign(), progress=ProgressLine(io.StringIO()), pack=0, **common)
    with pytest.raises(ValueError, match="pack and recipes_per_example are not taken together"):
        campaign(target, Campaign(), progress=ProgressLine(io.StringIO()), pack=4, recipes_per_example=4, **common)


def test_packed_calls_are_the_default_unless_several_recipes_per_example() -> None:
    assert fuzz.default_pack() == fuzz.DEFAULT_PACK > 1
    assert fuzz.default_pack(recipes_per_example=4) == 1  # not taken together


def test_the_minimiser_shrinks_a_pack_within_its_parts(tmp_path: Path) -> None:
    from conformance.records.minimise import in_process_check, minimise

    target = build_target(PACK_KERNEL, device="cpu")
    pack = Recipe.pack((_part(1, (40, 7)), _part(2, (9, 30, 3)), _part(3, (12,))))
    result = minimise(pack, in_process_check(target, "conform"), max_seconds=60)
    assert result.changed and result.recipe.n_q >= 5
    assert result.recipe.total_keys < pack.total_keys, result.accepted
    with pytest.raises(AssertionError):
        differential(target, result.recipe, "replay", use_target=False)


def test_the_summary_says_a_failure_is_a_packed_call() -> None:
    from conformance.campaign.fuzz import Failure, format_summary

    target = build_target(PACK_KERNEL, device="cpu")
    pack = Recipe.pack((_part(1, (40, 7)), _part(2, (9, 30, 3))))
    state = Campaign()
    state.failures[frozenset({"x"})] = Failure("differential", pack, "wrong result: out outside the bound", frozenset({"x"}), 0.0)
    text = format_summary(state, target, budget_s=1.0, hypothesis_profile="ci", report_path=None)
    assert "shrunk recipe (a packed call of 2 recipes, each passing alone): n_q 5, heads 2" in text
    assert "latent heavy, q normal, writer pow2" in text
