"""FlashMLA's Hopper sparse prefill (`flash_mla_sparse_fwd`, bf16 KV) as a backend with the contract.

The kernel is the SM90 sparse prefill of `sgl-flash-mla==1.0.0` (the legacy extension; the
current `use_legacy=False` prefill is SM100-only and refuses an H200 with "only supported on
SM100f architectures", on an H200 with sgl-flash-mla 1.0.0, 2026-12-01):

    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(
        q3,            # bf16 [s_q, 64 or 128, 576] (d_qk 576 on SM90), contiguous
        kv,            # bf16 [s_kv, 1, 576]
        indices,       # int32 [s_q, 1, topk], topk a multiple of 128; -1 or >= s_kv = masked
        sm_scale, 512, topk_length=lengths,   # int32 [s_q]: only indices[q, :, :len] attended
        use_legacy=True)
    # out bf16 [s_q, h_q, 512]; lse f32 [s_q, h_q] natural log, +inf for a row without keys
    # (out 0 there); max_logits f32 [s_q, h_q] (-inf for such a row)

The contract's fp8_ds_mla records become bf16 KV exactly when every scale is a power of two
(kernel.peers.keys), so this kernel computes the contract's function. What the adapter
does (all vectorised, no host sync when the stream holds <= 4096 entries):
- KV: the whole cache dequantised to bf16 and kept while the same cache tensor comes back
  unchanged (kernel.peers.dequant_cache: a serving engine's bf16 cache), handed to the
  kernel with the rows' own indices padded to W (a multiple of 128; -1 for an empty slot) and
  topk_length = the row lengths; when the cache is not kept (first sight of a cache with more
  rows than the call's slots), only the records the rows consume are gathered and dequantised,
  one bf16 KV row per slot of the [n_q, W] block, with the slot positions q * W + j as indices;
- heads: q (H in 1..16, any strides) goes into a zero bf16 [n_q, 64, 576] buffer (a zero head is
  sliced off), kept between calls of the same n_q and H (PaddedQ: only heads < H are written, so
  a repeated call copies q in and launches no fill); softmax_scale <= 0 as (-q, -scale) or
  (q = 0, scale = 1), as for `flashmla`;
- lse +inf (no key) -> -inf; out= is filled by a copy.

FlashMLA's numerics (SM90 sparse prefill, from its source and docs): QK is a bf16 x bf16 WGMMA
with f32 accumulation over 576 dims; online softmax over 64-key blocks in base 2 (exp2f,
ex2.approx), P rounded to bf16 for the PV WGMMA, f32 accumulation of o and l, out =
bf16(o / l); no split-KV (one CTA owns a query row and its heads), so a row's result does not
depend on the other rows of the call: `batch_invariant` is declared True and the suite holds
that to the bit. The arithmetic is FlashMLA decode's without the split-KV combine: profile
`oracle/profile_files/flashmla-sparse-prefill.toml` (extends `bf16-q-bf16-p`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from kernel.contract import INT32_MAX, CallInfo
from kernel.peers.dequant_cache import DequantCache
from kernel.peers.flashmla import FlashMLAEngine, device_reason, require_flash_mla
from kernel.peers.keys import RowLayout, gather_rows, row_layout
from kernel.peers.plumbing import LayoutCache, PaddedQ, copy_out, effective_scale, kept_index, kept_padded_q, map_lse
from kernel.peers.protocol import BareRow, CallArgs, Declaration, profile_file
from kernel.record import HEAD_DIM, LATENT_DIM

NAME = "flashmla-prefill"
TOPK_MULTIPLE = 128  # the SM90 prefill asserts topk % (2 * B_TOPK) == 0 with B_TOPK = 64
HEAD_COUNTS = (64, 128)

PROFILE = profile_file("flashmla-sparse-prefill.toml")

LIMITS = (
    "H in 1..16, run as 64 FlashMLA heads (zero heads padded, sliced off); the kernel takes h_q 64 or 128",
    "CUDA devices of compute capability 9.x (SM90 legacy sparse prefill of sgl-flash-mla 1.0.0)",
    (
        "KV dequantised to bf16 by the adapter: exact for power-of-two scales; "
        "a raw (non-power-of-two) scale is rounded to bf16 (precondition violation)"
    ),
    "every entry < 0 is masked (with or without has_invalid)",
    "consumed indices must lie in [0, rows): the adapter's gather has no bound check (bounded_index_reads = False)",
    "rows padded to a multiple of 128 slots; the kernel stops at each row's length (topk_length)",
    "n_q x padded width must fit int32 (the slot positions are the kernel's KV indices)",
    "softmax_scale <= 0 passed as (-q, -scale) or (q = 0, scale = 1), as for flashmla",
)


@dataclass
class PrefillCall:
    """Prepared inputs: q bf16 [n_q, H_pad, 576]; kv bf16 [n_q * W, 1, 576]; indices int32
    [n_q, 1, W]; topk_length int32 [n_q]; softmax_scale > 0; heads: the caller's H; module:
    flash_mla; raw: flash_mla_sparse_fwd's own outputs after run."""

    q: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    topk_length: torch.Tensor
    softmax_scale: float
    heads: int
    n_q: int
    module: ModuleType
    raw: tuple[torch.Tensor, Any, torch.Tensor] | None = None

    def run(self) -> None:
        """flash_mla_sparse_fwd on the prepared inputs; keeps (out [n_q, H_pad, 512], max_logits,
        lse [n_q, H_pad]) in `raw`."""
        self.raw = self.module.flash_mla_sparse_fwd(
            self.q,
            self.kv,
            self.indices,
            self.softmax_scale,
            LATENT_DIM,
            topk_length=self.topk_length,
            use_legacy=True,
        )

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """out[:, :H] (into `out=` when given), lse [:, :H] with +inf -> -inf."""
        if self.raw is None:
            raise RuntimeError("finish() before run(): the prepared call has no kernel outputs yet")
        out_raw, _max_logits, lse_raw = self.raw
        result = copy_out(out_raw.view(self.n_q, -1, LATENT_DIM)[:, : self.heads], out)
        return result, (map_lse(lse_raw, self.n_q, self.heads) if return_lse else None)


@dataclass
class PrefillState:
    """What the backend keeps between calls: the slot layout, KV indices and topk_length per index
    tensors, the whole cache dequantised, the padded q buffer per call shape (each None: per call)."""

    layouts: LayoutCache | None = None
    dequant: DequantCache | None = None
    padded_q: PaddedQ | None = None


DECLARATION = Declaration(
    name=NAME,
    profile=PROFILE,
    limits=LIMITS,
    bounded_index_reads=False,
    batch_invariant=True,
    label="flashmla-prefill (adapter, H{heads} pad 64)",
    note="whole adapter: gather + bf16 dequantisation of the consumed records, head padding, kernel, slicing",
    bare=BareRow(
        ":h64-kernel",
        64,
        "flashmla-prefill (bare kernel, H64)",
        "flash_mla_sparse_fwd on the prepared bf16 KV, slot indices and topk_length, 64 heads",
    ),
)


class FlashMLAPrefillAdapter:
    """The `flashmla-prefill` adapter (kernel.peers.protocol); padded_heads: 64 or 128 FlashMLA heads."""

    declaration = DECLARATION

    def __init__(self, *, padded_heads: int = HEAD_COUNTS[0]) -> None:
        if padded_heads not in HEAD_COUNTS:
            raise ValueError(f"padded_heads must be one of {HEAD_COUNTS}, got {padded_heads}")
        self.padded_heads = padded_heads

    def load(self) -> FlashMLAEngine:
        """flash_mla where its SM90 kernels can run; BackendUnavailable when `flash_mla` cannot be
        imported, its sparse prefill op is not registered, or there is no CUDA device of compute
        capability 9.x."""
        return FlashMLAEngine(require_flash_mla(NAME, op="sparse_prefill_fwd"))

    def new_state(self, engine: FlashMLAEngine, *, kept: bool = True) -> PrefillState | None:
        return PrefillState(layouts=LayoutCache(), dequant=DequantCache(), padded_q=PaddedQ()) if kept else None

    def support(self, info: CallInfo) -> str:
        if info.device.type == "cuda":
            return device_reason(info.device).replace("flashmla:", f"{NAME}:", 1)
        return ""

    def prepare(self, engine: FlashMLAEngine, state: PrefillState | None, args: CallArgs) -> PrefillCall:
        """flash_mla_sparse_fwd's inputs from a contract call (module docstring). state: the slot
        layout, KV indices and topk_length reused while the same index tensors come again; the
        whole cache kept dequantised (kernel.peers.dequant_cache), handed to the kernel as its KV
        with the rows' own indices (-1 for an empty slot); without it, or when it declines, the
        records are gathered and dequantised per slot and the kernel reads slot q * W + j. Either
        way each attended position reads the same bf16 key. The padded q buffer kept between calls
        (None: a fresh one per call)."""
        q, kv_cache, indices, indptr = args.q, args.kv_cache, args.indices, args.indptr
        kept = PrefillState() if state is None else state
        padded_heads = self.padded_heads
        n_q, heads, _ = q.shape
        sign, scale = effective_scale(args.softmax_scale)

        def build() -> tuple[RowLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
            layout = row_layout(indices, indptr, multiple=TOPK_MULTIPLE)
            width = layout.width
            if n_q * width > INT32_MAX:
                raise ValueError(f"n_q {n_q} x width {width} slots exceed int32 KV indices")
            slot = torch.arange(n_q * width, device=q.device, dtype=torch.int32).view(n_q, width)
            kv_index = torch.where(layout.valid, slot, -1).view(n_q, 1, width)
            row_index = torch.where(layout.valid, layout.slots.view(n_q, width), -1).view(n_q, 1, width)
            return layout, kv_index, row_index, layout.lengths.clamp_max(width).to(torch.int32)

        params = (NAME, TOPK_MULTIPLE)
        layout, kv_index, row_index, topk_length = kept_index(kept.layouts, indices, indptr, params, build)
        width = layout.width
        whole = None if kept.dequant is None else kept.dequant.get(kv_cache, n_q * width)
        if whole is not None:
            kv, kv_indices = whole.view(-1, 1, HEAD_DIM), row_index
        else:
            rows = gather_rows(indices, indptr, kv_cache, multiple=TOPK_MULTIPLE, layout=layout)
            kv, kv_indices = rows.keys.view(n_q * width, 1, HEAD_DIM), kv_index
        return PrefillCall(
            q=kept_padded_q(kept.padded_q, q, padded_heads, sign).view(n_q, padded_heads, HEAD_DIM),
            kv=kv,
            indices=kv_indices,
            topk_length=topk_length,
            softmax_scale=scale,
            heads=heads,
            n_q=n_q,
            module=engine.module,
        )


ADAPTER = FlashMLAPrefillAdapter()


__all__ = [
    "PROFILE",
    "HEAD_COUNTS",
    "LIMITS",
    "NAME",
    "TOPK_MULTIPLE",
    "ADAPTER",
    "DECLARATION",
    "FlashMLAPrefillAdapter",
    "PrefillCall",
    "PrefillState",
]
