"""A kernel for the packed-call tests (tests/conformance/campaign/test_packed_calls.py):
`wrong_from_five_rows` computes the contract in float64 (profile "exact") and, in a call of five
query rows or more, dequantises every key with the wrong block's scale (a bug that shows only
above some batch size, as a split count chosen from the batch size would)."""

from __future__ import annotations

from typing import Any

from tests.conformance.judging.kind_kernels import reference, wrong_block_scale

ROWS_THAT_BREAK = 5


def wrong_from_five_rows(q: Any, kv_cache: Any, indices: Any, indptr: Any, softmax_scale: float, **kw: Any) -> Any:
    kernel = wrong_block_scale if q.shape[0] >= ROWS_THAT_BREAK else reference
    return kernel(q, kv_cache, indices, indptr, softmax_scale, **kw)


wrong_from_five_rows.profile = "exact"  # type: ignore[attr-defined]
