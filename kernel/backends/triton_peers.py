"""What the adapters to sglang's and vLLM's Triton MLA kernels share: importing the kernel files
from the engines' packages, the CUDA check, and the bf16 key buffer with its slot table.

Importing (no numerics touched; see load_sglang / load_vllm):
- sglang (wheel `sglang==0.5.10.post1`, installed with --no-deps): a plain import of
  `sglang.srt.layers.attention.*` runs `sglang/__init__.py` (the frontend language: pydantic,
  pybase64) and the kernel file's `from sglang.srt.utils import is_hip` runs
  `sglang/srt/utils/common.py` (orjson, pybase64, starlette, ...). Where that import fails the
  package is registered by its path without its __init__ and `sglang.srt.utils` is a module
  holding only `is_hip()` = `torch.version.hip is not None` (sglang's own definition); the kernel
  files are sglang's, unchanged.
- vLLM (0.33.0, Python files only: its compiled libraries are built for torch 2.14): the kernel
  modules import `vllm.platforms` (current_platform), whose CUDA platform imports the compiled
  `vllm._C_stable_libtorch`. Where that import fails, an empty module stands in for it: the
  Triton kernels call none of its ops. The kernel files take `triton` and `tl` from
  `vllm.triton_utils`, which hands out placeholder modules when vLLM's own import check disabled
  Triton (`HAS_TRITON` False: `triton.backends` not importable, or not exactly one active
  driver); a kernel on placeholders fails every launch (`module 'triton' has no attribute
  'next_power_of_2'`, `'function' object is not subscriptable`), so load_vllm refuses it with
  that cause (vllm_triton_reason) instead.
- sglang 0.5.10's kernel files import `triton` directly: it has no such switch.

Keys (slot_keys): the kernels address a bf16 buffer of keys through a slot table. Kept: the
whole cache dequantised once and kept while the same cache tensor comes back unchanged
(kernel.backends.dequant_cache, with the engine's own reader where it has one), addressed by the
rows' own cache rows, as a serving engine's bf16 cache is. Per slot (the cache not kept, or too
large for the kernels' int32 offsets): each row's slots gathered from the records and
dequantised to bf16 [n_q * W, 576] (W: the padded row width), as the engines' own gather /
upconvert steps do before their bf16 kernels (sglang's dequantize_k_cache_paged, vLLM's
cp_gather_and_upconvert_fp8_kv_cache). Either way an attended slot reads the same bf16 key.
A slot's key is valid when its entry is >= 0 and < the cache's rows; other slots point at a
+0 key and are never attended.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any, TypeVar

import torch

from kernel.backend import Backend, BackendUnavailable
from kernel.backends.dequant_cache import DequantCache
from kernel.backends.flashmla import LayoutCache, csr_to_padded, sync_free_width
from kernel.backends.gathered import dequantise_bf16
from kernel.contract import INT32_MAX, CallInfo
from kernel.record import HEAD_DIM, RECORD_BYTES

SGLANG_WHEEL = "sglang==0.5.10.post1"
VLLM_FILES = "vLLM 0.33.0's Python files (the wheel without its compiled libraries) on PYTHONPATH"
VLLM_OPS = "vllm._C_stable_libtorch"  # the compiled ops library vllm.platforms.cuda imports
VLLM_TRITON_UTILS = "vllm.triton_utils"  # where vLLM's kernel files take `triton` and `tl` from
ROUTE_ATTR = "_conformance_import_route"  # marks the modules this file put in sys.modules
LAYOUTS_KEPT = 8  # index layouts a backend keeps (two entries per index tensors: slots, kernel indices)
T = TypeVar("T")


def cuda_reason(name: str) -> str:
    """Why `name` (a Triton kernel for NVIDIA GPUs) cannot run here; "" when it can."""
    if getattr(torch.version, "hip", None):
        return f"{name}: adapted and profiled for NVIDIA GPUs only; this torch is built for ROCm ({torch.__version__})"
    if not torch.cuda.is_available():
        return f"{name}: no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})"
    if importlib.util.find_spec("triton") is None:
        return f"{name}: Triton is not installed"
    return ""


def peer_backend(
    name: str,
    fn: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
    *,
    profile: str,
    limits: dict[str, int],
    bounded_index_reads: bool,
    batch_invariant: bool,
) -> Backend:
    """The Backend of one of these Triton peers: CUDA only, 1-16 heads of any count, `out=`
    accepted; the declarations that differ between the peers are the arguments. The caller has
    checked `cuda_reason(name)` and loaded the kernel modules into `fn` already."""

    def support(info: CallInfo) -> str:
        return cuda_reason(name) if info.device.type == "cuda" else ""

    return Backend(
        name=name,
        fn=fn,
        profile=profile,
        devices=("cuda",),
        max_heads=16,
        head_counts=None,
        accepts_out=True,
        bounded_index_reads=bounded_index_reads,
        batch_invariant=batch_invariant,
        extra_support=support,
        limits=limits,
    )


def load_sglang(module: str, name: str) -> tuple[ModuleType, str]:
    """(sglang's module `module`, the import route taken); BackendUnavailable naming `name` when
    sglang is missing or the file fails to import by either route (module docstring)."""
    if module in sys.modules:
        return sys.modules[module], getattr(sys.modules["sglang"], ROUTE_ATTR, "plain import")
    if "sglang" not in sys.modules and importlib.util.find_spec("sglang") is None:
        raise BackendUnavailable(f"{name}: sglang is not installed ({SGLANG_WHEEL}, --no-deps)")
    if not getattr(sys.modules.get("sglang"), ROUTE_ATTR, ""):
        try:
            return importlib.import_module(module), "plain import"
        except Exception as err:  # noqa: BLE001 - any failure of the engine's import chain
            first = f"{type(err).__name__}: {err}"
        spec = importlib.util.find_spec("sglang")
        assert spec is not None and spec.submodule_search_locations is not None
        for key in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[key]
        package = types.ModuleType("sglang")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__spec__ = spec
        setattr(package, ROUTE_ATTR, f"by path, sglang.srt.utils = is_hip only (plain import: {first[:200]})")
        utils = types.ModuleType("sglang.srt.utils")
        utils.is_hip = lambda: torch.version.hip is not None  # type: ignore[attr-defined]
        sys.modules["sglang"] = package
        sys.modules["sglang.srt.utils"] = utils
    try:
        return importlib.import_module(module), getattr(sys.modules["sglang"], ROUTE_ATTR)
    except Exception as err:  # noqa: BLE001
        raise BackendUnavailable(f"{name}: cannot import {module} by path ({type(err).__name__}: {err})") from err


def load_vllm(module: str, name: str) -> tuple[ModuleType, str]:
    """(vLLM's module `module`, the import route taken); BackendUnavailable naming `name` when
    vLLM's files are missing, the module fails to import by either route, or vLLM disabled
    Triton in this process (vllm_triton_reason; module docstring)."""
    loaded, route = _import_vllm(module, name)
    reason = vllm_triton_reason(name, loaded)
    if reason:
        raise BackendUnavailable(reason)
    return loaded, route


def _import_vllm(module: str, name: str) -> tuple[ModuleType, str]:
    if module in sys.modules:
        stub = sys.modules.get(VLLM_OPS)
        return sys.modules[module], "empty " + VLLM_OPS if getattr(stub, ROUTE_ATTR, False) else "plain import"
    if "vllm" not in sys.modules and importlib.util.find_spec("vllm") is None:
        raise BackendUnavailable(f"{name}: vllm is not importable (needs {VLLM_FILES})")
    try:
        return importlib.import_module(module), "plain import"
    except Exception as err:  # noqa: BLE001
        first = f"{type(err).__name__}: {err}"
    for key in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[key]
    stub = types.ModuleType(VLLM_OPS)
    setattr(stub, ROUTE_ATTR, True)
    sys.modules[VLLM_OPS] = stub
    try:
        return importlib.import_module(module), f"empty {VLLM_OPS} (plain import: {first[:200]})"
    except Exception as err:  # noqa: BLE001
        raise BackendUnavailable(f"{name}: cannot import {module} ({first}; with an empty {VLLM_OPS}: {err})") from err


def _placeholder(obj: object) -> bool:
    """Whether `obj` (a kernel module's `triton` or `tl`) stands in for a Triton module: vLLM's
    TritonPlaceholder / TritonLanguagePlaceholder, or any module object that is not the module
    of its name in sys.modules."""
    if obj is None:
        return False
    if type(obj).__name__.endswith("Placeholder"):
        return True
    return isinstance(obj, ModuleType) and sys.modules.get(obj.__name__) is not obj


def _triton_drivers() -> str:
    """What this process sees of Triton's backends, the thing vLLM's import check looks at."""
    try:
        backends = importlib.import_module("triton.backends").backends
    except Exception as err:  # noqa: BLE001 - any failure is the answer
        return f"triton.backends cannot be imported: {type(err).__name__}: {err}"
    try:
        active = sum(1 for b in backends.values() if b.driver and b.driver.is_active())
    except Exception as err:  # noqa: BLE001
        return f"Triton's drivers cannot be checked: {type(err).__name__}: {err}"
    return f"{active} active Triton driver{'' if active == 1 else 's'} now, vLLM needs exactly 1"


def vllm_triton_reason(name: str, kernel: ModuleType) -> str:
    """Why vLLM's Triton kernel module `kernel` cannot run in this process: vLLM's own import
    check disabled Triton (`vllm.triton_utils.HAS_TRITON` False), or the module holds a placeholder
    for `triton` / `tl`; "" when neither (a vLLM without triton_utils imports Triton directly)."""
    utils = sys.modules.get(VLLM_TRITON_UTILS)
    disabled = utils is not None and getattr(utils, "HAS_TRITON", True) is False
    if not disabled and not any(_placeholder(getattr(kernel, attr, None)) for attr in ("triton", "tl")):
        return ""
    return (
        f"{name}: vLLM disabled Triton in this process ({VLLM_TRITON_UTILS}.HAS_TRITON is False; {_triton_drivers()}), so its "
        "Triton kernels are placeholders that cannot run: repair the Triton install (`python -c 'import triton.backends'` must work)"
    )


MAX_KEPT_ROWS = INT32_MAX // HEAD_DIM  # buffer rows the kernels address (row * 576 is int32)


@dataclass(frozen=True)
class SlotKeys:
    """The keys of n_q rows of W slots each, as one bf16 buffer the kernels address.

    keys: bf16 [n, 576] contiguous, the buffer: the kept whole cache [rows + 1, 576] (row `rows`
      +0) or, per slot, [n_q * W, 576] (slot j of row q at q * W + j, zero when not valid);
    table: int32 [n_q, W], the buffer row of slot j of row q (a +0 row when not valid);
    valid: bool [n_q, W], the slot holds a key (inside the row, entry >= 0 and < the cache's rows);
    counts: int32 [n_q] valid slots per row;
    width: W, a positive multiple of the `multiple` asked for;
    per_slot: the buffer is the per-slot block (row chunks of it may be launched apart, with
      table entries made local by subtracting start * W); False: the kept cache, addressed whole.
    """

    keys: torch.Tensor
    table: torch.Tensor
    valid: torch.Tensor
    counts: torch.Tensor
    width: int
    per_slot: bool

    def valid_first(self) -> torch.Tensor:
        """int32 [n_q, W]: each row's buffer rows of its valid slots first (in slot order), then
        the others: row q's first counts[q] entries are its keys (what a stable sort on ~valid
        gives, placed by running counts and one scatter; no host sync)."""
        valid_before = self.valid_rank()
        slot = torch.arange(self.width, device=self.valid.device, dtype=torch.int32)
        place = torch.where(self.valid, valid_before, self.counts.unsqueeze(1) + slot - valid_before)
        return torch.empty_like(self.table).scatter_(1, place.to(torch.int64), self.table)

    def valid_rank(self) -> torch.Tensor:
        """int32 [n_q, W]: the valid slots before slot j of its row (its place among them when valid)."""
        return torch.cumsum(self.valid, dim=1, dtype=torch.int32) - self.valid.to(torch.int32)

    def chunk_base(self, start: int) -> int:
        """What to subtract from table entries of a chunk starting at row `start`."""
        return start * self.width if self.per_slot else 0


@dataclass(frozen=True)
class SlotLayout:
    """The part of SlotKeys that depends on the index stream and the cache's row count alone
    (what a LayoutCache keeps per index tensors).

    rows: int32 [n_q, W], the cache row of slot j of row q, or n_rows when the slot is not valid;
    valid, counts, width: as in SlotKeys.
    """

    rows: torch.Tensor
    valid: torch.Tensor
    counts: torch.Tensor
    width: int


def slot_layout(indices: torch.Tensor, indptr: torch.Tensor, n_rows: int, *, multiple: int) -> SlotLayout:
    """Each row's slots padded to W (a multiple of `multiple`, sync-free for short streams as in
    kernel.backends.gathered); every entry < 0 or >= n_rows is not valid."""
    rows = csr_to_padded(indices, indptr, has_invalid=True, multiple=multiple, width=sync_free_width(indices.numel(), multiple))
    valid = (rows.indices >= 0) & (rows.indices < n_rows)
    return SlotLayout(
        rows=torch.where(valid, rows.indices, n_rows).to(torch.int32),
        valid=valid,
        counts=valid.sum(dim=1, dtype=torch.int32),
        width=rows.width,
    )


def kept_index(
    layouts: LayoutCache | None, indices: torch.Tensor, indptr: torch.Tensor, params: tuple[Any, ...], build: Callable[[], T]
) -> T:
    """build(), a function of (indices, indptr, params) alone, kept in `layouts` per index
    tensors (kernel.backends.flashmla.LayoutCache: the same tensors, unchanged); None: built."""
    return build() if layouts is None else layouts.get(indices, indptr, params, build)


def slot_keys(
    indices: torch.Tensor,
    indptr: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    multiple: int,
    dequantise: Callable[[torch.Tensor], torch.Tensor] = dequantise_bf16,
    kept: DequantCache | None = None,
    layouts: LayoutCache | None = None,
) -> SlotKeys:
    """Each row's slots and the buffer of their keys (SlotKeys). Every entry < 0 or >= the cache's
    rows is masked; W is sync-free for short streams (as in kernel.backends.gathered).
    dequantise(records uint8 [n, 656] contiguous) -> bf16 [n, 576] is the reader (default
    kernel.backends.gathered.dequantise_bf16, exact for power-of-two scales). kept: the cache
    kept dequantised by the same reader (a DequantCache built by that reader);
    when it gives the whole copy (and its rows fit the kernels' int32 offsets) the table holds
    the rows' own cache rows, else only the consumed records are gathered (torch indexing, any
    cache size) and dequantised, the keys of masked slots zeroed after it. layouts: keeps
    slot_layout per index tensors (kept_index). No host sync for short streams (slot_layout),
    none at all when the layout is kept.
    """
    n_rows = kv_cache.numel() // RECORD_BYTES
    build = partial(slot_layout, indices, indptr, n_rows, multiple=multiple)
    lay = kept_index(layouts, indices, indptr, ("slot_layout", multiple, n_rows), build)
    valid, counts, width = lay.valid, lay.counts, lay.width
    n_q = valid.shape[0]
    whole = None if kept is None or n_rows + 1 > MAX_KEPT_ROWS else kept.get(kv_cache, n_q * width)
    if whole is not None:
        return SlotKeys(keys=whole, table=lay.rows, valid=valid, counts=counts, width=width, per_slot=False)
    flat = kv_cache.reshape(-1, RECORD_BYTES) if n_rows else torch.zeros(1, RECORD_BYTES, dtype=torch.uint8, device=kv_cache.device)
    records = flat[torch.where(valid, lay.rows, 0).reshape(-1)]
    keys = dequantise(records).reshape(-1, HEAD_DIM)
    keys.masked_fill_(~valid.view(-1, 1), 0)
    base = torch.arange(n_q, device=valid.device, dtype=torch.int32).unsqueeze(1) * width
    table = base + torch.arange(width, device=valid.device, dtype=torch.int32)
    return SlotKeys(keys=keys, table=table, valid=valid, counts=counts, width=width, per_slot=True)


def int32_chunks(n: int, row_elements: int) -> list[tuple[int, int]]:
    """Ranges [start, stop) covering n rows of row_elements elements each with every element
    offset below 2^31 (host-known sizes)."""
    per = max(1, INT32_MAX // row_elements)
    return [(s, min(n, s + per)) for s in range(0, n, per)]


def int32_row_chunks(n_q: int, width: int, row_elements: int = HEAD_DIM) -> list[tuple[int, int]]:
    """Query-row ranges [start, stop) whose slot buffer keeps every element offset below 2^31:
    the Triton kernels form (slot * 576 + d) in int32, so one launch addresses fewer than
    2^31 / 576 = 3,728,270 key rows (host-known sizes, no sync)."""
    return int32_chunks(n_q, width * row_elements)


__all__ = [
    "LAYOUTS_KEPT",
    "MAX_KEPT_ROWS",
    "SGLANG_WHEEL",
    "SlotKeys",
    "SlotLayout",
    "VLLM_FILES",
    "cuda_reason",
    "int32_chunks",
    "int32_row_chunks",
    "kept_index",
    "load_sglang",
    "load_vllm",
    "slot_keys",
    "slot_layout",
    "vllm_triton_reason",
]
