"""scripts/campaign_table.py: the processes of one kernel on one device merged into one row, the
same kernel on another device (the GPU's processes and the host's CPU processes of one campaign)
in a row of its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import campaign_table as ct  # noqa: E402


def _summary(device: str, examples: int, rate: float, cpu_s: float, hit: dict[str, int]) -> dict[str, Any]:
    return {
        "kernel": "emulated",
        "device": device,
        "seconds": 100,
        "examples": examples,
        "examples_per_s": rate,
        "cpu_s": cpu_s,
        "failures": 0,
        "per_property": {"differential": {"examples": examples, "examples_per_s": rate}},
        "features": {"rows": {"counts": hit}},
    }


def test_rows_per_kernel_and_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for n, (device, examples, rate, hit) in enumerate(
        [("cuda", 1000, 10.0, {"a": 3, "b": 0}), ("cuda", 800, 8.0, {"a": 0, "b": 1}), ("cpu", 300, 3.0, {"a": 1, "b": 0})]
    ):
        path = tmp_path / f"s{n}.json"
        path.write_text(json.dumps(_summary(device, examples, rate, 100.0, hit)))
        paths.append(str(path))
    assert ct.main([*paths, "--markdown"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| emulated")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in rows]
    assert [c[:6] for c in cells] == [
        ["emulated", "cuda", "2", "100", "1800", "18.00"],  # two processes merged: rates summed, any process's hit counts
        ["emulated", "cpu", "1", "100", "300", "3.00"],
    ]
    assert cells[0][-1] == "2/2" and cells[1][-1] == "1/2"
    assert cells[0][-3] == "9.00"  # examples per CPU second: 1800 / 200
