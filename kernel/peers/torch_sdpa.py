"""PyTorch's own fused attention kernels over gathered, dequantised K/V, as a backend with the contract.

A kernel from another project than FlashMLA: the memory-efficient attention of PyTorch (the
CUTLASS-based kernel behind `F.scaled_dot_product_attention(..., backend=EFFICIENT_ATTENTION)`)
on CUDA, and PyTorch's CPU flash attention on the CPU, both called through their aten ops so the
log-sum-exp comes back:

    # CUDA: q [n_q, 1, H, 576] bf16 (the H heads of a row are its "query positions": MQA with
    # one KV head), K [n_q, 1, W, 576] bf16, V = K[..., :512], additive bias [n_q, 1, H, W]
    # bf16 (0 for a key, -inf for an empty slot)
    out, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(q, K, V, bias, True, 0.0, False, scale=s)
    # out [n_q, 1, H, 512]; lse f32 [n_q, 1, round32(H)] natural log
    # CPU: the same with V = K (the CPU kernel wants one head size) and out[..., :512]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, K, K, 0.0, False, attn_mask=bias, scale=s)

The flash and cuDNN SDPA kernels refuse head size 576 (at most 256) on an H200 (torch
2.11+cu130, 2026-12-01), so the memory-efficient kernel is the one fused SDPA kernel that runs.
Keys are dequantised to bf16 as kernel.peers.keys does (exact for power-of-two scales):
on CUDA by one fused gather-and-decode pass over the selected records
(kernel.peers.bf16_key_decode, the fast path peers.bf16-keys: used after its bit-for-bit
self-check on the device); else the backend keeps the whole cache dequantised while the same
cache tensor comes back unchanged
(kernel.peers.dequant_cache: a serving engine's bf16 cache) and gathers bf16 rows from it, or
gathers and dequantises the records per slot. All three give the same bits. A row without a
valid key gets out = 0 and lse = -inf from the adapter (the kernel itself returns out 0 and lse 0
for an all-masked row: measured).

Numerics (from the kernel's source: PyTorch aten/src/ATen/native/transformers/cuda/mem_eff_attention):
bf16 x bf16 tensor-core QK with f32 accumulation, the scale applied to the f32 scores, online
softmax in f32 over key blocks (64 keys per block on SM80+ for head sizes > 128) with exp2f after
a log2(e) multiply, P rounded to bf16 for the PV tensor-core product with f32 accumulation, l from
the f32 P, out = bf16(o / l): profile `oracle/profile_files/torch-sdpa-mem-eff.toml` (`bf16-q-bf16-p`
with 128-key softmax blocks; PyTorch runs its "32x128 gmem" kernel for a value head dim of 512). No split over keys, so a
row's result does not depend on the other rows in the call except through the padded width
(extra masked blocks leave o, m and l bit-unchanged): `batch_invariant` True.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernel import fastpath
from kernel.contract import CallInfo
from kernel.peers import bf16_key_decode
from kernel.peers.dequant_cache import DequantCache
from kernel.peers.keys import KeptKeys, RowLayout, gather_rows, row_layout
from kernel.peers.plumbing import LayoutCache, copy_out, kept_index
from kernel.peers.protocol import CallArgs, Declaration, profile_file
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES

NAME = "torch-sdpa"
KEY_MULTIPLE = 64  # padded keys per row: keeps the bias rows 16-element aligned
ALIGN_BYTES = 16  # the fused kernel's vector loads: q, K, V and the bias start 16-byte aligned

PROFILE = profile_file("torch-sdpa-mem-eff.toml")

LIMITS = (
    "H in 1..16 (the row's heads are the kernel's query positions, one KV head)",
    (
        "CUDA only: aten._scaled_dot_product_efficient_attention (PyTorch mem-efficient kernel), the kernel the "
        "profile is derived for; the adapter's CPU path (aten._scaled_dot_product_flash_attention_for_cpu, "
        "another kernel) has no profile and is not offered to the suite: on a one-key row it returned "
        "lse -5.3e-05 where the score is 4e-13 (err/bound 25 under this profile, class 2)"
    ),
    (
        "KV dequantised to bf16 by the adapter: exact for power-of-two scales; "
        "a raw (non-power-of-two) scale is rounded to bf16 (precondition violation)"
    ),
    "every entry < 0 is masked (with or without has_invalid)",
    "consumed indices must lie in [0, rows): the adapter's gather has no bound check (bounded_index_reads = False)",
    "rows padded to a multiple of 64 keys with -inf bias: the work is n_q x padded width",
    "rows without a valid key: out 0 and lse -inf set by the adapter",
    (
        "q is copied when its data pointer is not 16-byte aligned: PyTorch's mem-efficient kernel faults "
        "(misaligned address) on a q at 8 mod 16 bytes, which its own check lets through"
    ),
)


def _attention(q4: torch.Tensor, keys: torch.Tensor, bias: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [n_q, 1, H, 512] bf16, lse [n_q, H] f32 natural log) of the fused kernel of this device."""
    heads = q4.shape[2]
    if q4.device.type == "cuda":
        res: Any = torch.ops.aten._scaled_dot_product_efficient_attention(
            q4, keys, keys[..., :LATENT_DIM], bias, True, 0.0, False, scale=scale
        )
        return res[0], res[1][:, 0, :heads]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q4, keys, keys, 0.0, False, attn_mask=bias, scale=scale)
    return out[..., :LATENT_DIM], lse[:, 0, :heads]


def aligned(t: torch.Tensor) -> torch.Tensor:
    """t when its data pointer is ALIGN_BYTES-aligned, else a contiguous copy (a fresh allocation,
    which is). PyTorch's memory-efficient kernel reads q with 16-byte vector loads but checks its
    pointer only to 8 bytes: a q at 8 mod 16 (e.g. one row of a padded q) faults the whole CUDA
    context with "misaligned address" (repro/torch_sdpa_misaligned/repro.py), public API included."""
    return t if t.data_ptr() % ALIGN_BYTES == 0 else t.clone(memory_format=torch.contiguous_format)


@dataclass
class SdpaCall:
    """One prepared fused-SDPA call: q4 bf16 [n_q, 1, H, 576], keys bf16 [n_q, 1, W, 576] (V =
    keys[..., :512]), bias bf16 [n_q, 1, H, W] (0 for a key, -inf for an empty slot), scale;
    no_key bool [n_q]: rows without a valid key (the adapter sets out 0 and lse -inf there);
    raw: the kernel's (out, lse) after run."""

    q4: torch.Tensor
    keys: torch.Tensor
    bias: torch.Tensor
    scale: float
    no_key: torch.Tensor
    raw: tuple[torch.Tensor, torch.Tensor] | None = None

    def run(self) -> None:
        """The fused kernel on the prepared inputs; keeps (out [n_q, 1, H, 512] bf16, lse [n_q, H] f32) in `raw`."""
        self.raw = _attention(self.q4, self.keys, self.bias, self.scale)

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """out (into `out=` when given) and lse, with out 0 and lse -inf for rows without a key."""
        if self.raw is None:
            raise RuntimeError("finish() before run(): the prepared call has no kernel outputs yet")
        got, lse = self.raw
        n_q, heads = self.q4.shape[0], self.q4.shape[2]
        result = copy_out(got.view(n_q, heads, LATENT_DIM).masked_fill(self.no_key.view(n_q, 1, 1), 0.0), out)
        lse_out = lse.to(torch.float32).masked_fill(self.no_key.view(n_q, 1), float("-inf")) if return_lse else None
        return result, lse_out


@dataclass(frozen=True)
class SdpaEngine:
    """Nothing to import: PyTorch's own kernels."""


DECLARATION = Declaration.on_own_heads(
    NAME,
    PROFILE,
    LIMITS,
    bounded_index_reads=False,
    batch_invariant=True,
    note="whole adapter: gather + bf16 dequantisation, bias, fused SDPA kernel, empty-row fix-up",
    bare_note="aten._scaled_dot_product_efficient_attention on the gathered bf16 keys and bias",
)


class SdpaAdapter:
    """The `torch-sdpa` adapter (kernel.peers.protocol): CUDA devices (see LIMITS for why not the
    CPU path, which runs for the tests all the same); it keeps the index layout per index tensors,
    as a server would, and, where the fused key decode is not available, the dequantised cache
    per cache tensor."""

    declaration = DECLARATION

    def load(self) -> SdpaEngine:
        return SdpaEngine()

    def new_state(self, engine: SdpaEngine, *, kept: bool = True) -> KeptKeys | None:
        return KeptKeys(layouts=LayoutCache(), dequant=DequantCache()) if kept else None

    def support(self, info: CallInfo) -> str:
        return ""

    def prepare(self, engine: SdpaEngine, state: KeptKeys | None, args: CallArgs) -> SdpaCall:
        """The fused kernel's inputs from a contract call (module docstring). state: the slot
        layout, bias and empty-row mask kept per index tensors. The keys: on CUDA where the fast
        path peers.bf16-keys (kernel.peers.bf16_key_decode) is chosen, decoded from the selected
        records in one pass; else, with the state's dequantised cache, gathered as bf16 rows from the whole cache
        (kernel.peers.dequant_cache; an empty slot reads its +0 row); else, or when it declines,
        the records are gathered and dequantised per slot. The same bits."""
        q, kv_cache, indices, indptr = args.q, args.kv_cache, args.indices, args.indptr
        kept = KeptKeys() if state is None else state
        n_q, heads, _ = q.shape
        kv_rows = args.kv_rows
        variant = fastpath.choose(bf16_key_decode.FAST_PATH, q.device) if q.device.type == "cuda" else None
        flat = kv_cache.reshape(-1, RECORD_BYTES) if variant is not None else None
        fused = flat is not None and bf16_key_decode.usable(flat)

        def build() -> tuple[RowLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
            layout = row_layout(indices, indptr, multiple=KEY_MULTIPLE)
            ninf = torch.full((), float("-inf"), dtype=torch.bfloat16, device=q.device)
            zero = torch.zeros((), dtype=torch.bfloat16, device=q.device)
            bias = torch.where(layout.valid, zero, ninf).view(n_q, 1, 1, layout.width).expand(n_q, 1, heads, layout.width).contiguous()
            valid = layout.valid.view(-1)
            # the record each key reads; an empty slot's +0 key: -1 for the fused decode, else the whole cache's +0 row
            key_rows = torch.where(valid, layout.slots.to(torch.int64), -1) if fused else torch.where(valid, layout.slots, kv_rows)
            return layout, bias, ~layout.valid.any(dim=1), key_rows

        params = (NAME, heads, kv_rows, fused)
        layout, bias, no_key, key_rows = kept_index(kept.layouts, indices, indptr, params, build)
        width = layout.width
        if fused:
            assert flat is not None and variant is not None  # what fused means
            keys = torch.empty(n_q * width, HEAD_DIM, dtype=torch.bfloat16, device=q.device)
            bf16_key_decode.launch(flat, key_rows, keys, variant)
            keys = keys.view(n_q, 1, width, HEAD_DIM)
        else:
            whole = None if kept.dequant is None else kept.dequant.get(kv_cache, n_q * width)
            if whole is not None:
                keys = whole.index_select(0, key_rows).view(n_q, 1, width, HEAD_DIM)
            else:
                keys = gather_rows(indices, indptr, kv_cache, multiple=KEY_MULTIPLE, layout=layout).keys.view(n_q, 1, width, HEAD_DIM)
        q4 = aligned(q.contiguous()).view(n_q, 1, heads, q.shape[-1])
        return SdpaCall(q4=q4, keys=keys, bias=bias, scale=float(args.softmax_scale), no_key=no_key)


ADAPTER = SdpaAdapter()


__all__ = ["ADAPTER", "DECLARATION", "KEY_MULTIPLE", "LIMITS", "NAME", "PROFILE", "SdpaAdapter", "SdpaCall", "SdpaEngine"]
