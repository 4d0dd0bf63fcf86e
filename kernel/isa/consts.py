"""Constant lane arrays for the interpreter's hot paths.

numpy applies a binary ufunc to two arrays of the same shape several times faster than to an
array and a scalar (or to arrays it must broadcast), so the semantics use `K(value, dtype,
shape)`: a cached, read-only array of `shape` filled with `value`, made once per distinct key.
"""

from __future__ import annotations

import numpy as np

_CACHE: dict[tuple, np.ndarray] = {}
_MAX = 1 << 16  # distinct constants kept (beyond that K still works, uncached)


def K(value: int | float, dtype: type = np.uint32, shape: int | tuple[int, ...] = 64) -> np.ndarray:
    """A read-only array of `shape` (default one lane vector) holding `value` as `dtype`."""
    key = (value, dtype, shape)
    a = _CACHE.get(key)
    if a is None:
        a = np.full(shape, value, dtype=dtype)
        a.setflags(write=False)
        if len(_CACHE) < _MAX:
            _CACHE[key] = a
    return a
