"""benchmarks.batch_shapes (the calls' shapes from example records) and the pieces of
benchmarks.throughput that run without a campaign (the other tree, rows, recipe samples, the
bare-kernel limit, the table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import batch_shapes, throughput
from strategies.recipe import Recipe


def _write_records(folder: Path, calls: list[tuple[str, Recipe, float]]) -> None:
    """Example records as conformance.judging.harness.record writes them (a differential call: one per mode)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for prop, recipe, when in calls:
        modes = ("exact-steps", "float64") if prop != "preconditions" else (None,)
        for mode in modes:
            line = {"property": f"fuzz:{prop}", "outcome": "pass", "recipe": recipe.to_json_dict(), "time": when}
            if mode:
                line["mode"] = mode
            lines.append(json.dumps(line))
    (folder / "examples-main.jsonl").write_text("\n".join(lines) + "\n")


def test_batch_shapes_counts_each_call_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = Recipe(seed=1, n_q=1, heads=1, row_lengths=(3,), cache_rows=8)
    wide = Recipe(seed=2, n_q=40, heads=16, row_lengths=(100,) * 40, cache_rows=500, has_invalid=True)
    _write_records(
        tmp_path / "a" / "runs" / "r1", [("differential", small, 1.0), ("differential", wide, 2.0), ("preconditions", small, 3.0)]
    )
    _write_records(tmp_path / "b", [("differential", small, 1.0)])
    assert batch_shapes.main(["--set", f"a={tmp_path / 'a'}", "--set", f"b={tmp_path / 'b'}", "--json", str(tmp_path / "s.json")]) == 0
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["a"]["all"]["calls"] == 3 and data["b"]["all"]["calls"] == 1
    assert data["a"]["differential"]["shares"]["n_q"]["1"] == 50.0 and data["a"]["differential"]["shares"]["n_q"]["33-64"] == 50.0
    assert data["a"]["all"]["shares"]["keys"]["2048-8191"] == pytest.approx(100 / 3)
    assert data["a"]["all"]["shares"]["flags"]["has_invalid"] == pytest.approx(100 / 3)
    assert data["a"]["all"]["calls_per_s_after_ramp"] == pytest.approx(1.0)  # from the widest call (t=2) to t=3: 2 calls in 1 s
    assert "columns: a, b" in capsys.readouterr().out


def test_batch_shapes_refuses_what_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert batch_shapes.main(["--set", f"a={tmp_path / 'missing'}"]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert batch_shapes.main(["--set", f"a={tmp_path / 'empty'}"]) == 2
    assert "no example records" in capsys.readouterr().err
    assert batch_shapes.main(["--set", "nothing"]) == 2


def test_throughput_other_tree_and_rows(tmp_path: Path) -> None:
    assert throughput.against_tree(str(throughput.ROOT), tmp_path) == throughput.ROOT
    with pytest.raises(ValueError, match="not a checkout folder, and no git worktree of it"):
        throughput.against_tree("no-such-revision-anywhere", tmp_path)
    assert throughput._variant("lists=--recipes-per-example 16") == ("lists", ["--recipes-per-example", "16"])
    for bad in ("against=", "x", "a/b=--y"):
        with pytest.raises(Exception, match="expected NAME=FUZZ_ARGS"):
            throughput._variant(bad)


def test_throughput_samples_and_bare_limit(tmp_path: Path) -> None:
    recipes = [Recipe(seed=s, n_q=1, heads=2, row_lengths=(5 + s,), cache_rows=16) for s in range(6)]
    _write_records(
        tmp_path / "campaign" / "state" / "emulated-1" / "runs" / "r", [("differential", r, float(i)) for i, r in enumerate(recipes)]
    )
    sample = throughput.sample_recipes(tmp_path / "campaign", "emulated", 3)
    assert sample == recipes[::2]
    limit = throughput.bare_limit("emulated", sample, "cpu", warmup=1)
    assert limit["calls"] == 3 and limit["seconds"] > 0 and limit["calls_per_s"] == pytest.approx(3 / limit["seconds"])
    assert limit["raised"] == 0 and limit["recipes"] == 3
    pack = Recipe.pack([Recipe(seed=s, n_q=1, heads=2, row_lengths=(5,), cache_rows=16) for s in range(3)])
    packed = throughput.bare_limit("emulated", [pack], "cpu", warmup=0)  # one call, three recipes
    assert packed["calls"] == 1 and packed["recipes"] == 3 and packed["recipes_per_s"] == pytest.approx(3 * packed["calls_per_s"])
    beyond = Recipe(seed=9, n_q=1, heads=2, row_lengths=(4,), cache_rows=8, corruptions=({"kind": "index_out_of_range", "count": 1},))
    refused = throughput.bare_limit("emulated", [beyond], "cpu", warmup=0)  # the emulated kernel refuses it: timed all the same
    assert refused["calls"] == 1 and refused["raised"] == 1 and refused["seconds"] > 0


def test_throughput_table() -> None:
    rates = {
        "against": {"emulated": {"examples_per_s": 10.0, "distinct_per_s": 9.0, "processes": 2}},
        "this": {
            "emulated": {
                "examples_per_s": 15.0,
                "distinct_per_s": 14.0,
                "processes": 2,
                "per_property": {
                    "differential": {"examples": 30, "calls": 20},
                    "long_rows": {"examples": 6, "calls": 4},
                    "preconditions": {"examples": 3},  # no calls counted: left out
                },
            }
        },
    }
    limits = {"against": {"emulated": {"recipes_per_s": 40.0}}, "this": {"emulated": {"calls_per_s": 10.0, "recipes_per_s": 40.0}}}
    text = throughput.table(["against", "this"], rates, limits, ["emulated", "torch-sdpa"])
    lines = text.splitlines()
    assert lines[1].split() == ["emulated", "against", "2", "10.00", "9.00", "-", "80.0", "0.125", "1.00"]  # no calls counted
    assert lines[2].split() == ["emulated", "this", "2", "15.00", "14.00", "1.50", "80.0", "0.188", "1.50"]  # 36 examples in 24 calls
    assert "no summary" in lines[3]
