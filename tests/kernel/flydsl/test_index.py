"""The FlyDSL kernel's index reading agrees with the emulated kernel (no GPU, no flydsl).

The kernel's index semantics are written once in kernel/flydsl/gfx950.py (row_skew,
index_offset, slot_of, scan_start, scan_candidate) and used by the kernel on IR values; here
they run on Python ints, with the buffer descriptor modelled as the kernel builds it (base =
the row start clamped into the index buffer, size = the rest of the buffer, out-of-range reads
return 0), and must give kernel/emulated/gfx950.py's tile counts and per-tile (slot, masked)
for every row, including rows whose indptr start is negative or past the buffer (a
kernel reading indices[p] at position p of a row starting before the buffer, where emulated
reads 0, i.e. KV row 0, fails).
"""

from __future__ import annotations

import random

import pytest
import torch

from kernel.emulated import gfx950 as em
from kernel.flydsl import layout as K


def _descriptor(indices: list[int], beg: int) -> tuple[int, int]:
    """(base entry, entries readable) of the row's descriptor, as load_slots builds it."""
    n = len(indices)
    base = min(max(beg, 0), n)
    return base, n - base


def _read(indices: list[int], base: int, size: int, q: int) -> int:
    """A raw buffer load of descriptor entry q >= 0 (0 when out of range)."""
    assert q >= 0
    return indices[base + q] if q < size else 0


def kernel_row(indices: list[int], beg: int, end: int, has_invalid: bool) -> tuple[int, list[tuple[list[int], list[bool]]]]:
    """(tile count, per tile (slots, masked)) of one row under the kernel's index semantics."""
    length = max(end - beg, 0)
    skew = K.row_skew(beg)
    base, size = _descriptor(indices, beg)
    if not has_invalid:
        last = length
    else:
        n_in, first = K.scan_start(length, skew)
        steps = -(-n_in // 4096)
        last = first
        for q in range(steps * 4096):  # the scan covers whole 4096-entry steps
            last = max(last, K.scan_candidate(q, n_in, skew, _read(indices, base, size, q)))
    nt = -(-last // K.TILE)
    tiles = []
    for t in range(nt):
        slots, masked = [], []
        for p in range(t * K.TILE, (t + 1) * K.TILE):
            word = K.slot_of(p, _read(indices, base, size, K.index_offset(p, skew)), length, skew)
            masked.append(word < 0)
            slots.append(max(word, 0))
        tiles.append((slots, masked))
    return nt, tiles


def _check(indices: list[int], indptr: list[int], has_invalid: bool) -> None:
    idx = torch.tensor(indices, dtype=torch.int32)
    ptr = torch.tensor(indptr, dtype=torch.int32)
    r_beg, r_len = em.load_row_ranges(ptr)
    n_tiles = em.tile_count(idx, r_beg, r_len, has_invalid)
    for q in range(len(indptr) - 1):
        nt, tiles = kernel_row(indices, indptr[q], indptr[q + 1], has_invalid)
        assert nt == int(n_tiles[q]), (q, indptr[q], indptr[q + 1], nt, int(n_tiles[q]))
        for t, (slots, masked) in enumerate(tiles):
            e_slots, e_masked = em.load_slots(idx, r_beg[q : q + 1], r_len[q : q + 1], t)
            assert masked == e_masked[0].tolist(), (q, t)
            assert slots == e_slots[0].tolist(), (q, t)


def test_negative_indptr_start_reads_row_zero_like_emulated():
    indices = [7, 8, 9, -1, 11, 12] + list(range(100, 300))
    # row 0 starts 5 entries before the buffer: positions 0..4 read 0 (KV row 0, valid), then
    # indices[0..]; the old kernel read indices[0..4] there
    indptr = [-5, 3, 3]
    nt, tiles = kernel_row(indices, -5, 3, has_invalid=False)
    assert nt == 1 and tiles[0][0][:8] == [0, 0, 0, 0, 0, 7, 8, 9] and not any(tiles[0][1][:8])
    for hi in (False, True):
        _check(indices, indptr, hi)


@pytest.mark.parametrize("has_invalid", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_random_rows_match_emulated(seed, has_invalid):
    rng = random.Random(seed)
    n = rng.choice([0, 1, 5, 130, 300])
    indices = [rng.choice([-1, rng.randrange(0, 50)]) if rng.random() < 0.3 else rng.randrange(0, 50) for _ in range(n)]
    if rng.random() < 0.5 and n:
        indices[-1] = -1  # a trailing invalid entry
    indptr = [rng.randrange(-400, n + 200) for _ in range(7)]
    indptr += [indptr[-1] + rng.randrange(-3, 300)]  # any starts and ends: negative lengths count as empty
    _check(indices, indptr, has_invalid)


def test_scan_helpers_on_the_plain_row():
    # without a skew the scan is the old one: one past the last entry >= 0 below len
    n_in, first = K.scan_start(10, 0)
    assert (n_in, first) == (10, 0)
    assert K.scan_candidate(3, 10, 0, 5) == 4 and K.scan_candidate(3, 10, 0, -1) == 0 and K.scan_candidate(10, 10, 0, 5) == 0
    # a row starting 4 before the buffer: positions 0..3 valid, descriptor entry q is position q + 4
    assert K.scan_start(10, -4) == (6, 4)
    assert K.scan_candidate(0, 6, -4, 5) == 5
