"""The whole fp8_ds_mla cache dequantised to bf16 once and kept while the caller passes it again:
what a serving engine holds for a kernel that takes bf16 KV (FlashMLA's sparse prefill, SDPA).

`DequantCache.get(kv_cache, slots)` returns bf16 [rows + 1, 576]: row r is
kernel.peers.keys.dequantise_bf16 of record r (the same bits the per-slot gather gives
that record), row `rows` is all +0 (where an empty slot can point: the same +0 keys the per-slot
gather writes for it). It is built on a call when the cache has no more rows than the call has
key slots (building it costs no more than the per-slot gather), or on the second call in a row
with the same unchanged cache (a cache passed twice is a serving engine's cache: the next call
gathers nothing); otherwise get returns None and the caller gathers per slot.

A hit needs the very tensor object (held by a weak reference: its memory cannot have been
reused while the reference lives), the same data pointer and size, and torch's version counter
unchanged (every in-place write through the tensor or a view of it bumps it). A write that
bypasses torch's ops on the tensor (a raw device pointer) is not seen: the contract forbids a
kernel to write its inputs, and the suite checks every call for it. Inference-mode tensors have
no version counter: they are never cached. One cache is kept; its bf16 copy is dropped when the
source tensor is freed. Caches whose bf16 copy would pass `max_bytes` are never built.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from kernel.peers.keys import dequantise_bf16
from kernel.record import HEAD_DIM, RECORD_BYTES

DEFAULT_MAX_BYTES = 4 << 30  # bf16 copy kept at most (a 3.7M-record cache)
BUILD_CHUNK_ROWS = 1 << 18  # records dequantised per pass while building (bounds the temporaries)


Dequantise = Callable[[torch.Tensor], torch.Tensor]  # records uint8 [n, 656] contiguous -> bf16 [n, 576]


def dequantise_whole(kv_cache: torch.Tensor, chunk_rows: int = BUILD_CHUNK_ROWS, dequantise: Dequantise = dequantise_bf16) -> torch.Tensor:
    """bf16 [rows + 1, 576]: `dequantise` (default dequantise_bf16, the project's reader; an
    engine's own reader otherwise) of every record of the flat cache, in passes of chunk_rows
    records, then a +0 row."""
    flat = kv_cache.reshape(-1, RECORD_BYTES)
    rows = flat.shape[0]
    out = torch.empty(rows + 1, HEAD_DIM, dtype=torch.bfloat16, device=kv_cache.device)
    out[rows] = 0
    for begin in range(0, rows, chunk_rows):
        end = min(rows, begin + chunk_rows)
        out[begin:end] = dequantise(flat[begin:end])
    return out


def _version(t: torch.Tensor) -> int | None:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors track no version
        return None


class DequantCache:
    """One kept dequantised cache (module docstring), built by `dequantise` (default the
    project's reader, dequantise_bf16; an engine's own reader for a kernel that reads through it)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, dequantise: Dequantise = dequantise_bf16) -> None:
        self.max_bytes = max_bytes
        self.dequantise = dequantise
        self._ref: weakref.ref[torch.Tensor] | None = None
        self._key: tuple[Any, ...] | None = None
        self._bf16: torch.Tensor | None = None
        self._seen: tuple[weakref.ref[torch.Tensor], tuple[Any, ...]] | None = None
        self.builds = 0  # how many times a cache was dequantised whole (for tests and benches)

    @staticmethod
    def _key_of(kv_cache: torch.Tensor) -> tuple[Any, ...] | None:
        version = _version(kv_cache)
        if version is None:
            return None
        return (kv_cache.data_ptr(), kv_cache.numel(), kv_cache.device, version)

    def _drop(self) -> None:
        self._ref, self._key, self._bf16 = None, None, None

    def _source_freed(self, ref: weakref.ref[torch.Tensor]) -> None:
        if ref is self._ref:  # the kept copy's source is gone: free the copy
            self._drop()

    def get(self, kv_cache: torch.Tensor, slots: int) -> torch.Tensor | None:
        """The kept bf16 [rows + 1, 576] of `kv_cache`, built now when the module docstring's
        rule says so, else None (gather per slot). slots: the key slots of this call."""
        key = self._key_of(kv_cache)
        if key is None:
            return None
        if self._ref is not None and self._ref() is kv_cache and self._key == key:
            return self._bf16
        rows = kv_cache.numel() // RECORD_BYTES
        if (rows + 1) * HEAD_DIM * 2 > self.max_bytes:
            return None
        seen_twice = self._seen is not None and self._seen[0]() is kv_cache and self._seen[1] == key
        if rows > slots and not seen_twice:
            self._seen = (weakref.ref(kv_cache), key)
            return None
        self._drop()
        self._bf16 = dequantise_whole(kv_cache, dequantise=self.dequantise)
        self._ref, self._key, self._seen = weakref.ref(kv_cache, self._source_freed), key, None
        self.builds += 1
        return self._bf16


__all__ = ["BUILD_CHUNK_ROWS", "DEFAULT_MAX_BYTES", "DequantCache", "Dequantise", "dequantise_whole"]
