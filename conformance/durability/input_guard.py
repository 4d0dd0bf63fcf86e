"""Did the kernel write into its inputs? A snapshot before the call, a comparison after it.

q, indices and indptr are small: they are copied whole and compared bit for bit (each element read
as an integer of its size; after the call, where they are, without a copy). The KV cache can exceed
4 GiB, so it is summarised instead: one 64-bit checksum per 656-byte record (the record's 82 int64
words, each multiplied by a fixed odd weight, summed with int64 wrap-around), computed in chunks of
records on the cache's own device. A write that changes one word always changes its record's
checksum (an odd weight is invertible modulo 2^64); one that changes several does except with
negligible probability (the changes must cancel against fixed pseudo-random weights); the changed
records are named by index. Memory: 8 bytes per record plus one chunk of int64 words (chunks of
CPU_CHUNK_RECORDS on the CPU, small enough to stay in the caches: about 0.25 s per GiB there, twice
per call).

Every record is checked on a GPU and for caches up to FULL_CHECK_BYTES on the CPU. A larger CPU
cache is sampled: the records the call's index stream references (where the kernel reads, and
most likely writes), the first and last EDGE_RECORDS records, and SAMPLED_RECORDS records at
fixed pseudo-random places.

`snapshot(q, kv_cache, indices, indptr)` -> `InputSnapshot`; `InputSnapshot.changes(...)` -> one
message per modified input ("the kernel wrote into kv_cache at rows [...]", ...), empty when
nothing changed. Comparisons are of bytes, so NaN-poisoned records compare equal to themselves.
The check after the call reads the device once (whether each input changed); where changes are
named is read only when there are some.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kernel.record import RECORD_BYTES

CHUNK_RECORDS = 1 << 16
CPU_CHUNK_RECORDS = 2048  # 1.3 MiB of words: the product stays in the CPU's caches
FULL_CHECK_BYTES = 1 << 30
EDGE_RECORDS = 4096
SAMPLED_RECORDS = 1 << 16
SHOWN = 8
_WORDS = RECORD_BYTES // 8


@functools.cache
def _weights(device: torch.device) -> torch.Tensor:
    """The checksum's odd int64 weights [82] on `device` (made once per device; read only)."""
    generator = torch.Generator().manual_seed(0x5EED)
    odd = torch.randint(0, 1 << 62, (_WORDS,), generator=generator, dtype=torch.int64) * 2 + 1
    return odd.to(device)


def _words(part: torch.Tensor) -> torch.Tensor:
    """int64 [n, 82]: the words of uint8 [n, 656] records (a view when contiguous and 8-byte aligned)."""
    if not (part.is_contiguous() and part.data_ptr() % 8 == 0):
        part = part.clone(memory_format=torch.contiguous_format)
    return part.view(torch.int64)


def record_checksums(kv_cache: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """int64 [n]: the checksum of each 656-byte record of a uint8 [records, 656] cache (of the
    records numbered by int64 `rows` when given, else of every record). Any leading shape
    ([blocks, block_size, 656] included) is read as flat records."""
    kv_cache = kv_cache.reshape(-1, RECORD_BYTES)
    count = kv_cache.shape[0] if rows is None else rows.numel()
    device = kv_cache.device
    weights = _weights(device)
    chunk = CPU_CHUNK_RECORDS if device.type == "cpu" else CHUNK_RECORDS
    sums = torch.empty(count, dtype=torch.int64, device=device)
    products = torch.empty((min(chunk, count), _WORDS), dtype=torch.int64, device=device)
    for start in range(0, count, chunk):
        part = kv_cache[start : start + chunk] if rows is None else kv_cache[rows[start : start + chunk]]
        words = _words(part)
        n = words.shape[0]
        torch.mul(words, weights, out=products[:n])
        torch.sum(products[:n], dim=1, out=sums[start : start + n])
    return sums


def checked_rows(kv_cache: torch.Tensor, indices: torch.Tensor) -> torch.Tensor | None:
    """The records to check (int64, sorted, unique), or None for every record (see module docstring)."""
    records = kv_cache.numel() // RECORD_BYTES
    if kv_cache.device.type != "cpu" or kv_cache.numel() <= FULL_CHECK_BYTES:
        return None
    referenced = indices.to(torch.int64).flatten()
    referenced = referenced[(referenced >= 0) & (referenced < records)]
    generator = torch.Generator().manual_seed(0xC0FFEE)
    sampled = torch.randint(0, records, (SAMPLED_RECORDS,), generator=generator, dtype=torch.int64)
    edges = torch.cat((torch.arange(min(EDGE_RECORDS, records)), torch.arange(max(records - EDGE_RECORDS, 0), records)))
    return torch.unique(torch.cat((referenced.cpu(), sampled, edges)))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 copy of a tensor's elements (its logical elements, strides ignored)."""
    return t.detach().clone(memory_format=torch.contiguous_format).view(torch.uint8).reshape(-1)


_SAME_SIZE_INTEGER = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_integers(t: torch.Tensor) -> torch.Tensor:
    """t's elements read as integers of their size (a view of any strides, no copy: equal bits
    compare equal, NaN included); a flat uint8 copy (_bytes) for other element sizes."""
    integer = _SAME_SIZE_INTEGER.get(t.element_size())
    return _bytes(t) if integer is None else t.detach().view(integer)


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of `t` read as integers (_as_integers): what the call is checked against."""
    return _as_integers(t).clone(memory_format=torch.contiguous_format)


def _listed(positions: torch.Tensor) -> str:
    shown = [int(x) for x in positions[:SHOWN].tolist()]
    more = f" and {positions.numel() - SHOWN} more" if positions.numel() > SHOWN else ""
    return f"{shown}{more}"


@dataclass(frozen=True)
class InputSnapshot:
    """What the inputs held before the call (see module docstring)."""

    q: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    kv_checksums: torch.Tensor
    kv_rows: torch.Tensor | None

    def changes(self, q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor) -> list[str]:
        """One message per input the kernel modified (empty list when none)."""
        kv_now = record_checksums(kv_cache, self.kv_rows)
        # the inputs compared where they are (no copy), element by element as integers
        now = map(_as_integers, (q, indices, indptr))
        pairs = ((kv_now, self.kv_checksums), *zip(now, (self.q, self.indices, self.indptr), strict=True))
        if all(a.shape == b.shape for a, b in pairs):
            changed = torch.stack([torch.ne(a, b).any() for a, b in pairs]).tolist()  # the one host read
        else:  # a kernel that resized an input (in place) changed it
            changed = [a.shape != b.shape or not torch.equal(a, b) for a, b in pairs]
        if not any(changed):
            return []
        found: list[str] = []
        if changed[0]:
            rows = torch.nonzero(kv_now != self.kv_checksums).flatten()
            if self.kv_rows is not None:
                rows = self.kv_rows[rows.cpu()]
            found.append(f"the kernel wrote into kv_cache at rows {_listed(rows)} ({rows.numel()} records changed)")
        if changed[1]:
            elements = _changed_elements(_bytes(q), _bytes(self.q), q.element_size())
            heads, dim = q.shape[1], q.shape[2]
            where = [(int(e) // (heads * dim), int(e) // dim % heads, int(e) % dim) for e in elements[:SHOWN]]
            found.append(f"the kernel wrote into q at (row, head, dim) {where} ({elements.numel()} elements changed)")
        for name, before, tensor, differs in (("indices", self.indices, indices, changed[2]), ("indptr", self.indptr, indptr, changed[3])):
            if differs:
                positions = _changed_elements(_bytes(tensor), _bytes(before), tensor.element_size())
                found.append(f"the kernel wrote into {name} at positions {_listed(positions)} ({positions.numel()} entries changed)")
        return found


def _changed_elements(after: torch.Tensor, before: torch.Tensor, element_size: int) -> torch.Tensor:
    """Positions of the elements whose bytes differ (flat uint8 copies of element_size bytes each;
    every element of a copy of another size counts as changed)."""
    if after.shape != before.shape:
        return torch.arange(after.numel() // element_size)
    return torch.nonzero((after != before).view(-1, element_size).any(dim=1)).flatten()


def snapshot(q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor) -> InputSnapshot:
    """Copy q, indices and indptr and checksum every record of kv_cache (see module docstring)."""
    rows = checked_rows(kv_cache, indices)
    return InputSnapshot(
        q=_copy(q), indices=_copy(indices), indptr=_copy(indptr), kv_checksums=record_checksums(kv_cache, rows), kv_rows=rows
    )
