"""`python -m conformance report --features RUN_DIR...`: examples per second, outcomes per property
and writer, strategy features hit and err/bound of passing examples, per folder; cut lines and
recipes that no longer parse are counted, not fatal; a folder without examples is a one-line
error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from strategies.recipe import Recipe


def _line(recipe: Recipe, outcome: str, t: float, out_ratio: float | None, prop: str = "differential") -> str:
    return json.dumps(
        {
            "property": prop,
            "kernel": "emulated",
            "outcome": outcome,
            "out_ratio": out_ratio,
            "lse_ratio": None,
            "recipe": recipe.to_json_dict(),
            "time": t,
        }
    )


def _run_folder(path: Path) -> Path:
    path.mkdir()
    long_rows = Recipe(seed=1, n_q=2, heads=4, row_lengths=(0, 2048), cache_rows=4096)
    raw = Recipe(seed=2, n_q=1, heads=16, row_lengths=(128,), cache_rows=200, writer="raw")
    lines = [
        _line(long_rows, "pass", 100.0, 0.25),
        _line(raw, "pass", 104.0, 0.5),
        _line(raw, "observed", 108.0, None, prop="preconditions"),
        '{"property": "differential", "kernel": "emulated", "outcome": "fail", "recipe": {"seed": 1}, "time": 110.0}',
    ]
    (path / "examples-gw0.jsonl").write_text("\n".join(lines[:2]) + "\n")
    (path / "examples-gw1.jsonl").write_text("\n".join(lines[2:]) + '\n{"property": "differ')  # a line cut short
    return path


def test_features_of_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_folder(tmp_path / "run")
    assert main(["report", "--features", "--json", str(run)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert summary["examples"] == 4 and summary["unreadable_lines"] == 1 and summary["recipes_unparsed"] == 1
    assert summary["outcomes"] == {"pass": 2, "observed": 1, "fail": 1}
    assert summary["per_property"] == {"differential": {"pass": 2, "fail": 1}, "preconditions": {"observed": 1}}
    assert summary["per_writer"]["raw"] == {"pass": 1, "observed": 1}
    assert summary["span_s"] == 10.0 and summary["examples_per_s"] == 0.4
    rows = summary["features"]["row_length"]
    assert rows["counts"] == {"0": 1, "2048-8191": 1, "128": 2} and rows["hit"] == 3
    assert summary["features"]["writer"]["counts"] == {"pow2": 1, "raw": 2}
    assert summary["out_ratio"] == {"max": 0.5, "median": 0.375, "n": 2} and summary["lse_ratio"]["n"] == 0
    assert main(["report", "--features", str(run)]) == 0
    text = capsys.readouterr().out
    assert "examples 4 (fail 1, observed 1, pass 2) over 10.0 s: 0.40 examples/s" in text
    assert "writers 2/4: pow2 1, raw 2" in text and "skipped: 1 unreadable lines, 1 unparsed recipes" in text


def test_several_folders_and_bad_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _run_folder(tmp_path / "a"), _run_folder(tmp_path / "b")
    assert main(["report", "--features", "--json", str(first), str(second)]) == 0
    assert [s["run_dir"] for s in json.loads(capsys.readouterr().out)] == [str(first), str(second)]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", "--features", str(first), str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no examples-*.jsonl" in err[0]
    assert main(["report", str(first), str(second)]) == 2
    assert "one RUN_DIR at a time" in capsys.readouterr().err
