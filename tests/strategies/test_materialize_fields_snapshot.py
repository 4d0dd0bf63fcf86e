"""materialize is bit-identical to a second recorded snapshot whose recipes use the fields the
first one (tests/strategies/test_materialize_snapshot.py) predates: q and out= layouts (strategies.layouts),
garbage in unconsumed entries, out-of-range index corruptions, with the corpus' own recipes.
tests/strategies/data/materialize_hashes_fields.json: the corpus' recipes and 80 drawn ones (general and
precondition-violating strategies), hashed by materialize as it was before its device copies
were merged (one host-to-device copy of the index tensors, layouts placed without a host read)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.tools.snapshot.materialize import check

RECORDED = Path(__file__).resolve().parent / "data" / "materialize_hashes_fields.json"


def test_materialize_matches_the_recorded_hashes_of_every_field() -> None:
    entries = json.loads(RECORDED.read_text())
    kinds = {c["kind"] for e in entries for c in e["recipe"].get("corruptions", [])}
    layouts = {e["recipe"].get("q_layout", "rows") for e in entries} | {e["recipe"].get("out_layout", "rows") for e in entries}
    assert "index_out_of_range" in kinds and {"heads", "shared_rows", "overlapping_heads"} <= layouts
    assert check(entries) == []
