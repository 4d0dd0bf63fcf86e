"""Strategy-feature coverage of fuzz campaigns (conformance.records.coverage): the feature
functions on hand-built recipes, the denominators against what the strategies really draw, and a
short campaign whose summary, progress line, fuzz-summary.json and run report carry them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from conformance.records.coverage import (
    FAMILIES,
    FAMILY_BY_KEY,
    ROW_LENGTH_CLASSES,
    Coverage,
    DrawSpace,
    cache_class,
    features,
    n_q_class,
    reachable,
    reachable_union,
    recipes_space,
    row_length_class,
    violating_space,
    violations,
)
from kernel.record import WRITERS
from kernel.writers import sglang as sglang_writer
from strategies.hypothesis_recipes import recipes, violating_recipes
from strategies.recipe import ROWS_BEYOND_4GIB, Recipe

ABSENT_ENGINE = ["sglang_writer"]  # the engine writer's kind: drawn only where it runs, never in these tests (_no_engine_writer)


@pytest.fixture(autouse=True)
def _no_engine_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The denominators here are the CPU machine's on every machine: the sglang writer (drawn only
    where it runs, tests/kernel/writers/test_sglang.py) is absent."""
    monkeypatch.setattr(sglang_writer, "_probe", lambda: (None, "sglang writer: off in tests/conformance/records/test_coverage.py"))


def _recipe(**fields: Any) -> Recipe:
    base: dict[str, Any] = {"seed": 0, "n_q": 1, "heads": 1, "row_lengths": (4,), "cache_rows": 16}
    base.update(fields)
    return Recipe(**base)


@pytest.mark.parametrize(
    ("length", "cls"),
    [
        (-3, "<0"),
        (-1, "<0"),
        (0, "0"),
        (1, "1"),
        (2, "2-31"),
        (31, "2-31"),
        (32, "32-126"),
        (126, "32-126"),
        (127, "127"),
        (128, "128"),
        (129, "129"),
        (130, "130-2046"),
        (254, "130-2046"),
        (255, "128k-1"),
        (256, "128k"),
        (257, "128k+1"),
        (258, "130-2046"),
        (1920, "128k"),
        (1921, "128k+1"),
        (2046, "130-2046"),
        (2047, "128k-1"),
        (2048, "2048-8191"),
        (2049, "2048-8191"),
        (8191, "2048-8191"),
        (8192, ">=8192"),
        (1 << 15, ">=8192"),
    ],
)
def test_row_length_classes_follow_the_tiles(length: int, cls: str) -> None:
    assert row_length_class(length) == cls


def test_every_length_has_one_known_class() -> None:
    assert {row_length_class(x) for x in range(-3, 9000)} == set(ROW_LENGTH_CLASSES)


def test_query_row_and_cache_classes() -> None:
    expected = {0: "0", 1: "1", 2: "2-8", 8: "2-8", 9: "9-64", 64: "9-64", 65: "65-256", 256: "65-256", 257: ">256", 65536: ">256"}
    assert {n: n_q_class(n) for n in expected} == expected
    small = (64 * 2**20) // 656  # the largest zero-filled cache
    assert [cache_class(n) for n in (1, 2, 64, 65, small, small + 1, ROWS_BEYOND_4GIB - 1, ROWS_BEYOND_4GIB)] == [
        "1",
        "2-64",
        "2-64",
        "<=64MiB",
        "<=64MiB",
        ">64MiB",
        ">64MiB",
        ">4GiB",
    ]


def test_features_of_a_plain_recipe() -> None:
    r = _recipe(n_q=3, heads=16, row_lengths=(0, 128, 300), index_pattern="duplicates", q_pad=(0, 3), out_pad=(2, 0), return_lse=False)
    f = features(r)
    assert f["row_length"] == {"0", "128", "130-2046"}  # one class per row, a set per recipe
    assert f["pattern"] == {"duplicates"} and f["writer"] == {"pow2"} and f["corruption"] == frozenset()
    assert f["heads"] == {"16"} and f["n_q"] == {"2-8"} and f["cache"] == {"2-64"}
    assert f["has_invalid"] == {"off"} and f["q_strides"] == {"head pad"} and f["out"] == {"out= row pad"}
    assert f["options"] == {"no lse", "no poison", "indptr[0]=0", "no stream tail", "unconsumed valid"} and f["cache_layout"] == {
        "[rows, 656]"
    }
    assert f["softmax_scale"] == {"default"} and f["latent"] == {"normal"}
    assert features(_recipe(softmax_scale=0.25, stream_offset=3, out_pad=(0, 0)))["softmax_scale"] == {"number"}
    assert features(_recipe(stream_offset=3, out_pad=(0, 0), q_pad=(1, 1)))["options"] >= {"indptr[0]>0"}
    assert features(_recipe(out_pad=(0, 0), q_pad=(1, 1)))["out"] == {"out= contiguous"}
    assert features(_recipe(has_invalid=True, invalid_pattern="none"))["has_invalid"] == {"on/none"}
    assert features(_recipe(has_invalid=True, invalid_pattern="leading_tile"))["has_invalid"] == {"on/leading_tile"}


def test_violations_are_read_from_the_recipe() -> None:
    assert violations(_recipe(writer="raw")) == {"raw_writer"}
    assert violations(_recipe(latent="above_cap")) == {"above_cap_latent"}
    assert violations(_recipe(invalid_pattern="tail")) == {"negative_without_has_invalid"}
    assert violations(_recipe(invalid_pattern="tail", has_invalid=True)) == frozenset()  # masked: no violation
    assert violations(_recipe(invalid_pattern="scattered", invalid_permille=0)) == frozenset()  # makes no negative entry
    several = _recipe(writer="raw", corruptions=({"kind": "nan_codes", "count": 2}, {"kind": "scale_not_pow2"}))
    assert violations(several) == {"raw_writer", "nan_codes", "scale_not_pow2"}


def test_coverage_counts_and_lines() -> None:
    cov = Coverage(reachable(violating_space(allow_out_of_range=False)))
    cov.add(_recipe(writer="raw", row_lengths=(1,)))
    cov.add(_recipe(corruptions=({"kind": "zero_scale"},), row_lengths=(1,)))
    assert cov.counts["writer"] == {"raw": 1, "pow2": 1} and cov.fraction("writer") == "2/3"
    assert cov.fraction("corruption") == "2/6" and "index_out_of_range" not in cov.reachable["corruption"]
    assert cov.never_hit("corruption") == ("above_cap_latent", "scale_above_cap", "nan_codes", "negative_without_has_invalid")
    lines = cov.summary_lines()
    assert lines[0].startswith("strategy features: row-length classes 1/10, patterns 1/6, writers 2/3, corruptions 2/6")
    assert any(line.strip().startswith("corruptions: above_cap_latent") for line in lines)
    assert cov.headline() == "rows 1/10 patterns 1/6 writers 2/3 corruptions 2/6"
    data = cov.to_json()
    assert data["corruption"]["counts"]["raw_writer"] == 1
    assert data["corruption"]["not_drawable"] == ["index_out_of_range", "scale_not_pow2", *ABSENT_ENGINE]
    assert set(data) == set(FAMILY_BY_KEY)
    cov.add(_recipe(row_lengths=(-1,), stream_offset=1))  # outside the violating strategies' space
    assert cov.outside("row_length") == ("<0",) and "drawn outside" in cov.summary_lines()[-1]


# ---------------------------------------------------------------------------------------------
# Denominators = what the strategies can really draw

NO_SHRINK = settings(database=None, phases=[Phase.generate], max_examples=3000, suppress_health_check=list(HealthCheck), deadline=None)


def _check_space(strategy: st.SearchStrategy[Recipe], expected: dict[str, tuple[str, ...]], draws: int) -> None:
    """Nothing the strategy draws falls outside `expected`; each class of it is drawn (by a
    run of `draws` examples, else by a search for that class)."""
    seen: dict[str, set[str]] = {f.key: set() for f in FAMILIES}

    @settings(database=None, max_examples=draws, derandomize=True, suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        recipe = data.draw(strategy)
        for key, classes in features(recipe).items():
            assert classes <= set(FAMILY_BY_KEY[key].classes), (key, classes)
            assert classes <= set(expected[key]), f"{key}: drew {sorted(classes - set(expected[key]))}, not in the denominator"
            seen[key] |= classes

    collect()
    for family in FAMILIES:
        for cls in expected[family.key]:
            if cls not in seen[family.key]:
                find(strategy, lambda r, f=family, c=cls: c in f.extract(r), settings=NO_SHRINK)


@pytest.fixture(scope="module")
def emulated() -> Any:
    from conformance.judging.target import build_target

    return build_target("emulated", device="cpu")


@pytest.mark.parametrize("prop", ["differential", "long_rows", "preconditions"])
def test_campaign_denominators_are_what_its_strategies_draw(emulated: Any, prop: str) -> None:
    from conformance.campaign.fuzz import _fuzz_strategies, fuzz_reachable

    expected = fuzz_reachable(emulated, [prop])
    _check_space(_fuzz_strategies(emulated, [prop])[prop], expected, draws=150)


@pytest.mark.parametrize(
    ("strategy", "space"),
    [
        (
            recipes(heads=(1, 16), allow_out=False, writers=WRITERS, max_n_q=300),
            recipes_space(heads=(1, 16), allow_out=False, writers=WRITERS, max_n_q=300),
        ),
        (recipes(exact=True, max_n_q=4, max_total_keys=600), recipes_space(exact=True, max_n_q=4, max_total_keys=600)),
        (recipes(huge_cache=True, max_n_q=4, max_total_keys=64), recipes_space(huge_cache=True, max_n_q=4, max_total_keys=64)),
        (violating_recipes(allow_out_of_range=True, heads=(16,)), violating_space(allow_out_of_range=True, heads=(16,))),
    ],
    ids=["raw-writer-heads-no-out", "exact", "huge-cache", "violating-oor"],
)
def test_other_strategy_parameters(strategy: st.SearchStrategy[Recipe], space: DrawSpace) -> None:
    _check_space(strategy, reachable(space), draws=60)


def test_denominators_of_the_default_campaign(emulated: Any) -> None:
    from conformance.campaign.fuzz import PROPERTIES, fuzz_reachable

    full = fuzz_reachable(emulated, list(PROPERTIES))
    counts = {key: len(classes) for key, classes in full.items()}
    # emulated on CPU: no beyond_4gib pattern, no exact data; raw writer, above-cap latent and
    # index_out_of_range only through the preconditions property (emulated reads indices bounded)
    assert counts["row_length"] == 14 and counts["pattern"] == 6 and counts["writer"] == 3
    assert counts["corruption"] == 7 and counts["latent"] == 8 and counts["heads"] == 16 and counts["n_q"] == 3
    assert full == reachable_union(space for prop in PROPERTIES for space in _spaces(emulated, prop))


def _spaces(target: Any, prop: str) -> list[DrawSpace]:
    from conformance.campaign.fuzz import _fuzz_parameters

    made = {"recipes": recipes_space, "violating_recipes": violating_space}
    return [made[kind](**kwargs) for kind, kwargs in _fuzz_parameters(target, [prop]).values()]


# ---------------------------------------------------------------------------------------------
# A short campaign


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))
    return tmp_path


def test_short_campaign_reports_rates_and_features(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.cli import main

    # preconditions only: its calls are the quickest (a few hundred ms each on CPU)
    args = "fuzz --kernel emulated --seconds 600 --max-chunks 1 --hypothesis-profile ci --chunk-examples 3 --property preconditions"
    code = main(args.split())
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    out = captured.out
    assert re.search(r"examples/s: \d+\.\d\d overall \(\d+ examples in", out), out
    assert re.search(r"^  preconditions +\d+ +0 +0 +\d+ +\d+\.\d +\d+\.\d\d$", out, re.M), out
    line = re.search(r"strategy features: row-length classes (\d+)/10, patterns (\d+)/6, writers (\d+)/3, corruptions (\d+)/7", out)
    assert line, out  # preconditions: rows of 1..512 keys (10 classes); emulated reads indices bounded: index_out_of_range runs
    assert "has_invalid 1/1" in out and "never hit" in out
    assert re.search(r"examples \d+ \(\d+\.\d\d/s\).*features rows \d+/10 patterns \d+/6 writers \d+/3 corruptions \d+/7", captured.err)

    run_dir = next((state / "state").glob("runs/fuzz-*"))
    data = json.loads((run_dir / "fuzz-summary.json").read_text(encoding="utf-8"))
    examples = data["examples"]
    assert examples > 0 and data["per_property"]["preconditions"]["examples"] == examples
    assert data["examples_per_s"] > 0 and data["per_property"]["preconditions"]["examples_per_s"] > 0
    assert data["properties"] == ["preconditions"] and data["exit_code"] == 0
    feats = data["features"]
    assert set(feats) == set(FAMILY_BY_KEY)
    assert sum(feats["writer"]["counts"].values()) == examples  # one writer per example
    assert sum(feats["corruption"]["counts"].values()) == examples  # one violation per example
    assert feats["corruption"]["hit"] == int(line.group(4)) and feats["corruption"]["not_drawable"] == ["scale_not_pow2", *ABSENT_ENGINE]
    assert data["summary_lines"][1].startswith("strategy features:")
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    assert report["fuzz_summary"] == data["summary_lines"]
    assert "## Fuzz campaign: examples/s and strategy features" in (run_dir / "report.md").read_text(encoding="utf-8")
