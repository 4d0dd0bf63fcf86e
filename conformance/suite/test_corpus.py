"""Properties 4 and regression replay: every corpus entry runs on every run.

The edge catalogue is the corpus's hand-written `edge-*` entries, one per edge class; the other
entries are regressions and crashes captured by the suite. An entry expecting "conform" is
judged by the differential check; one expecting "precondition" runs as a violation (recorded,
judged only on what the contract promises).
"""

from __future__ import annotations

import pytest

from conformance.judging.checks import differential, violation_run
from conformance.judging.target import Target
from conformance.records.corpus import CORPUS_DIR, corpus_files, load_entry

ENTRIES = corpus_files(CORPUS_DIR)


@pytest.mark.parametrize("path", ENTRIES, ids=[p.stem for p in ENTRIES])
def test_corpus_entry(target: Target, path) -> None:  # type: ignore[no-untyped-def]
    entry = load_entry(path)
    recipe = entry.recipe
    if entry.expect == "precondition":
        violation_run(target, recipe, property_name=f"corpus:{entry.name}")
    else:
        differential(target, recipe, property_name=f"corpus:{entry.name}", use_target=False)
