"""The example log (conformance.judging.harness.record / append_records): one JSON line per
result in the run's examples-<worker>.jsonl, appended, readable as strict JSON lines, with the
mode open() gives a new file; the run folder comes back when removed during the run."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.durability.state import RUN_ID_ENV, STATE_DIR_ENV, run_dir
from conformance.judging.harness import append_records, example_line, record
from strategies.materialize import materialize
from strategies.recipe import Recipe

RECIPE = Recipe(seed=3, n_q=2, heads=4, row_lengths=(5, 9), cache_rows=64)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.setenv(RUN_ID_ENV, "log-test")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    yield tmp_path / "state" / "runs" / "log-test"


def _lines(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "examples-main.jsonl").read_text(encoding="utf-8").splitlines()]


def test_lines_of_one_call_are_appended_in_order(state: Path) -> None:
    problem = materialize(RECIPE, "cpu")
    record("differential", "k", problem, outcome="pass", out_ratio=0.25, lse_ratio=0.5, extra={"mode": "exact-steps"})
    shared = RECIPE.to_json_dict()
    append_records(
        [
            example_line("long_rows", "k", problem, outcome=o, out_ratio=r, extra={"mode": m}, recipe_json=shared)
            for o, r, m in (("pass", 0.125, "exact-steps"), ("fail", 3.0, "float64"))
        ]
    )
    append_records([])  # nothing to write: no file touched, no empty line
    lines = _lines(state)
    assert [(x["property"], x["outcome"], x["out_ratio"], x["mode"]) for x in lines] == [
        ("differential", "pass", 0.25, "exact-steps"),
        ("long_rows", "pass", 0.125, "exact-steps"),
        ("long_rows", "fail", 3.0, "float64"),
    ]
    assert all(Recipe.from_json_dict(x["recipe"]) == RECIPE for x in lines)
    assert lines[0]["lse_ratio"] == (0.5 if problem.return_lse else None)
    assert shared == RECIPE.to_json_dict()  # the caller's dict is not modified


def test_a_new_log_gets_what_open_gives(state: Path) -> None:
    previous = os.umask(0o027)
    try:
        record("differential", "k", materialize(RECIPE, "cpu"), outcome="pass")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((state / "examples-main.jsonl").stat().st_mode) == 0o640


def test_the_run_folder_comes_back_when_removed(state: Path) -> None:
    problem = materialize(RECIPE, "cpu")
    record("differential", "k", problem, outcome="pass")
    assert run_dir() == state
    (state / "examples-main.jsonl").unlink()
    state.rmdir()
    record("differential", "k", problem, outcome="fail")
    assert [x["outcome"] for x in _lines(state)] == ["fail"]


def test_the_run_folder_follows_the_environment(state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_dir() == state
    monkeypatch.setenv(RUN_ID_ENV, "other")
    assert run_dir() == tmp_path / "state" / "runs" / "other"
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "elsewhere"))
    assert run_dir() == tmp_path / "elsewhere" / "runs" / "other" and run_dir().is_dir()
