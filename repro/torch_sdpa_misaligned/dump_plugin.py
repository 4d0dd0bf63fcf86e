"""pytest plugin (PYTEST_PLUGINS=dump_plugin, this folder on PYTHONPATH): log every tensor the
torch-sdpa adapter hands to the fused SDPA op, before the op runs.

Each call appends one JSON line to $SDPA_DUMP (default sdpa-calls.jsonl): for q, key, value and
bias, the dtype, shape, strides, storage offset (elements), data_ptr % 16 and whether the tensor
is contiguous; the line is flushed and fsynced first, so a call that kills the process (a CUDA
fault) is the last line of the file; repro.py --from-dump replays its layouts. The adapter itself is
unchanged (kernel.peers.torch_sdpa._attention is wrapped).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

import kernel.peers.torch_sdpa as sdpa
from kernel.record import LATENT_DIM

_original = sdpa._attention
_calls = [0]


def describe(t: torch.Tensor) -> dict[str, Any]:
    """Layout facts of one tensor (no device data read)."""
    return {
        "dtype": str(t.dtype).replace("torch.", ""),
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "storage_offset": t.storage_offset(),
        "ptr_mod16": t.data_ptr() % 16,
        "contiguous": t.is_contiguous(),
    }


def _logged(q4: torch.Tensor, keys: torch.Tensor, bias: torch.Tensor, scale: float) -> Any:
    _calls[0] += 1
    line = {
        "call": _calls[0],
        "pid": os.getpid(),
        "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
        "device": str(q4.device),
        "scale": scale,
        "q": describe(q4),
        "key": describe(keys),
        "value": describe(keys[..., :LATENT_DIM]),
        "bias": describe(bias),
    }
    path = os.environ.get("SDPA_DUMP", "sdpa-calls.jsonl")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return _original(q4, keys, bias, scale)


sdpa._attention = _logged
