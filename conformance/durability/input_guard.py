"""Did the kernel write into its inputs? A snapshot before the call, a comparison after it.

q, indices and indptr are small: they are copied whole and compared byte for byte. The KV cache
can exceed 4 GiB, so it is summarised instead: one 64-bit checksum per 656-byte record (the
record's 164 int32 words, each multiplied by a fixed odd weight, summed with int64 wrap-around),
computed in chunks of records on the cache's own device. Any write that changes a record changes
its checksum except with negligible probability (a change must cancel modulo 2^64 against fixed
pseudo-random weights), and the changed records are named by index. Memory: 8 bytes per record
plus one chunk of int64 words.

Every record is checked on a GPU and for caches up to FULL_CHECK_BYTES on the CPU (about 1.1 s
per GiB there, twice per call). A larger CPU cache is sampled: the records the call's index
stream references (where the kernel reads, and most likely writes), the first and last
EDGE_RECORDS records, and SAMPLED_RECORDS records at fixed pseudo-random places.

`snapshot(q, kv_cache, indices, indptr)` -> `InputSnapshot`; `InputSnapshot.changes(...)` -> one
message per modified input ("the kernel wrote into kv_cache at rows [...]", ...), empty when
nothing changed. Comparisons are of bytes, so NaN-poisoned records compare equal to themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel.record import RECORD_BYTES

CHUNK_RECORDS = 1 << 16
FULL_CHECK_BYTES = 1 << 30
EDGE_RECORDS = 4096
SAMPLED_RECORDS = 1 << 16
SHOWN = 8
_WORDS = RECORD_BYTES // 4


def _weights(device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0x5EED)
    odd = torch.randint(0, 1 << 62, (_WORDS,), generator=generator, dtype=torch.int64) * 2 + 1
    return odd.to(device)


def record_checksums(kv_cache: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """int64 [n]: the checksum of each 656-byte record of a uint8 [records, 656] cache (of the
    records numbered by int64 `rows` when given, else of every record). Any leading shape
    ([blocks, block_size, 656] included) is read as flat records."""
    kv_cache = kv_cache.reshape(-1, RECORD_BYTES)
    count = kv_cache.shape[0] if rows is None else rows.numel()
    weights = _weights(kv_cache.device)
    sums = torch.empty(count, dtype=torch.int64, device=kv_cache.device)
    for start in range(0, count, CHUNK_RECORDS):
        part = kv_cache[start : start + CHUNK_RECORDS] if rows is None else kv_cache[rows[start : start + CHUNK_RECORDS]]
        words = part.contiguous().view(torch.int32).to(torch.int64)
        sums[start : start + words.shape[0]] = (words * weights).sum(dim=1)
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
    return t.detach().contiguous().clone().view(torch.uint8).reshape(-1)


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
        found: list[str] = []
        kv_now = record_checksums(kv_cache, self.kv_rows)
        rows = torch.nonzero(kv_now != self.kv_checksums).flatten()
        if self.kv_rows is not None:
            rows = self.kv_rows[rows.cpu()]
        if rows.numel():
            found.append(f"the kernel wrote into kv_cache at rows {_listed(rows)} ({rows.numel()} records changed)")
        q_now = _bytes(q)
        if not torch.equal(q_now, self.q):
            elements = torch.nonzero((q_now != self.q).view(-1, q.element_size()).any(dim=1)).flatten()
            heads, dim = q.shape[1], q.shape[2]
            where = [(int(e) // (heads * dim), int(e) // dim % heads, int(e) % dim) for e in elements[:SHOWN]]
            found.append(f"the kernel wrote into q at (row, head, dim) {where} ({elements.numel()} elements changed)")
        for name, before, now in (("indices", self.indices, indices), ("indptr", self.indptr, indptr)):
            after = _bytes(now)
            if not torch.equal(after, before):
                positions = torch.nonzero((after != before).view(-1, now.element_size()).any(dim=1)).flatten()
                found.append(f"the kernel wrote into {name} at positions {_listed(positions)} ({positions.numel()} entries changed)")
        return found


def snapshot(q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor) -> InputSnapshot:
    """Copy q, indices and indptr and checksum every record of kv_cache (see module docstring)."""
    rows = checked_rows(kv_cache, indices)
    return InputSnapshot(
        q=_bytes(q), indices=_bytes(indices), indptr=_bytes(indptr), kv_checksums=record_checksums(kv_cache, rows), kv_rows=rows
    )
