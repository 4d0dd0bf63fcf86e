"""FlashMLA's Hopper sparse fp8 decode as a backend with the kernel contract.

The kernel is the SM90 sparse decoding path of the PyPI wheel `sgl-flash-mla==1.0.0` (module
`flash_mla`). That wheel carries upstream FlashMLA's current kernels (SM100 only) and, as a frozen
"legacy" extension, the SM90 kernels and the DeepSeek-V3.2 KV format; the call below therefore
passes ``use_legacy=True`` and ``kv_format="V32"``:

    sched = flash_mla.get_mla_metadata()[0]            # empty FlashMLASchedMeta, filled on call
    out, lse = flash_mla.flash_mla_with_kvcache(
        q4,              # bf16 [n_q, 1, 64 or 128, 576], contiguous (batch = query row, s_q = 1)
        k_cache,         # uint8 [blocks, page_block_size, 1, 656], rows of one block contiguous
        block_table=None, cache_seqlens=None, head_dim_v=512,
        tile_scheduler_metadata=sched, num_splits=None,
        softmax_scale=s, is_fp8_kvcache=True,
        indices=idx3,    # int32 [n_q, 1, topk], topk a multiple of 64, -1 = masked
        use_legacy=True, kv_format="V32")
    # out: bf16 [n_q, 1, H_pad, 512]; lse: f32 [n_q, 1, H_pad] natural log, +inf for no key

What the adapter does to present the contract (every step exact, all vectorised):
- CSR -> fixed-width rows (`csr_to_padded`): row q's entries indices[indptr[q] : indptr[q+1]]
  (a negative length is empty) left-aligned in a row of width W and padded with -1. W is found
  without a host sync when the stream is short (`sync_free_width`: no row of a well-formed stream
  holds more entries than the stream, so W = round64(len(indices)) when that is at most
  SYNC_FREE_TOPK = 4096 keys); otherwise W = max(64, ceil(max_len / 64) * 64), one host sync
  for the longest row (its cost is small beside a kernel over >= 4096 keys). With has_invalid
  every entry < 0 becomes -1: the kernel treats exactly -1
  as masked and turns any other negative value into an out-of-bounds address. Without
  has_invalid entries pass unchanged (the contract makes them all valid rows).
- Heads: FlashMLA takes 64 or 128 query heads; q (H in 1..16, any row/head strides) is copied
  into a zero bf16 [n_q, 1, 64, 576] buffer (a zero head attends uniformly and is sliced off),
  kept by the backend between calls of the same shape (PaddedQ: one copy per call, no fill).
- softmax_scale: the kernel takes the tile max of the unscaled scores and scales it afterwards,
  and masks with -inf before scaling, so it needs softmax_scale > 0. A negative scale is passed
  as (-q, -scale) and a zero scale as (q = 0, scale = 1): both give the same scores exactly.
- KV cache: the flat [rows, 656] records viewed as [rows / bs, bs, 1, 656] uint8 (bs = 1 by
  default; 64 when asked and rows % 64 == 0). Flat row r is block r // bs, slot r % bs, which is
  what FlashMLA's index means (block * page_block_size + offset), so indices pass unchanged.
- Scheduler metadata: kept per call shape by the backend (SchedCache), as a server keeps it;
  the padded index rows are kept per index tensors (LayoutCache: the same indices and indptr
  objects, unchanged, as a server passes them to every layer of a step; fresh tensors rebuild).
  A repeated call (same index tensors, same shape) launches three device ops besides FlashMLA's
  own and no host sync: q's copy into the kept buffer, out's heads copied to a contiguous tensor
  (none at n_q 1, where the slice is contiguous already) and the lse map. A call on fresh index
  tensors adds the conversion's ~14 ops and, for a stream of more than 4096 entries, one host
  sync (the longest row). `python -m benchmarks host_work` counts them.
- Outputs: out[:, 0, :H] (copied into `out=` when given, whatever its strides), lse
  [:, 0, :H] with FlashMLA's +inf of a row without keys mapped to the contract's -inf (one
  nan_to_num: +inf -> -inf, everything else unchanged).

FlashMLA's numerics (legacy SM90 V3.2 path, read from the kernel source): scales are converted
f32 -> bf16 and the latent dequantised as bf16(bf16(code) * scale_bf16) (exact for power-of-two
scales); QK is a bf16 x bf16 WGMMA with f32 accumulation over K = 576; online softmax over
64-key blocks in base 2 with exp2f (fast-math ex2.approx) and P <= 1; P is rounded to bf16 for
the PV WGMMA while l sums the unrounded f32 P; out = bf16(o * (1 / l)) in one piece, or, when
the scheduler splits a row over SMs, per-split o / l_i in f32 recombined with weights
exp2(lse_i - lse) by a combine kernel. That is the `bf16-q-bf16-p` profile.

Not bitwise batch-invariant: FlashMLA's scheduler splits a row's 64-key blocks over the SM
partitions according to the whole batch (on an H200, 2048 keys per row: 32 splits per row at
n_q = 1, 2 at n_q = 64, 1 or 2 at n_q = 1024), a split row goes through the combine kernel
(lse as (log2 l + m) / log2 e there, ln l + m / log2 e unsplit), and the padded width is the
batch's longest row. A row computed alone can therefore differ in its last bits from the same
row in a batch (each result within the bound). The fork's `enable_batch_invariant` exists only
for its SM100 kernels (`use_legacy=True` asserts it off).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from kernel.backend import BackendUnavailable
from kernel.contract import CallInfo, ContractError
from kernel.peers.plumbing import (
    LayoutCache,
    PaddedQ,
    PaddedRows,
    copy_out,
    csr_to_padded,
    effective_scale,
    kept_index,
    kept_padded_q,
    map_lse,
    sync_free_width,
)
from kernel.peers.protocol import BareRow, CallArgs, Declaration
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES

MODULE_NAME = "flash_mla"
WHEEL = "sgl-flash-mla==1.0.0"
TOPK_BLOCK = 64  # FlashMLA's key block: topk must be a multiple of it
HEAD_COUNTS = (64, 128)  # query heads FlashMLA's sparse decode takes
KV_FORMAT = "V32"  # 656-byte records: 512 e4m3 + 4 f32 scales + 64 bf16 rope

LIMITS = (
    "H in 1..16, run as 64 FlashMLA heads (zero heads padded, sliced off)",
    "CUDA devices of compute capability 9.x (SM90 legacy kernels of sgl-flash-mla 1.0.0)",
    (
        "consumed indices must lie in [0, rows): no bound check, an out-of-range index is an "
        "out-of-bounds device read (bounded_index_reads = False)"
    ),
    (
        "with has_invalid the adapter maps every entry < 0 to -1 (FlashMLA masks exactly -1; another "
        "negative value would be an out-of-bounds address); without has_invalid a -1 is still masked "
        "by FlashMLA and any other negative entry faults"
    ),
    (
        "scales are rounded to bf16 and the dequantised latent to bf16: a non-power-of-two (raw "
        "writer) scale is a precondition violation (K off by up to 2^-8 relative)"
    ),
    (
        "softmax_scale <= 0 is passed as (-q, -scale) or (q = 0, scale = 1): FlashMLA takes the tile "
        "max before scaling and masks with -inf, which breaks for a non-positive scale"
    ),
    (
        "rows are padded with -1 to a multiple of 64 keys: the work is max row length x n_q (x the "
        "stream length rounded to 64 when the stream holds <= 4096 entries: no host sync then)"
    ),
    "masked slots read row 0 of the cache (bytes zeroed before use): the cache needs >= 1 row",
    (
        "not bitwise batch-invariant: the split-KV schedule (and the padded width) depends on the whole "
        "batch, so a row alone may differ in its last bits from the same row in a batch"
    ),
)


# ------------------------------------------------------------------------------ conversions


def cache_blocks(kv_cache: torch.Tensor, page_block_size: int = 1) -> torch.Tensor:
    """Flat records uint8 [..., 656] (contiguous) as FlashMLA's [blocks, bs, 1, 656] uint8 view.

    bs = page_block_size when it divides the row count, else 1 (a view never reaches past the
    tensor). Flat row r is block r // bs, slot r % bs: FlashMLA's index block * bs + slot.
    """
    rows = kv_cache.numel() // RECORD_BYTES
    bs = page_block_size if page_block_size >= 1 and rows % page_block_size == 0 else 1
    return kv_cache.view(rows // bs, bs, 1, RECORD_BYTES)


# ------------------------------------------------------------------------------ the call


@dataclass
class FlashMLACall:
    """One prepared FlashMLA call (what the adapter hands to the kernel).

    q: bf16 [n_q, 1, H_pad, 576]; k_cache: uint8 [blocks, bs, 1, 656]; indices: int32
    [n_q, 1, W]; softmax_scale > 0; heads: the caller's H (<= H_pad); n_q: query rows;
    module: flash_mla; sched: a FlashMLASchedMeta to reuse (same shapes only), None: a fresh one
    per launch; raw: FlashMLA's own outputs after run.
    """

    q: torch.Tensor
    k_cache: torch.Tensor
    indices: torch.Tensor
    softmax_scale: float
    heads: int
    n_q: int
    module: ModuleType
    sched: Any = None
    raw: tuple[torch.Tensor, torch.Tensor] | None = None

    def run(self) -> None:
        """Call FlashMLA; keeps its raw (out [n_q, 1, H_pad, 512] bf16, lse f32) in `raw`."""
        module = self.module
        sched = module.get_mla_metadata()[0] if self.sched is None else self.sched
        kwargs: dict[str, Any] = {
            "block_table": None,
            "cache_seqlens": None,
            "head_dim_v": LATENT_DIM,
            "tile_scheduler_metadata": sched,
            "num_splits": None,
            "softmax_scale": self.softmax_scale,
            "is_fp8_kvcache": True,
            "indices": self.indices,
            "use_legacy": True,
        }
        if _accepts_cached(module.flash_mla_with_kvcache, "kv_format"):
            kwargs["kv_format"] = KV_FORMAT
        self.raw = module.flash_mla_with_kvcache(self.q, self.k_cache, **kwargs)

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """out[:, 0, :H] (into `out=` when given), lse [:, 0, :H] with +inf -> -inf (module docstring)."""
        if self.raw is None:
            raise RuntimeError("finish() before run(): the prepared call has no kernel outputs yet")
        out_raw, lse_raw = self.raw
        result = copy_out(out_raw.reshape(self.n_q, -1, LATENT_DIM)[:, : self.heads], out)
        lse = map_lse(lse_raw, self.n_q, self.heads) if return_lse else None
        return result, lse


class SchedCache:
    """FlashMLA scheduler metadata kept per call shape, as a server keeps it between layers.

    FlashMLA's docs allow reusing a FlashMLASchedMeta "when the tensor shapes and the values of
    topk_length and extra_topk_length remain the same"; the V3.2 decode takes no topk_length (it
    asserts "V3.2 does not support dynamic topk length", measured), so the metadata is a function
    of the shapes: (q shape, indices shape, page block size and KV heads, device). A fresh
    FlashMLASchedMeta makes FlashMLA recompute the schedule on every call, which costs more than
    the kernel itself at small batches. At most `capacity` shapes are kept (oldest dropped first).
    """

    def __init__(self, module: ModuleType, capacity: int = 64) -> None:
        self.module = module
        self.capacity = capacity
        self._entries: dict[tuple[Any, ...], Any] = {}

    def get(self, call: FlashMLACall) -> Any:
        """The FlashMLASchedMeta for `call`'s shapes (empty and filled by FlashMLA on first use)."""
        key = (tuple(call.q.shape), tuple(call.indices.shape), tuple(call.k_cache.shape[1:]), call.q.device)
        sched = self._entries.get(key)
        if sched is None:
            if len(self._entries) >= self.capacity:
                self._entries.pop(next(iter(self._entries)))
            sched = self._entries[key] = self.module.get_mla_metadata()[0]
        return sched


_ACCEPTS: dict[tuple[Any, str], bool] = {}


def _accepts_cached(fn: Any, name: str) -> bool:
    """_accepts, remembered per (function, name): inspect.signature costs ~50 us a call."""
    key = (getattr(fn, "__func__", fn), name)
    if key not in _ACCEPTS:
        _ACCEPTS[key] = _accepts(fn, name)
    return _ACCEPTS[key]


def _accepts(fn: Any, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def load_flash_mla() -> ModuleType:
    """Import `flash_mla` with its SM90 (legacy) kernels; BackendUnavailable says why not."""
    try:
        module = importlib.import_module(MODULE_NAME)
    except Exception as err:  # ImportError, or OSError / RuntimeError from loading the .so
        raise BackendUnavailable(f"flashmla: cannot import {MODULE_NAME!r} ({type(err).__name__}: {err}); install {WHEEL}") from err
    has_legacy = getattr(module, "has_legacy", None)
    if callable(has_legacy) and not has_legacy():
        raise BackendUnavailable(
            f"flashmla: {MODULE_NAME} was built without its legacy extension, which holds the SM90 "
            f"sparse decode (FLASH_MLA_BUILD_LEGACY=0); install {WHEEL}"
        )
    return module


def device_reason(device: torch.device | None = None) -> str:
    """Why FlashMLA's SM90 kernels cannot run on `device` (default: the current CUDA device); "" if they can."""
    if getattr(torch.version, "hip", None):
        return f"flashmla: FlashMLA is CUDA-only and this torch is built for ROCm ({torch.__version__})"
    if not torch.cuda.is_available():
        return f"flashmla: no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})"
    index = torch.cuda.current_device() if device is None or device.index is None else device.index
    major, minor = torch.cuda.get_device_capability(index)
    if major != 9:
        name = torch.cuda.get_device_name(index)
        return f"flashmla: needs a compute capability 9.x GPU (Hopper, SM90); cuda:{index} is {name} (sm_{major}{minor})"
    return ""


def missing_op_reason(module: ModuleType, op: str) -> str:
    """Why legacy op `op` of an imported `flash_mla` cannot be called; "" when it can.

    sgl-flash-mla 1.0.0 loads its compiled libraries with torch.ops.load_library: their ops
    register in torch's dispatcher while the library loads (namespace torch.ops.flash_mla_legacy
    for the SM90 kernels, reached through `flash_mla._loader.get_ops(use_legacy=True)`). A library
    that loads but registers nothing (built for another torch) imports fine and fails at the first
    call; this looks the op up instead. A `flash_mla` without that loader is not checked."""
    get_ops = getattr(getattr(module, "_loader", None), "get_ops", None)
    if not callable(get_ops):
        return ""
    try:
        ops = get_ops(True)
    except Exception as err:  # noqa: BLE001 - the loader's own refusal is the reason
        return f"flashmla: {MODULE_NAME}'s legacy kernels are unavailable ({type(err).__name__}: {err}); install {WHEEL}"
    try:
        getattr(ops, op)
    except (AttributeError, RuntimeError) as err:
        namespace = getattr(ops, "name", "its legacy namespace")
        return (
            f"flashmla: {MODULE_NAME} imports but its compiled op {namespace}::{op} is not registered "
            f"({type(err).__name__}: {err}); reinstall {WHEEL} built for this torch ({torch.__version__})"
        )
    return ""


def require_flash_mla(name: str = "flashmla", op: str = "sparse_decode_fwd") -> ModuleType:
    """The `flash_mla` module where its SM90 kernels can run; else BackendUnavailable naming
    every reason (no usable CUDA device, the import failing, legacy op `op` not registered:
    missing_op_reason), each prefixed `name:`."""
    reasons = [r for r in (device_reason(),) if r]
    module = None
    try:
        module = load_flash_mla()
    except BackendUnavailable as err:
        reasons.append(str(err))
    else:
        reasons.extend(r for r in (missing_op_reason(module, op),) if r)
    if reasons:
        raise BackendUnavailable("; ".join(r.replace("flashmla:", f"{name}:", 1) for r in reasons))
    return module


@dataclass(frozen=True)
class FlashMLAEngine:
    """The imported `flash_mla` module (require_flash_mla)."""

    module: ModuleType


@dataclass
class FlashMLAState:
    """What the backend keeps between calls: scheduler metadata per call shape, padded index rows
    per index tensors, the padded q buffer per call shape (each None: made per call)."""

    sched: SchedCache | None = None
    layouts: LayoutCache | None = None
    padded_q: PaddedQ | None = None


DECLARATION = Declaration(
    name="flashmla",
    profile="bf16-q-bf16-p",
    limits=LIMITS,
    bounded_index_reads=False,
    batch_invariant=False,
    label="flashmla (adapter, H{heads} padded to 64)",
    note="whole adapter: CSR -> padded rows, head padding, scheduler, kernel, slicing",
    bare=BareRow(
        ":h64-kernel",
        64,
        "flashmla (bare kernel, native H64)",
        "flash_mla_with_kvcache on prepared inputs, 64 heads, scheduler metadata reused",
    ),
)


class FlashMLAAdapter:
    """The `flashmla` adapter (kernel.peers.protocol). padded_heads: 64 or 128 FlashMLA heads;
    page_block_size: 1, or 64 (used when it divides the cache's row count)."""

    declaration = DECLARATION

    def __init__(self, *, padded_heads: int = HEAD_COUNTS[0], page_block_size: int = 1) -> None:
        if padded_heads not in HEAD_COUNTS:
            raise ValueError(f"padded_heads must be one of {HEAD_COUNTS}, got {padded_heads}")
        self.padded_heads = padded_heads
        self.page_block_size = page_block_size

    def load(self) -> FlashMLAEngine:
        """flash_mla where its SM90 kernels can run; BackendUnavailable when `flash_mla` cannot be
        imported, its sparse decode op is not registered, or there is no CUDA device of compute
        capability 9.x."""
        return FlashMLAEngine(require_flash_mla())

    def new_state(self, engine: FlashMLAEngine, *, kept: bool = True) -> FlashMLAState:
        if not kept:
            return FlashMLAState(sched=SchedCache(engine.module))
        return FlashMLAState(sched=SchedCache(engine.module), layouts=LayoutCache(), padded_q=PaddedQ())

    def support(self, info: CallInfo) -> str:
        if info.kv_rows == 0:
            return "flashmla reads row 0 of the cache for masked slots: kv_cache needs at least one row"
        if info.device.type == "cuda":
            return device_reason(info.device)
        return ""

    def prepare(self, engine: FlashMLAEngine, state: FlashMLAState | None, args: CallArgs) -> FlashMLACall:
        """FlashMLA's inputs from a contract call (module docstring); ContractError for a cache
        without rows. state: the index rows reused while the same index tensors come again, the
        padded q buffer and the scheduler metadata kept per call shape (None: made per call)."""
        if args.kv_rows == 0:
            raise ContractError("kv_cache has no rows: FlashMLA reads row 0 for masked slots")
        q, indices, indptr, has_invalid = args.q, args.indices, args.indptr, args.has_invalid
        kept = FlashMLAState() if state is None else state
        padded_heads = self.padded_heads
        n_q, heads, _ = q.shape
        sign, scale = effective_scale(args.softmax_scale)

        def build() -> PaddedRows:
            return csr_to_padded(
                indices, indptr, has_invalid=has_invalid, multiple=TOPK_BLOCK, width=sync_free_width(indices.numel(), TOPK_BLOCK)
            )

        rows = kept_index(kept.layouts, indices, indptr, ("flashmla", has_invalid), build)
        call = FlashMLACall(
            q=kept_padded_q(kept.padded_q, q, padded_heads, sign),
            k_cache=cache_blocks(args.kv_cache, self.page_block_size),
            indices=rows.indices.view(n_q, 1, rows.width),
            softmax_scale=scale,
            heads=heads,
            n_q=n_q,
            module=engine.module,
        )
        if kept.sched is not None:
            call.sched = kept.sched.get(call)
        return call


ADAPTER = FlashMLAAdapter()


__all__ = [
    "HEAD_COUNTS",
    "HEAD_DIM",
    "LIMITS",
    "TOPK_BLOCK",
    "ADAPTER",
    "DECLARATION",
    "FlashMLAAdapter",
    "FlashMLACall",
    "FlashMLAEngine",
    "FlashMLAState",
    "SchedCache",
    "cache_blocks",
    "device_reason",
    "load_flash_mla",
    "missing_op_reason",
    "require_flash_mla",
]
