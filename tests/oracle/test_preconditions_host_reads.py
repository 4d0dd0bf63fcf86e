"""oracle.preconditions.check_call: host reads per call (one on a clean call, two when something
is found or row 0 holds NaN codes, whatever the number of chunks), and its findings on the violation strategies: exactly
the violation each recipe declares, with counts that a brute-force recount over the consumed
rows and positions confirms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings

from conformance.records.coverage import violations
from conformance.tools.op_count import count_ops
from kernel.record import RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET
from oracle import preconditions as pc
from strategies.hypothesis_recipes import recipes, violating_recipes
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe

# the finding kind (severity "violation") each declared violation of a recipe gives
EXPECTED = {
    "raw_writer": pc.KIND_SCALE_NOT_POW2,
    "scale_not_pow2": pc.KIND_SCALE_NOT_POW2,
    "above_cap_latent": pc.KIND_SCALE_ABOVE_CAP,
    "scale_above_cap": pc.KIND_SCALE_ABOVE_CAP,
    "nan_codes": pc.KIND_NAN_CODES,
    "zero_scale": pc.KIND_SCALE_BAD,
    "negative_without_has_invalid": pc.KIND_INDEX_OOR,
    "index_out_of_range": pc.KIND_INDEX_OOR,
}
# sglang's quantiser: scales amax / 448 (not powers of two), 0 for an all-zero tile
SGLANG = {pc.KIND_SCALE_NOT_POW2, pc.KIND_SCALE_BAD}


def host_reads(fn: Any) -> int:
    """Ops of one call of fn that read device data back to the host (scalar reads, nonzero,
    unique, tolist, ...): on the CPU the same code paths as on a GPU."""
    return sum(count_ops(fn).syncs.values())


def call(p: Problem, **kw: Any) -> list[pc.Finding]:
    return pc.check_call(p.q, p.kv_cache, p.indices, p.indptr, has_invalid=p.has_invalid, softmax_scale=p.softmax_scale, **kw)


def _recount(p: Problem) -> dict[str, int]:
    """Brute force, per query row and position in Python: the out-of-range consumed entries,
    then over the unique valid consumed rows the NaN codes and the scales of each kind."""
    indices = p.indices.tolist()
    ptr = p.indptr.tolist()
    flat = p.kv_cache.reshape(-1, RECORD_BYTES)
    rows_total = flat.shape[0]
    oor, rows = 0, set()
    for q in range(len(ptr) - 1):
        for i in range(max(ptr[q], 0), min(ptr[q + 1], len(indices))):
            v = indices[i]
            if v >= rows_total or (v < 0 and not p.has_invalid):
                oor += 1
            elif v >= 0:
                rows.add(v)
    out = {pc.KIND_INDEX_OOR: oor, pc.KIND_NAN_CODES: 0, pc.KIND_SCALE_BAD: 0, pc.KIND_SCALE_ABOVE_CAP: 0, pc.KIND_SCALE_NOT_POW2: 0}
    for r in sorted(rows):
        rec = flat[r].numpy()
        out[pc.KIND_NAN_CODES] += int(((rec[:SCALE_OFFSET] & 0x7F) == 0x7F).sum())
        for s in rec[SCALE_OFFSET:ROPE_OFFSET].copy().view(np.float32).tolist():
            if not (s > 0 and math.isfinite(s)):
                out[pc.KIND_SCALE_BAD] += 1
                continue
            out[pc.KIND_SCALE_ABOVE_CAP] += s > 128.0
            out[pc.KIND_SCALE_NOT_POW2] += math.frexp(s)[0] != 0.5 or s < 2.0**-126
    return out


def test_clean_call_reads_once() -> None:
    p = materialize(Recipe(seed=5, n_q=6, heads=4, row_lengths=(300, 0, 128, 700, 5, 40), cache_rows=2000), "cpu")
    assert call(p) == []
    assert host_reads(lambda: call(p)) == 1
    assert host_reads(lambda: call(p, chunk_rows=3)) == 1  # hundreds of record chunks, still one read


def test_violating_call_reads_twice_whatever_the_chunks() -> None:
    recipe = Recipe(seed=6, n_q=4, heads=2, row_lengths=(50, 3, 200, 7), cache_rows=300, writer="raw", poison=True)
    p = materialize(recipe, "cpu")
    p.kv_cache.view(-1, RECORD_BYTES)[int(p.indices[0]), 7] = 0x7F  # a NaN code in a consumed row too
    found = call(p)
    assert {f.kind for f in found} >= {pc.KIND_SCALE_NOT_POW2, pc.KIND_NAN_CODES}
    assert host_reads(lambda: call(p)) == 2
    assert host_reads(lambda: call(p, chunk_rows=5)) == 2
    assert [f.to_dict() for f in call(p, chunk_rows=5)] == [f.to_dict() for f in found]


def test_scan_apis_read_at_most_twice() -> None:
    p = materialize(Recipe(seed=7, n_q=3, heads=1, row_lengths=(40, 9, 60), cache_rows=100, writer="raw"), "cpu")
    assert host_reads(lambda: pc.check_records(p.kv_cache, chunk_rows=7)) == 2
    assert host_reads(lambda: pc.check_records_split(p.kv_cache, p.referenced_rows, chunk_rows=7)) <= 2 + 3  # + the row list's range
    clean = materialize(Recipe(seed=7, n_q=3, heads=1, row_lengths=(40, 9, 60), cache_rows=100), "cpu")
    referenced = clean.kv_cache.reshape(-1, RECORD_BYTES)[clean.referenced_rows]  # unreferenced rows may hold anything
    assert pc.check_records(referenced) == []
    assert host_reads(lambda: pc.check_records(referenced, chunk_rows=7)) == 1
    # the consumed rows' count, every kind's count (nothing found: no second read)
    assert host_reads(lambda: pc.scan_index_stream(clean.indices, clean.indptr, 100, has_invalid=False, chunk_entries=5)) == 2


@settings(max_examples=40, deadline=None)
@given(recipe=violating_recipes(allow_out_of_range=True, max_total_keys=2048))
def test_violating_recipes_report_exactly_their_violation(recipe: Recipe) -> None:
    p = materialize(recipe, "cpu")
    found = call(p)
    declared = violations(recipe)
    got = {f.kind for f in found if f.severity == "violation"}
    if declared == {"sglang_writer"}:
        assert got and got <= SGLANG, got
    else:
        assert got == {EXPECTED[k] for k in declared}, (sorted(declared), sorted(got), recipe.to_json())
    counts = _recount(p)
    for f in found:
        if f.kind in counts:
            assert f.count == counts[f.kind], (f.kind, f.count, counts[f.kind])
            assert 0 < len(f.examples) <= pc.DEFAULT_MAX_EXAMPLES
    assert host_reads(lambda: call(p)) <= 2


@settings(max_examples=20, deadline=None)
@given(recipe=recipes(max_n_q=8, max_row=600, max_total_keys=2000))
def test_valid_recipes_report_no_violation_in_one_read(recipe: Recipe) -> None:
    p = materialize(recipe, "cpu")
    found = call(p)
    assert not pc.has_violation(found), [f.kind for f in found]
    flat = p.kv_cache.reshape(-1, RECORD_BYTES)
    row0_nan = flat.shape[0] > 0 and bool(((flat[0, :SCALE_OFFSET] & 0x7F) == 0x7F).any())
    # a second read only for a notice's details, or to look for masked reads of a NaN row 0
    assert host_reads(lambda: call(p)) == (1 if not found and not row0_nan else 2)
