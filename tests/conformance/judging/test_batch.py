"""Several recipes judged at once (conformance.judging.many, conformance.judging.batch): the same
verdicts, numbers, records and failures as each recipe judged alone by
conformance.judging.checks.differential; the failing recipe named; lists shrink to it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from conformance.judging.batch import differential_batch, violation_batch
from conformance.judging.checks import differential, run_valid_call
from conformance.judging.harness import judge
from conformance.judging.many import judge_many
from conformance.judging.target import Target, build_target, judged_recipe
from oracle.rows import PreconditionError
from strategies.hypothesis_recipes import recipe_lists, recipes
from strategies.materialize import materialize
from strategies.recipe import Recipe

MIXED = [
    Recipe(seed=1, n_q=3, heads=4, row_lengths=(30, 0, 129), cache_rows=200),
    Recipe(seed=2, n_q=1, heads=16, row_lengths=(257,), cache_rows=300, return_lse=False),
    Recipe(seed=3, n_q=2, heads=1, row_lengths=(5, 6), cache_rows=9, has_invalid=True, invalid_pattern="scattered", invalid_permille=500),
    Recipe(seed=4, n_q=4, heads=8, row_lengths=(1, 2, 3, 4), cache_rows=64, out_pad=(3, 5), q_layout="heads"),
    Recipe(seed=5, n_q=2, heads=2, row_lengths=(-1, 0), cache_rows=0, stream_offset=3),
    Recipe(seed=6, n_q=2, heads=3, row_lengths=(40, 40), cache_rows=100, latent="large", q="tiny", softmax_scale="peaked"),
]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh state folder: each test's example records (conformance.judging.harness.record) alone."""
    from conformance.durability.state import RUN_ID_ENV

    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    return tmp_path / "state"


def _records(state: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for path in sorted(state.rglob("examples-*.jsonl")) for line in path.read_text().splitlines()]
    for line in lines:
        line.pop("time")
    return lines


def _outputs(target: Target, recipes_: list[Recipe]) -> tuple[list, list]:
    problems = [materialize(r) for r in recipes_]
    return problems, [run_valid_call(target, p, "test") for p in problems]


MUTANT = "conformance.mutation.catalogue:"


@pytest.mark.parametrize("kernel", ["emulated", MUTANT + "empty_row_nan_out", MUTANT + "lse_base2"])
def test_judge_many_is_judge_per_call(state: Path, kernel: str) -> None:
    """A passing call's verdicts are judge()'s, number for number; a call judge() fails (or whose
    reference raises) is None."""
    target = build_target(kernel, device="cpu")
    problems, outputs = _outputs(target, MIXED)
    many = judge_many(problems, outputs, target.profile)
    outcomes = []
    for problem, (out, lse), got in zip(problems, outputs, many, strict=True):
        try:
            alone = judge(problem, out, lse, target.profile)
        except PreconditionError:
            assert got is None
            outcomes.append("raised")
            continue
        if not alone.ok:
            assert got is None
            outcomes.append("fail")
            continue
        assert got is not None and list(got.verdicts) == list(alone.verdicts)
        for mode, verdict in alone.verdicts.items():
            mine = got.verdicts[mode]
            assert mine.failures == [] and repr(mine.out_ratio) == repr(verdict.out_ratio), (mode, mine, verdict)
            assert repr(mine.lse_ratio) == repr(verdict.lse_ratio) and mine.worst == verdict.worst, (mode, mine, verdict)
        outcomes.append("pass")
    assert "pass" in outcomes
    if kernel != "emulated":
        assert "fail" in outcomes


def test_differential_batch_is_differential_per_recipe(state: Path) -> None:
    """Same verdicts and the same example records as judging each recipe alone."""
    target = build_target("emulated", device="cpu")
    alone = [differential(target, r, "p", use_target=False) for r in MIXED]
    records_alone = _records(state)
    for path in state.rglob("examples-*.jsonl"):
        path.unlink()
    seen: list[Recipe] = []
    together = differential_batch(target, MIXED, "p", use_target=False, on_judged=lambda r, v: seen.append(r))
    assert seen == MIXED
    assert [[(v.out_ratio, v.lse_ratio, v.worst, v.failures) for v in vs] for vs in together] == [
        [(v.out_ratio, v.lse_ratio, v.worst, v.failures) for v in vs] for vs in alone
    ]
    assert _records(state) == records_alone


def test_the_failing_recipe_fails_as_alone(state: Path) -> None:
    """A failing recipe in the middle of the list: the failure differential raises for it alone,
    carrying that recipe; the recipes before it were judged (and passed), none after it."""
    target = build_target("conformance.mutation.catalogue:empty_row_nan_out", device="cpu")
    passing = [MIXED[1], MIXED[3]]
    failing = MIXED[0]  # an empty row
    with pytest.raises(AssertionError) as alone:
        differential(target, failing, "p", use_target=False)
    seen: list[Recipe] = []
    with pytest.raises(AssertionError) as together:
        differential_batch(target, [*passing, failing, MIXED[5]], "p", use_target=False, on_judged=lambda r, v: seen.append(r))
    assert str(together.value) == str(alone.value)
    judged = judged_recipe(together.value)
    assert judged is not None and judged.recipe == failing and judged.property_name == "p"
    assert seen == passing


def test_a_contract_violation_names_its_recipe(state: Path) -> None:
    """A kernel whose result breaks the contract on a call fails there, before any judging."""
    target = build_target("conformance.mutation.catalogue:empty_row_nan_out", device="cpu")
    broken = Target(target.name, target.backend, target.device, target.profile)
    object.__setattr__(broken, "backend", _ReturnsLseOfWrongShape(target.backend))
    with pytest.raises(AssertionError, match="lse is not float32 of the contract's shape") as info:
        differential_batch(broken, [MIXED[1], MIXED[3]], "p", use_target=False)
    judged = judged_recipe(info.value)
    assert judged is not None and judged.recipe == MIXED[3]


class _ReturnsLseOfWrongShape:
    """A backend whose lse has one head too many when the call has more than one query row."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def __call__(self, q, kv_cache, indices, indptr, softmax_scale, **kwargs):  # type: ignore[no-untyped-def]
        import torch

        out, lse = self._inner(q, kv_cache, indices, indptr, softmax_scale, **kwargs)
        if lse is not None and q.shape[0] > 1:
            lse = torch.zeros(q.shape[0], q.shape[1] + 1)
        return out, lse


def test_unjudgeable_recipes_are_left_out(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recipe too large for the memory limit is left out and the others judged; with none left
    the test is skipped (outside Hypothesis) naming why."""
    target = build_target("emulated", device="cpu")
    huge = Recipe(seed=7, n_q=1, heads=1, row_lengths=(100_000,), cache_rows=100_000)
    monkeypatch.setenv("CONFORMANCE_MEMORY_LIMIT", "512MiB")
    seen: list[Recipe] = []
    verdicts = differential_batch(target, [huge, MIXED[1]], "p", use_target=False, on_judged=lambda r, v: seen.append(r))
    assert seen == [MIXED[1]] and len(verdicts) == 1
    with pytest.raises(pytest.skip.Exception, match="recipe too large"):
        differential_batch(target, [huge], "p", use_target=False)


def test_violation_batch_leaves_out_a_recipe_without_violation(state: Path) -> None:
    """Under Hypothesis a recipe that violates nothing is left out, the others observed."""
    target = build_target("emulated", device="cpu")
    raw = Recipe(seed=8, n_q=1, heads=2, row_lengths=(20,), cache_rows=40, writer="raw")
    seen: list[Recipe] = []
    observed: list[dict[str, object]] = []

    @settings(max_examples=1, database=None, phases=(Phase.generate,))
    @given(st.just([MIXED[1], raw]))
    def check(drawn: list[Recipe]) -> None:
        observed.extend(violation_batch(target, drawn, "v", on_judged=lambda r, o: seen.append(r)))

    check()
    assert seen == [raw] and observed[0]["kinds"] == ["scale_not_pow2"]


def test_lists_shrink_to_the_one_failing_recipe() -> None:
    """Hypothesis shrinks a failing list by dropping recipes: the minimal example is one recipe."""
    found = find(
        recipe_lists(recipes(max_n_q=4, max_total_keys=64)),
        lambda rs: any(r.heads >= 3 for r in rs),
        settings=settings(derandomize=True, database=None),  # one seed: the shrink's outcome does not vary from run to run
    )
    assert len(found) == 1 and found[0].heads == 3


def test_recipe_lists_refuses_an_empty_size() -> None:
    with pytest.raises(ValueError, match="max_size >= 1"):
        recipe_lists(recipes(), max_size=0)
