"""`python -m benchmarks fuzz_kills`: the fuzz command it runs is one the CLI takes, a campaign's
summary turns into a kill (its first failure's property, examples and seconds) or a survivor,
the medians count only kills, and an unknown mutant is a usage error naming it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks import fuzz_kills
from conformance.cli import build_parser


def _args(tmp_path: Path, *extra: str) -> Any:
    return fuzz_kills.parser().parse_args(["--out", str(tmp_path), "--seconds", "30", *extra])


def test_the_command_is_one_the_fuzz_cli_takes(tmp_path: Path) -> None:
    command = fuzz_kills.command("conformance.mutation.catalogue:tail_unmasked", _args(tmp_path), ["--pack", "16"])
    assert command[1:4] == ["-m", "conformance", "fuzz"]
    parsed = build_parser().parse_args(command[3:])
    assert parsed.kernel == "conformance.mutation.catalogue:tail_unmasked" and parsed.max_failures == 1 and parsed.pack == 16


def _fake_campaign(found: list[dict[str, Any]], examples: int) -> Any:
    def run(command: list[str], *, env: dict[str, str], timeout: float, **_: Any) -> subprocess.CompletedProcess[bytes]:
        folder = Path(env["CONFORMANCE_DIR"]) / "runs" / "fuzz-1"
        folder.mkdir(parents=True)
        (folder / "fuzz-summary.json").write_text(json.dumps({"examples": examples, "found": found}))
        return subprocess.CompletedProcess(command, 0)

    return run


def test_a_summary_becomes_a_kill_or_a_survivor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logs").mkdir()
    args = _args(tmp_path)
    found = [{"property": "long_rows", "seconds": 2.5, "examples": 7}, {"property": "differential", "seconds": 9.0, "examples": 40}]
    monkeypatch.setattr(fuzz_kills.subprocess, "run", _fake_campaign(found, 50))
    killed = fuzz_kills.run_one("spec", "v-killed", args, [])
    assert killed["killed"] and (killed["property"], killed["examples"], killed["seconds"]) == ("long_rows", 7, 2.5) and not killed["error"]
    monkeypatch.setattr(fuzz_kills.subprocess, "run", _fake_campaign([], 300))
    survived = fuzz_kills.run_one("spec", "v-survived", args, [])
    assert not survived["killed"] and survived["examples_run"] == 300 and survived["examples"] is None
    monkeypatch.setattr(fuzz_kills.subprocess, "run", lambda command, **_: subprocess.CompletedProcess(command, 1))
    lost = fuzz_kills.run_one("spec", "v-lost", args, [])
    assert not lost["killed"] and "no fuzz summary" in lost["error"]


def test_medians_count_kills_only_and_the_table_names_survivors_and_errors() -> None:
    def kill(examples: int, seconds: float) -> dict[str, Any]:
        return {"killed": True, "property": "differential", "examples": examples, "seconds": seconds, "examples_run": examples, "error": ""}

    survivor = {"killed": False, "property": None, "examples": None, "seconds": None, "examples_run": 900, "error": ""}
    lost = {**survivor, "examples_run": 0, "error": "no fuzz summary (see d.txt)"}
    results = {
        "plain": {"a": kill(4, 1.0), "b": kill(10, 3.0), "c": survivor, "d": lost},
        "pack": {"a": kill(2, 1.5), "b": kill(6, 2.0), "c": kill(30, 9.0), "d": kill(8, 1.0)},
    }
    summary = fuzz_kills.summarise(results)
    assert summary["plain"] == {"mutants": 4, "killed": 2, "survivors": ["c"], "errors": ["d"], "median_examples": 7.0, "median_seconds": 2}
    assert summary["pack"]["killed"] == 4 and summary["pack"]["median_examples"] == 7 and summary["pack"]["survivors"] == []
    text = fuzz_kills.table(results, summary)
    assert "survived (900 ex)" in text and "plain: killed 2/4; median to a kill 7 examples, 2.0 s; survived: c; no summary: d" in text
    markdown = fuzz_kills.table(results, summary, markdown=True)
    assert markdown.splitlines()[0] == "| mutant | plain | pack |"


def test_an_unknown_mutant_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz_kills.main(["--out", str(tmp_path), "--only", "tail_unmasked,no_such_mutant"]) == 2
    assert "unknown mutant(s) no_such_mutant" in capsys.readouterr().err
