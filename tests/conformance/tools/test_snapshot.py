"""`python -m conformance snapshot oracle|materialize`: a written snapshot checks with no difference;
a changed tensor, a key the file lacks and a key the run no longer produces are each named; an
unreadable file is a one-line error with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conformance.cli import main
from conformance.tools.snapshot import oracle
from conformance.tools.snapshot.materialize import PACKS

ROOT = Path(__file__).resolve().parents[3]
CASE = "single_key"  # the smallest fixed problem: a few seconds for every profile


def test_oracle_snapshot_written_then_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "oracle.pt"
    assert main(["snapshot", "oracle", "--write", str(path), "-k", CASE]) == 0
    written = torch.load(path, weights_only=True)
    assert written and all(key.startswith(f"{CASE}/") for key in written)
    assert {f"{CASE}/ref/stored/out", f"{CASE}/emulated/lse", f"{CASE}/eval/gfx950/exact-steps/out_bound"} <= set(written)
    capsys.readouterr()
    assert main(["snapshot", "oracle", "--check", str(path), "-k", CASE]) == 0
    assert f"compared {len(written)} outputs: 0 differences" in capsys.readouterr().out

    changed = dict(written)
    out = changed[f"{CASE}/ref/stored/out"].clone()
    out.view(-1)[0] = torch.nextafter(out.view(-1)[0], torch.tensor(float("inf"), dtype=out.dtype))
    changed[f"{CASE}/ref/stored/out"] = out
    del changed[f"{CASE}/emulated/lse"]
    changed[f"{CASE}/gone/out"] = torch.zeros(1)
    torch.save(changed, path)
    assert main(["snapshot", "oracle", "--check", str(path), "-k", CASE]) == 1
    text = capsys.readouterr().out
    assert f"DIFFERS {CASE}/ref/stored/out" in text
    assert f"NEW     {CASE}/emulated/lse" in text
    assert f"MISSING {CASE}/gone/out" in text
    assert "3 differences" in text


def test_a_nan_payload_is_compared_by_its_bits() -> None:
    """The comparison is of bits: the same NaN is equal, another NaN payload is a difference."""
    nan = torch.tensor([float("nan")], dtype=torch.float32)
    other = nan.view(torch.int32).add(1).view(torch.float32)
    assert oracle._same(nan, nan.clone()) and not oracle._same(nan, other)
    assert oracle._same("ValueError: x", "ValueError: x") and not oracle._same("ValueError: x", nan)


@pytest.mark.parametrize("kind", ["oracle", "materialize"])
def test_an_unreadable_snapshot_is_one_line(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk"
    junk.write_text("not a snapshot\n")
    assert main(["snapshot", kind, "--check", str(junk)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"snapshot: {junk}: not ")
    assert main(["snapshot", kind, "--check", str(tmp_path / "absent")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["snapshot", kind, "--write", str(tmp_path / "no" / "folder")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_materialize_snapshot_checks_and_names_a_changed_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = json.loads((ROOT / "tests" / "strategies" / "data" / "materialize_hashes.json").read_text())[:4]
    path = tmp_path / "hashes.json"
    path.write_text(json.dumps(entries))
    assert main(["snapshot", "materialize", "--check", str(path)]) == 0
    assert "0 difference(s)" in capsys.readouterr().out
    entries[2]["hashes"]["q"] = "0" * 32
    path.write_text(json.dumps(entries))
    assert main(["snapshot", "materialize", "--check", str(path)]) == 1
    assert "recipe 2 (" in capsys.readouterr().out


def test_materialize_snapshot_write_is_read_back_by_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hashes.json"
    assert main(["snapshot", "materialize", "--write", str(path), "--count", "2"]) == 0
    entries = json.loads(path.read_text())
    from conformance.tools.snapshot.cases import cases

    assert len(entries) == len(cases()) + 2 + PACKS
    assert entries[0]["recipe"] == cases()[0][1].to_json_dict()
    assert main(["snapshot", "materialize", "--check", str(path)]) == 0


def test_a_device_that_is_not_there_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "materialize", "--check", str(tmp_path / "x.json"), "--device", "nodevice"]) == 2
    assert "--device 'nodevice'" in capsys.readouterr().err
