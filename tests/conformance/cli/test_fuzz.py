"""`python -m conformance fuzz`: a short campaign of the emulated kernel finds nothing; one of a
broken kernel finds, shrinks and saves a failure that replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.durability.state import kernel_slug

BROKEN = "conformance.mutation.catalogue:lse_base2"


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))
    return tmp_path


def _report(state: Path) -> dict:
    paths = list((state / "state").glob("runs/fuzz-*/report.json"))
    assert len(paths) == 1
    return json.loads(paths[0].read_text(encoding="utf-8"))


def test_fuzz_emulated_finds_nothing(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = "fuzz --kernel emulated --seconds 600 --max-chunks 2 --hypothesis-profile ci --chunk-examples 2"
    code = main(args.split())
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert "no failures found" in captured.out
    chunks = int(captured.out.split(" chunk(s)")[0].rsplit(", ", 1)[1])
    assert chunks == 2, captured.out  # --max-chunks ends it (fresh seeds, sizes ramping up), not the clock
    assert "fuzz: kernel emulated (profile gfx950) on cpu" in captured.err  # progress on stderr
    assert not list((state / "pending").rglob("*.json"))
    report = _report(state)
    assert report["status"] == "clean" and report["examples"] > 0
    assert set(report["kernels"]["emulated"]["properties"]) <= {"fuzz:differential", "fuzz:long_rows", "fuzz:preconditions"}


def test_fuzz_broken_kernel_finds_and_saves_a_failure(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bounded by its examples (one chunk of the ci profile's seed 0), not by the clock: a loaded
    2-core runner judges as many examples as an idle one. The shrink limit is a backstop only
    (Hypothesis ends the shrink itself within seconds)."""
    code = main(
        [
            "fuzz",
            "--kernel",
            BROKEN,
            "--seconds",
            "600",
            "--max-chunks",
            "1",
            "--shrink-seconds",
            "300",
            "--max-failures",
            "1",
            "--hypothesis-profile",
            "ci",
            "--property",
            "long_rows",
        ]
    )
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    assert "FAILURES: 1 distinct" in captured.out and "wrong result: lse outside the bound" in captured.out
    saved = list((state / "pending").rglob("*.json"))
    assert [p.parent.name for p in saved] == [kernel_slug(BROKEN)]  # the kernel's pending folder
    entry = json.loads(saved[0].read_text(encoding="utf-8"))
    assert entry["provenance"]["kernel"] == BROKEN and entry["provenance"]["property"] == "fuzz:long_rows"
    assert entry["expect"] == "conform" and entry["recipe"]["return_lse"] is True
    assert entry["recipe"]["n_q"] <= 2 and entry["recipe"]["heads"] <= 2  # shrunk
    assert str(saved[0]) in captured.out
    assert _report(state)["failing_examples"] >= 1
    assert main(["replay", str(saved[0]), "--kernel", BROKEN]) == 1
    replayed = capsys.readouterr().out
    assert "verdict: FAILS" in replayed and "lse values exceed the bound" in replayed  # the mutant's lse, not out
    assert "[exact-steps] lse:" in replayed and "[exact-steps] out:" not in replayed
    assert main(["replay", str(saved[0]), "--kernel", "emulated"]) == 0


def test_fuzz_usage_errors(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--kernel", "nope:nothing"]) == 2
    assert "cannot import 'nope'" in capsys.readouterr().err
    assert main(["fuzz", "--kernel", "emulated", "--seconds", "-1"]) == 2
    assert "must be a positive number" in capsys.readouterr().err


def test_fuzz_profile_options_mean_what_they_mean_elsewhere(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--profile is the numerics profile (as in pytest and replay), --hypothesis-profile the
    Hypothesis one; a Hypothesis profile name given to --profile gets a hint."""
    assert main(["fuzz", "--kernel", "emulated", "--seconds", "1", "--profile", "ci"]) == 2
    err = capsys.readouterr().err
    assert "unknown numerics profile 'ci'" in err and "--hypothesis-profile ci" in err
    assert main(["fuzz", "--kernel", "emulated", "--seconds", "1", "--hypothesis-profile", "bogus"]) == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err
    code = main(
        [
            "fuzz",
            "--kernel",
            "emulated",
            "--seconds",
            "600",
            "--max-chunks",
            "1",
            "--shrink-seconds",
            "1",
            "--profile",
            "exact",
            "--hypothesis-profile",
            "ci",
            "--chunk-examples",
            "2",
            "--property",
            "differential",
        ]
    )
    err = capsys.readouterr().err
    assert code in (0, 1) and "fuzz: kernel emulated (profile exact) on cpu" in err and "Hypothesis profile ci" in err
    session = json.loads(next((state / "state").glob("runs/fuzz-*/session.json")).read_text(encoding="utf-8"))
    assert session["finished"] and session["exitstatus"] == code  # the report can tell a failed campaign
