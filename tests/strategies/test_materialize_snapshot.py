"""materialize is bit-identical to the recorded snapshot: every tensor of 215 recipes (the
oracle snapshot's fixed problems, recipes drawn from every strategy regime and 16 packed calls) hashes as it did
when tests/strategies/data/materialize_hashes.json was written (`python -m conformance snapshot materialize`)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.tools.snapshot.materialize import check

RECORDED = Path(__file__).resolve().parent / "data" / "materialize_hashes.json"


def test_materialize_matches_the_recorded_hashes() -> None:
    entries = json.loads(RECORDED.read_text())
    assert len(entries) == 215 and sum(1 for e in entries if e["recipe"].get("parts")) == 16
    assert check(entries) == []


def test_the_check_sees_a_changed_tensor() -> None:
    entries = json.loads(RECORDED.read_text())[:3]
    entries[1]["hashes"]["indices"] = "0" * 32
    differences = check(entries)
    assert len(differences) == 1 and "recipe 1 " in differences[0] and "indices differs" in differences[0]
