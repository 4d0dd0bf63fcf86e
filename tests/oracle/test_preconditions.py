"""oracle.preconditions: each finding kind from a constructed case, clean writers, chunking, >4 GiB.

Set PRECONDITIONS_BIG_WHOLE=1 to also scan the whole >4 GiB cache (slow on small machines).
"""

from __future__ import annotations

import json
import math
import os
import resource
import warnings

import numpy as np
import pytest
import torch

from kernel.contract import ContractError
from kernel.record import RECORD_BYTES, SCALE_OFFSET, encode_records, record_scales
from oracle import preconditions as pc

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make_records(n: int, writer: str = "pow2", seed: int = 0, lead: tuple[int, ...] | None = None) -> torch.Tensor:
    """n records whose blocks span many magnitudes (zero blocks and |x| = 57344 included)."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.pow(2.0, torch.randint(-20, 14, (n, 4, 1), generator=g).float())
    lat = (torch.randn(n, 4, 128, generator=g) * mag).clamp(-57344, 57344)
    lat[::7, 1] = 0.0
    lat[1::11, 2, 5] = 57344.0
    rope = torch.randn(n, 64, generator=g).bfloat16()
    rec = encode_records(lat.reshape(n, 512), rope, writer)
    return rec if lead is None else rec.reshape(*lead, RECORD_BYTES)


def set_scale(rec: torch.Tensor, row: int, block: int, value: float | None = None, bits: int | None = None) -> None:
    """Store an f32 scale (by value, or by its 32-bit pattern) into record `row`, block 0..3."""
    flat = rec.view(-1, RECORD_BYTES)
    if bits is None:
        word = torch.tensor([value], dtype=torch.float32).view(torch.uint8)
    else:
        word = torch.tensor([bits - 2**32 if bits >= 2**31 else bits], dtype=torch.int32).view(torch.uint8)
    flat[row, SCALE_OFFSET + 4 * block : SCALE_OFFSET + 4 * block + 4] = word.to(flat.device)


def by_kind(findings: list[pc.Finding]) -> dict[str, pc.Finding]:
    kinds = [f.kind for f in findings]
    assert len(kinds) == len(set(kinds)), kinds
    return {f.kind: f for f in findings}


def i32(xs: list[int]) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int32)


# --------------------------------------------------------------------------- records


@pytest.mark.parametrize("writer", ["pow2", "pow2-floor"])
@pytest.mark.parametrize("device", DEVICES)
def test_pow2_writers_are_clean(writer: str, device: str) -> None:
    rec = make_records(300, writer).to(device)
    assert pc.check_records(rec) == []
    assert pc.check_records(rec, chunk_rows=7) == []


def test_raw_writer_gives_scale_not_pow2_with_exact_count() -> None:
    rec = make_records(300, "raw")
    scales = record_scales(rec).numpy().astype(np.float64)
    mantissa, _ = np.frexp(scales)
    expected = int(((mantissa != 0.5) | (scales < 2.0**-126)).sum())
    found = by_kind(pc.check_records(rec))
    assert set(found) == {pc.KIND_SCALE_NOT_POW2}
    f = found[pc.KIND_SCALE_NOT_POW2]
    assert f.count == expected > 0 and f.severity == "violation" and f.unit == "scales"
    first = f.examples[0]
    stored = float(scales[first["row"], first["block"]])
    assert first["value"] == stored
    assert first["qk_uses"] == 2.0 ** math.floor(math.log2(stored))
    assert first["pv_uses"] == stored


def test_scale_kinds_exact() -> None:
    rec = make_records(40)
    set_scale(rec, 2, 1, 3.0)
    set_scale(rec, 3, 0, bits=0x00000008)  # subnormal 2^-146: a power of two, but exponent field 0
    set_scale(rec, 4, 2, 256.0)  # pow2 above the cap
    set_scale(rec, 5, 3, 200.0)  # above the cap and not pow2: both kinds
    set_scale(rec, 6, 0, 0.0)
    set_scale(rec, 6, 1, -2.0)
    set_scale(rec, 7, 0, float("nan"))
    set_scale(rec, 7, 1, float("inf"))
    set_scale(rec, 7, 2, float("-inf"))
    set_scale(rec, 7, 3, -0.0)
    found = by_kind(pc.check_records(rec))
    assert set(found) == {pc.KIND_SCALE_NOT_POW2, pc.KIND_SCALE_ABOVE_CAP, pc.KIND_SCALE_BAD}

    np2 = found[pc.KIND_SCALE_NOT_POW2]
    assert np2.count == 3 and np2.details == {"rows": 3}
    assert [(e["row"], e["block"]) for e in np2.examples] == [(2, 1), (3, 0), (5, 3)]
    e3 = np2.examples[0]
    assert (e3["value"], e3["qk_uses"], e3["pv_uses"], e3["bits"]) == (3.0, 2.0, 3.0, "0x40400000")
    assert "scale 3.0 (bits 0x40400000): QK uses 2^1 = 2.0 (exponent only), PV uses 3.0" in np2.consequence
    sub = np2.examples[1]
    assert sub["qk_uses"] == 2.0**-127 and sub["pv_uses"] == 2.0**-146 and "exponent field 0" in sub["effect"]
    assert sub["byte_offset"] == 3 * RECORD_BYTES + SCALE_OFFSET

    cap = found[pc.KIND_SCALE_ABOVE_CAP]
    assert cap.count == 2
    assert [(e["row"], e["value"], e["qk_uses"], e["pv_uses"]) for e in cap.examples] == [
        (4, 256.0, 256.0, 128.0),
        (5, 200.0, 128.0, 128.0),
    ]

    bad = found[pc.KIND_SCALE_BAD]
    assert bad.count == 6 and bad.details["rows"] == 2
    assert bad.details["by_class"] == {"+inf": 1, "-inf": 1, "nan": 1, "negative": 2, "zero": 1} or bad.details["by_class"] == {
        "+inf": 1,
        "-inf": 1,
        "nan": 1,
        "negative": 1,
        "zero": 2,
    }
    ex = {(e["row"], e["block"]): e for e in bad.examples}
    assert ex[(6, 0)]["qk_uses"] == 2.0**-127 and ex[(6, 0)]["pv_uses"] == 2.0**-149
    assert ex[(6, 1)]["qk_uses"] == 2.0 and ex[(6, 1)]["pv_uses"] == 2.0**-149 and "sign dropped" in ex[(6, 1)]["effect"]
    assert ex[(7, 0)]["qk_uses"] == "nan" and ex[(7, 0)]["pv_uses"] == 128.0 and ex[(7, 0)]["value"] == "nan"
    assert ex[(7, 1)]["value"] == "inf" and "NaN" in ex[(7, 1)]["effect"]
    json.dumps([f.to_dict() for f in found.values()], allow_nan=False)


def test_scale_bits_zero_vs_negative_zero_classes() -> None:
    rec = make_records(4)
    set_scale(rec, 0, 0, 0.0)
    set_scale(rec, 1, 0, -0.0)
    bad = by_kind(pc.check_records(rec))[pc.KIND_SCALE_BAD]
    assert bad.count == 2
    assert sum(bad.details["by_class"].values()) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_nan_codes_exact(device: str) -> None:
    rec = make_records(50)
    rec[8, 5] = 0x7F
    rec[8, 300] = 0xFF
    rec[9, 511] = 0xFF
    rec[30, 0] = 0x7F
    rec[31, 512] = 0x7F  # a scale byte, not a latent code: no NaN code
    rec[32, 640] = 0xFF  # a rope byte: no NaN code
    found = by_kind(pc.check_records(rec.to(device)))
    nan = found[pc.KIND_NAN_CODES]
    assert nan.count == 4 and nan.details == {"rows": 3} and nan.unit == "codes"
    assert [(e["row"], e["position"], e["code"], e["nan_codes_in_row"]) for e in nan.examples] == [
        (8, 5, "0x7f", 2),
        (9, 511, "0xff", 1),
        (30, 0, "0x7f", 1),
    ]
    assert nan.examples[1]["block"] == 3 and nan.examples[0]["byte_offset"] == 8 * RECORD_BYTES + 5


def test_nan_detection_matches_byte_path_on_unaligned_cache() -> None:
    rec = make_records(64)
    g = torch.Generator().manual_seed(3)
    for row, pos in zip(torch.randint(0, 64, (20,), generator=g).tolist(), torch.randint(0, 512, (20,), generator=g).tolist()):
        rec[row, pos] = 0x7F | (0x80 if (row + pos) % 2 else 0)
    rec[3, 100] = 0x7E  # largest finite, not NaN
    rec[4, 100] = 0xFE
    aligned = pc.check_records(rec)
    buf = torch.zeros(64 * RECORD_BYTES + 1, dtype=torch.uint8)
    unaligned = buf[1:].view(64, RECORD_BYTES)
    unaligned.copy_(rec)
    assert unaligned.data_ptr() % 8 != 0
    assert [f.to_dict() for f in pc.check_records(unaligned)] == [f.to_dict() for f in aligned]
    expected = int(((rec[:, :512] & 0x7F) == 0x7F).sum())
    assert by_kind(aligned)[pc.KIND_NAN_CODES].count == expected


def test_paged_cache_examples_carry_cache_index() -> None:
    rec = make_records(24, lead=(3, 8))
    set_scale(rec, 13, 2, 5.0)
    f = by_kind(pc.check_records(rec))[pc.KIND_SCALE_NOT_POW2]
    assert f.examples[0]["row"] == 13 and f.examples[0]["cache_index"] == [1, 5]


def test_selected_rows_only() -> None:
    rec = make_records(40)
    set_scale(rec, 3, 0, 3.0)
    set_scale(rec, 20, 1, 5.0)
    rec[21, 0] = 0x7F
    assert {f.kind: f.count for f in pc.check_records(rec)} == {pc.KIND_SCALE_NOT_POW2: 2, pc.KIND_NAN_CODES: 1}
    sel = pc.check_records(rec, [20, 5, 20, 0])
    assert [(f.kind, f.count, f.scope) for f in sel] == [(pc.KIND_SCALE_NOT_POW2, 1, "selected_rows")]
    assert pc.check_records(rec, torch.tensor([0, 1, 2])) == []
    with pytest.raises(ValueError):
        pc.check_records(rec, [40])


def test_progress_callback() -> None:
    rec = make_records(20)
    calls: list[tuple[int, int]] = []
    pc.check_records(rec, chunk_rows=6, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(0, 20), (6, 20), (12, 20), (18, 20), (20, 20)]


def _violating_cache(n: int = 97) -> torch.Tensor:
    rec = make_records(n, seed=5)
    g = torch.Generator().manual_seed(9)
    rows = torch.randint(0, n, (40,), generator=g).tolist()
    values = [3.0, 1e-41, 512.0, 300.0, -1.0, float("nan"), 0.0, 6.0]
    for i, r in enumerate(rows):
        set_scale(rec, r, i % 4, values[i % len(values)])
    for r in rows[::3]:
        rec[r, (r * 37) % 512] = 0xFF
    return rec


@pytest.mark.parametrize("chunk_rows", [1, 3, 7, 64, 1 << 14])
def test_chunking_gives_identical_findings(chunk_rows: int) -> None:
    rec = _violating_cache()
    reference = [f.to_dict() for f in pc.check_records(rec, chunk_rows=1 << 20)]
    assert len(reference) == 4
    assert [f.to_dict() for f in pc.check_records(rec, chunk_rows=chunk_rows)] == reference
    sel = list(range(0, 97, 2))
    ref_sel = [f.to_dict() for f in pc.check_records(rec, sel, chunk_rows=1 << 20)]
    assert [f.to_dict() for f in pc.check_records(rec, sel, chunk_rows=chunk_rows)] == ref_sel


def test_memory_mapped_numpy_cache(tmp_path) -> None:
    rec = _violating_cache()
    path = tmp_path / "kv.npy"
    np.save(path, rec.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns (once) about the read-only mapping
        mapped = torch.from_numpy(np.load(path, mmap_mode="r"))
    assert [f.to_dict() for f in pc.check_records(mapped, chunk_rows=10)] == [f.to_dict() for f in pc.check_records(rec)]


# --------------------------------------------------------------------------- input checks


def test_check_arrays_and_contract_errors() -> None:
    kv_bad = torch.zeros(4, 655, dtype=torch.uint8)
    found = pc.check_arrays(kv_cache=kv_bad, indices=torch.zeros(3, dtype=torch.int64), indptr=torch.zeros(0, dtype=torch.int32))
    assert [(f.kind, f.examples[0]["array"]) for f in found] == [
        (pc.KIND_BAD_SHAPE, "kv_cache"),
        (pc.KIND_BAD_DTYPE, "indices"),
        (pc.KIND_BAD_SHAPE, "indptr"),
    ]
    assert all(f.scope == "input" and f.severity == "violation" for f in found)
    assert pc.check_arrays(indptr=torch.zeros(3, dtype=torch.int32), n_q=3)[0].kind == pc.KIND_BAD_SHAPE
    assert pc.check_arrays(kv_cache=torch.zeros(2, 656, dtype=torch.float32))[0].kind == pc.KIND_BAD_DTYPE
    with pytest.raises(ContractError, match="uint8"):
        pc.check_records(torch.zeros(2, 656, dtype=torch.int8))
    with pytest.raises(ContractError, match="656"):
        pc.check_records(kv_bad)
    with pytest.raises(ContractError, match="int32"):
        pc.check_index_stream(torch.zeros(3, dtype=torch.int64), i32([0, 3]), 10, has_invalid=False)


# --------------------------------------------------------------------------- index streams


def test_negative_row_length_is_a_notice() -> None:
    found = by_kind(pc.check_index_stream(i32([1, 2, 3]), i32([0, 3, 1, 3, 2]), 10, has_invalid=False))
    assert set(found) == {pc.KIND_NEG_ROW_LEN}
    f = found[pc.KIND_NEG_ROW_LEN]
    assert f.severity == "notice" and f.count == 2
    assert f.examples == [{"query_row": 1, "start": 3, "end": 1, "length": -2}, {"query_row": 3, "start": 3, "end": 2, "length": -1}]
    assert not pc.has_violation([f])


def test_indptr_beyond_stream() -> None:
    # q0 [-2, 2): 2 positions before the stream; q1 [2, 3): fine; q2 [3, 7): 2 past its end;
    # q3 [7, 9) and q4 [9, 12): wholly outside (2 and 3 positions)
    indices = i32([1, 2, 3, 4, 5])
    found = by_kind(pc.check_index_stream(indices, i32([-2, 2, 3, 7, 9, 12]), 10, has_invalid=False))
    f = found[pc.KIND_INDPTR_BEYOND]
    assert f.count == 4 and f.unit == "query rows"
    assert [(e["query_row"], e["positions_outside"]) for e in f.examples] == [(0, 2), (2, 2), (3, 2), (4, 3)]
    assert f.details == {"positions_outside": 9}
    assert pc.KIND_NEG_ROW_LEN not in found
    ok = pc.check_index_stream(indices, i32([0, 5, 5, 0]), 10, has_invalid=False)
    assert [f.kind for f in ok] == [pc.KIND_NEG_ROW_LEN]


def test_index_out_of_range_counts_each_consumption() -> None:
    indices = i32([0, 9, 10, -1, 4, 12, -3, 7])
    # q0 [0, 4): 10 (>= rows) and -1; q1 [4, 8): 12 and -3
    found = by_kind(pc.check_index_stream(indices, i32([0, 4, 8]), 10, has_invalid=False))
    f = found[pc.KIND_INDEX_OOR]
    assert f.count == 4 and f.details == {"positions": 4}
    assert [(e["position"], e["index"], e["reason"]) for e in f.examples] == [
        (2, 10, "index >= kv rows"),
        (3, -1, "negative without has_invalid"),
        (5, 12, "index >= kv rows"),
        (6, -3, "negative without has_invalid"),
    ]
    assert f.examples[0]["byte_offset"] == 10 * RECORD_BYTES and f.examples[1]["byte_offset"] is None
    assert [e["query_row"] for e in f.examples] == [0, 0, 1, 1]
    masked = by_kind(pc.check_index_stream(indices, i32([0, 4, 8]), 10, has_invalid=True))[pc.KIND_INDEX_OOR]
    assert masked.count == 2 and [e["index"] for e in masked.examples] == [10, 12]


def test_overlapping_slices_count_twice() -> None:
    # indptr [0, 4, 2, 6] gives q0 [0,4), q1 [4,2) (negative: empty), q2 [2,6): positions 2, 3 twice
    indices = i32([1, 2, 11, 12, 3, 13])
    found = by_kind(pc.check_index_stream(indices, i32([0, 4, 2, 6]), 10, has_invalid=False))
    f = found[pc.KIND_INDEX_OOR]
    assert f.count == 5 and f.details == {"positions": 3}  # 11, 12 twice; 13 once
    assert found[pc.KIND_NEG_ROW_LEN].count == 1


def test_consumed_rows() -> None:
    indices = i32([5, 3, -1, 5, 20, 7, 8, 2])
    indptr = i32([0, 4, 3, 6])  # q0 [0,4): 5 3 -1 5; q1 [4,3) empty; q2 [3,6): 5 20 7; position 6, 7 unused
    assert pc.consumed_rows(indices, indptr, has_invalid=True).tolist() == [3, 5, 7, 20]
    assert pc.consumed_rows(indices, indptr, has_invalid=True, kv_rows=10).tolist() == [3, 5, 7]
    assert pc.consumed_rows(indices, indptr, has_invalid=False, kv_rows=10).tolist() == [3, 5, 7]
    # a slice reaching past the stream reads index 0 on the gfx950 kernel: row 0 counts as consumed
    assert pc.consumed_rows(indices, i32([6, 10]), has_invalid=False, kv_rows=10).tolist() == [0, 2, 8]


@pytest.mark.parametrize("chunk_entries", [1, 2, 5, 1 << 22])
def test_index_stream_chunking(chunk_entries: int) -> None:
    g = torch.Generator().manual_seed(1)
    indices = torch.randint(-3, 60, (200,), generator=g, dtype=torch.int32)
    indptr = torch.randint(-10, 215, (31,), generator=g, dtype=torch.int32)
    ref = pc.scan_index_stream(indices, indptr, 50, has_invalid=False, chunk_entries=1 << 22)
    got = pc.scan_index_stream(indices, indptr, 50, has_invalid=False, chunk_entries=chunk_entries)
    assert [f.to_dict() for f in got.findings] == [f.to_dict() for f in ref.findings]
    assert torch.equal(got.consumed, ref.consumed) and torch.equal(got.masked_rows, ref.masked_rows)
    assert got.consumed_entries == ref.consumed_entries
    # brute force: per query row and position
    n = indices.numel()
    oor, consumed = 0, set()
    for q in range(indptr.numel() - 1):
        b, e = int(indptr[q]), int(indptr[q + 1])
        for p in range(b, e):
            v = int(indices[p]) if 0 <= p < n else 0
            if not 0 <= p < n:
                consumed.add(0)
            elif v >= 50 or v < 0:
                oor += 1
            else:
                consumed.add(v)
    found = {f.kind: f for f in got.findings}
    assert (found[pc.KIND_INDEX_OOR].count if pc.KIND_INDEX_OOR in found else 0) == oor
    assert got.consumed.tolist() == sorted(consumed)


def _masked_rows_brute(indices: list[int], indptr: list[int], has_invalid: bool) -> list[bool]:
    out = []
    n = len(indices)
    for q in range(len(indptr) - 1):
        b, e = indptr[q], indptr[q + 1]
        length = max(e - b, 0)
        vals = [indices[p] if 0 <= p < n else 0 for p in range(b, b + length)]
        if has_invalid:
            last = max((i + 1 for i, v in enumerate(vals) if v >= 0), default=0)
        else:
            last = length
        tiles = -(-last // 128)
        processed = [vals[p] if p < length else -1 for p in range(tiles * 128)]
        out.append(any(v < 0 for v in processed))
    return out


@pytest.mark.parametrize("has_invalid", [False, True])
def test_masked_rows_match_brute_force(has_invalid: bool) -> None:
    g = torch.Generator().manual_seed(2)
    indices = torch.randint(0, 50, (700,), generator=g, dtype=torch.int32)
    indices[torch.randint(0, 700, (40,), generator=g)] = -1
    indices[256:384] = 7  # a full tile without negatives
    indices[400:430] = -1  # a negative tail
    indptr = [0, 128, 256, 384, 430, 300, 512, 640, 700, -20, 108, 650, 900, 256, 384, 0, 0]
    scan = pc.scan_index_stream(indices, i32(indptr), 50, has_invalid=has_invalid, chunk_entries=97)
    assert scan.masked_rows.tolist() == _masked_rows_brute(indices.tolist(), indptr, has_invalid)


def test_row0_notice() -> None:
    rec = make_records(30)
    q = torch.zeros(3, 1, 576, dtype=torch.bfloat16)
    indices = torch.arange(1, 257, dtype=torch.int32) % 29 + 1
    indptr = i32([0, 128, 200, 256])  # q0 a full tile; q1 72 keys (masked tail); q2 56 keys
    assert pc.check_call(q, rec, indices, indptr, has_invalid=False) == []
    rec[0, 17] = 0xFF  # row 0 is never referenced: legal, but the gfx950 kernel reads it for masked slots
    found = by_kind(pc.check_call(q, rec, indices, indptr, has_invalid=False))
    assert set(found) == {pc.KIND_ROW0_NAN}
    f = found[pc.KIND_ROW0_NAN]
    assert f.severity == "notice" and f.count == 2 and [e["query_row"] for e in f.examples] == [1, 2]
    assert f.details == {"row0_nan_codes": 1}


# --------------------------------------------------------------------------- whole calls


@pytest.mark.parametrize("device", DEVICES)
def test_check_call_consumed_only_vs_whole_cache(device: str) -> None:
    rec = make_records(60)
    set_scale(rec, 10, 0, 3.0)  # consumed
    set_scale(rec, 11, 1, 300.0)  # not consumed
    rec[12, 40] = 0x7F  # consumed
    rec[13, 41] = 0x7F  # not consumed
    set_scale(rec, 14, 3, -4.0)  # consumed
    rec = rec.to(device)
    indices = i32([10, 12, 20, 14, -1, 12]).to(device)
    indptr = i32([0, 3, 3, 6]).to(device)  # q0: 10 12 20; q1: empty; q2: 14 -1 12
    q = torch.zeros(3, 2, 576, dtype=torch.bfloat16, device=device)
    found = by_kind(pc.check_call(q, rec, indices, indptr, has_invalid=True))
    assert {k: (f.count, f.scope) for k, f in found.items()} == {
        pc.KIND_SCALE_NOT_POW2: (1, "consumed_rows"),
        pc.KIND_NAN_CODES: (1, "consumed_rows"),
        pc.KIND_SCALE_BAD: (1, "consumed_rows"),
    }
    whole = by_kind(pc.check_records(rec))
    # 300.0 is above the cap and not a power of two: it counts in both kinds
    assert {k: f.count for k, f in whole.items()} == {
        pc.KIND_SCALE_NOT_POW2: 2,
        pc.KIND_SCALE_ABOVE_CAP: 1,
        pc.KIND_NAN_CODES: 2,
        pc.KIND_SCALE_BAD: 1,
    }
    consumed = pc.consumed_rows(indices, indptr, has_invalid=True, kv_rows=60)
    split_c, split_a = pc.check_records_split(rec, consumed, chunk_rows=7)
    assert [f.to_dict() for f in split_c] == [f.to_dict() for f in pc.check_records(rec, consumed, scope="consumed_rows")]
    assert [f.to_dict() for f in split_a] == [f.to_dict() for f in pc.check_records(rec)]
    # without has_invalid the -1 is itself a violation
    assert pc.KIND_INDEX_OOR in by_kind(pc.check_call(q, rec, indices, indptr, has_invalid=False))


def test_check_call_validates_the_contract() -> None:
    rec = make_records(4)
    with pytest.raises(ContractError):
        pc.check_call(torch.zeros(2, 1, 576, dtype=torch.bfloat16), rec, i32([0]), i32([0, 1]), has_invalid=False)  # indptr length
    with pytest.raises(ContractError):
        pc.check_call(torch.zeros(1, 1, 576, dtype=torch.float32), rec, i32([0]), i32([0, 1]), has_invalid=False)


def test_sort_and_has_violation() -> None:
    notice = pc.Finding(pc.KIND_NEG_ROW_LEN, "notice", 1, "query rows", [], "x", "index_stream")
    viol = pc.Finding(pc.KIND_NAN_CODES, "violation", 1, "codes", [], "y", "all_rows")
    assert pc.sort_findings([notice, viol]) == [viol, notice]
    assert pc.has_violation([notice, viol]) and not pc.has_violation([notice]) and not pc.has_violation([])


# --------------------------------------------------------------------------- a cache over 4 GiB


BIG_ROWS = (4 << 30) // RECORD_BYTES + 4096  # just over 4 GiB


@pytest.fixture(scope="module")
def big_cache() -> torch.Tensor:
    """A >4 GiB CPU cache from torch.empty: untouched pages cost no RAM. Only rows past the 4 GiB
    mark are written, and row 0 (a valid record: torch.empty may hand back reused memory, and the
    gfx950 kernel reads row 0 for masked positions, so NaN codes there would be a real notice)."""
    try:
        kv = torch.empty(BIG_ROWS, RECORD_BYTES, dtype=torch.uint8)
    except RuntimeError as exc:  # pragma: no cover - depends on the machine's overcommit policy
        pytest.skip(f"cannot reserve a >4 GiB tensor: {exc}")
    kv[0] = make_records(1, seed=12)[0]
    return kv


def test_big_cache_consumed_rows_beyond_4gib(big_cache: torch.Tensor) -> None:
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    first = -(-(4 << 30) // RECORD_BYTES)  # first row starting at or past 4 GiB
    rows = torch.arange(first, first + 2000, 7)
    rows = torch.cat([rows, torch.tensor([BIG_ROWS - 1])])
    recs = make_records(rows.numel(), seed=11)
    big_cache[rows] = recs
    r_np2, r_nan, r_cap = int(rows[3]), int(rows[10]), int(rows[-1])
    set_scale(big_cache, r_np2, 2, 6.0)
    big_cache[r_nan, 77] = 0xFF
    set_scale(big_cache, r_cap, 0, 1024.0)
    indices = torch.cat([rows, rows[:50]]).to(torch.int32)
    indptr = i32([0, 100, 200, indices.numel()])
    q = torch.zeros(3, 4, 576, dtype=torch.bfloat16)
    assert big_cache.numel() > 4 << 30 and int(rows[0]) * RECORD_BYTES >= 4 << 30
    found = by_kind(pc.check_call(q, big_cache, indices, indptr, has_invalid=False, chunk_rows=64))
    assert {k: f.count for k, f in found.items()} == {pc.KIND_SCALE_NOT_POW2: 1, pc.KIND_NAN_CODES: 1, pc.KIND_SCALE_ABOVE_CAP: 1}
    assert found[pc.KIND_SCALE_NOT_POW2].examples[0]["row"] == r_np2
    assert found[pc.KIND_SCALE_NOT_POW2].examples[0]["byte_offset"] == r_np2 * RECORD_BYTES + SCALE_OFFSET + 8 > 2**32
    assert found[pc.KIND_NAN_CODES].examples[0]["byte_offset"] == r_nan * RECORD_BYTES + 77
    assert found[pc.KIND_SCALE_ABOVE_CAP].examples[0]["row"] == BIG_ROWS - 1
    bad = i32([0, BIG_ROWS, BIG_ROWS + 5])
    oor = by_kind(pc.check_index_stream(bad, i32([0, 3]), BIG_ROWS, has_invalid=False))[pc.KIND_INDEX_OOR]
    assert oor.count == 2 and oor.examples[0]["byte_offset"] == BIG_ROWS * RECORD_BYTES
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert grown_mib < 1024, f"RSS grew by {grown_mib:.0f} MiB"


@pytest.mark.skipif(not os.environ.get("PRECONDITIONS_BIG_WHOLE"), reason="whole scan of a >4 GiB cache; set PRECONDITIONS_BIG_WHOLE=1")
def test_big_cache_whole_scan(tmp_path) -> None:
    """Whole-cache scan of a >4 GiB memory-mapped sparse file (zeros below 4 GiB: every scale 0)."""
    first = -(-(4 << 30) // RECORD_BYTES)
    path = tmp_path / "big.bin"
    with open(path, "wb") as f:
        f.truncate(BIG_ROWS * RECORD_BYTES)
    mm = np.memmap(path, dtype=np.uint8, mode="r+", shape=(BIG_ROWS, RECORD_BYTES))
    mm[first:] = make_records(BIG_ROWS - first, seed=4).numpy()
    mm.flush()
    kv = torch.from_numpy(mm)
    set_scale(kv, BIG_ROWS - 2, 1, 3.0)
    found = by_kind(pc.check_records(kv))
    assert found[pc.KIND_SCALE_NOT_POW2].count == 1
    assert found[pc.KIND_SCALE_NOT_POW2].examples[0]["row"] == BIG_ROWS - 2
    assert found[pc.KIND_SCALE_BAD].count == 4 * first
    assert found[pc.KIND_SCALE_BAD].details["by_class"] == {"zero": 4 * first}
    del kv, mm
    path.unlink()


def test_f32_overflow_findings() -> None:
    """softmax_scale 1e39 (c_log2 = inf in f32) and q = 2^120 against latent 16384 (q . K beyond
    f32): both reported when check_call gets the softmax scale; nothing for an ordinary call."""
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    p = materialize(Recipe(seed=1, n_q=2, heads=2, row_lengths=(5, 9), cache_rows=100, latent="large"), "cpu")
    assert pc.check_call(p.q, p.kv_cache, p.indices, p.indptr, has_invalid=False, softmax_scale=0.04) == []
    kinds = [f.kind for f in pc.check_call(p.q, p.kv_cache, p.indices, p.indptr, has_invalid=False, softmax_scale=1e39)]
    assert kinds == [pc.KIND_SCALE_OVERFLOW]
    big = torch.full_like(p.q, 2.0**120)
    found = pc.check_call(big, p.kv_cache, p.indices, p.indptr, has_invalid=False, softmax_scale=1e-40)
    assert [f.kind for f in found] == [pc.KIND_SCORE_OVERFLOW]
    assert found[0].count == 4 and found[0].examples[0]["sum_abs_q_times_abs_k"] >= pc.F32_MAX


def test_check_call_reads_only_consumed_entries() -> None:
    """A 0-row cache with every row empty and unconsumed entries in the stream (which may hold
    anything: row 0 of no cache, out of range, negative) is a valid call: check_call reports no
    violation (only the negative row length's notice), with the softmax scale too (it used to
    raise IndexError)."""
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    p = materialize(Recipe(seed=1, n_q=2, heads=1, row_lengths=(0, -1), stream_offset=2, cache_rows=0, stream_tail=5), "cpu")
    assert p.kv_cache.shape[0] == 0 and p.indices.numel() > 0
    for indices in (p.indices, torch.full_like(p.indices, 2**31 - 1), torch.full_like(p.indices, -7)):
        for has_invalid in (False, True):
            found = pc.check_call(p.q, p.kv_cache, indices, p.indptr, has_invalid=has_invalid, softmax_scale=0.04)
            assert [f.kind for f in found] == [pc.KIND_NEG_ROW_LEN]
    # garbage around the consumed slice of a real cache is no violation either
    g = materialize(Recipe(seed=2, n_q=1, heads=1, row_lengths=(3,), stream_offset=2, cache_rows=8, stream_tail=2), "cpu")
    garbage = g.indices.clone()
    garbage[:2], garbage[-2:] = torch.tensor([-(2**31), 8], dtype=torch.int32), torch.tensor([2**31 - 1, -1], dtype=torch.int32)
    assert pc.check_call(g.q, g.kv_cache, garbage, g.indptr, has_invalid=False, softmax_scale=0.04) == []
