"""`python -m conformance dumps sglang-writer`: the caches written, checked, compared and readable by
`preconditions`, through a stand-in for sglang's quantiser on the CPU (the interpreter's path); the
writer's module state is left as it was; where the writer cannot run, one line and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

import pytest

import kernel.engines
from conformance.cli import main
from kernel.writers import sglang as writer
from tests.kernel.writers.test_sglang import StandIn

ROOT = Path(__file__).resolve().parents[3]


def test_interpreter_path_through_a_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stand_in = StandIn()

    def load(module: str, name: str) -> tuple[ModuleType, str]:
        assert module == writer.QUANT_MODULE and os.environ.get("TRITON_INTERPRET") == "1"
        return stand_in, "stand-in"

    monkeypatch.setattr(kernel.engines, "load_sglang", load)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    probe = writer._probe
    out = tmp_path / "dumps"
    h200 = ROOT / "tests" / "kernel" / "writers" / "data" / "sglang_writer_h200.pt"
    assert main(["dumps", "sglang-writer", "--out", str(out), "--interpreter", "--rows", "128", "--compare-with", str(h200)]) == 0
    capsys.readouterr()
    assert writer._probe is probe and writer.WRITE_DEVICE == "cuda" and "TRITON_INTERPRET" not in os.environ
    summary = json.loads((out / "summary.json").read_text())
    assert summary["source"].startswith("Triton's CPU interpreter")
    activations = summary["caches"]["activations"]
    assert activations["records"] == 128 and activations["rounding_failures"] == []
    assert activations["pow2"]["identical"] + activations["pow2"]["differing"] == 128
    assert summary["compare_with"]["records"] == 32 and summary["compare_with"]["rounding_failures_here"] == []
    assert stand_in.calls[0] == ((128, 1, 512), (128, 1, 64))
    code = main(["preconditions", str(out / "activations.pt"), "--format", "json"])
    assert code in (0, 1) and json.loads(capsys.readouterr().out)["inputs"]["kv_rows"] == 128


def test_where_the_writer_cannot_run_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(writer, "unavailable_reason", lambda: "sglang writer: needs a CUDA device")
    assert main(["dumps", "sglang-writer", "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err.strip() == "dumps: sglang writer: needs a CUDA device"
    assert not (tmp_path / "d").exists()
    junk = tmp_path / "junk.pt"
    junk.write_text("no")
    assert main(["dumps", "sglang-writer", "--out", str(tmp_path / "d"), "--compare-with", str(junk)]) == 2
    assert "not a .pt of latent, rope and sglang records" in capsys.readouterr().err
