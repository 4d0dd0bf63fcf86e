"""vLLM's Triton bf16 sparse MLA kernel as a backend with the kernel contract (`vllm-sparse`).

The kernel is `triton_bf16_mla_sparse_interface` of vLLM 0.33.0
(`vllm/v1/attention/ops/xpu_mla_sparse.py`: the DeepSeek-V3.2 sparse prefill / decode kernel of
vLLM's XPU sparse MLA backend, plain Triton with no XPU-specific operation), called as that
backend calls it:

    out, max_logits, lse = triton_bf16_mla_sparse_interface(
        q,        # bf16 [n_q, H, 576]
        kv,       # bf16 [n_slots, 1, 576]
        indices,  # int32 [n_q, 1, topk], topk a multiple of 16; -1 or >= n_slots: masked
        softmax_scale)
    # out bf16 [n_q, H, 512], lse f32 [n_q, H] natural log

What the adapter does (vectorised; no host sync for streams of at most 4096 entries, and none
at all while the backend keeps the layout of the same index tensors: it keeps the slot layout
and the kernel's index tensors per index tensors and cache row count, kernel.peers.plumbing.LayoutCache):
- keys: dequantised to bf16 (kernel.peers.keys.slot_keys: bf16(bf16(code) *
  bf16(scale)), exact for power-of-two scales): the backend keeps the whole cache dequantised
  while the same cache tensor comes back unchanged (kernel.peers.dequant_cache) and sends the
  rows' own cache rows as indices; otherwise each row's slots are gathered into a [n_q * W, 576]
  buffer, the way vLLM's sparse backends upconvert an fp8_ds_mla cache into a bf16 workspace and
  remap the top-k indices to it; an entry < 0 or >= the cache's rows is sent as -1, the kernel's
  own masking rule (`(indices >= 0) & (indices < seq_kv)`), hence bounded_index_reads = True;
- launches: at most 3,728,270 buffer rows per launch (the kernel forms index * 576 in int32; a
  kept cache of more rows is not used);
- outputs: the interface allocates out and lse itself; out is copied into `out=` when given;
  a row without a valid key comes back as out 0 and lse = ln 2 * (-1e30 + log2 W) (the kernel's
  finite -1e30 sentinel for masked scores): the adapter reports the contract's -inf there.

Numerics (from the kernel source; profile oracle/profile_files/vllm-triton-sparse.toml): one
program owns 16 query heads of one row over all its keys (no split-KV); QK as `tl.dot` of bf16
[16, 512] x [512, 16 keys] plus the 64 rope dims, f32 accumulation; scores times
RN_f32(softmax_scale * log2 e) (log2 domain), masked scores -1e30; online softmax over 16-key
tiles with `tl.exp2`; P rounded to bf16 for PV, l from the f32 P; out = bf16(acc / l), lse =
m * ln 2 + log2(l) * ln 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import torch

from kernel.engines import load_vllm
from kernel.peers.dequant_cache import DequantCache
from kernel.peers.keys import KeptKeys, slot_keys
from kernel.peers.plumbing import LAYOUTS_KEPT, LayoutCache, kept_index
from kernel.peers.protocol import CallArgs, Declaration, TritonAdapter, profile_file
from kernel.record import HEAD_DIM

NAME = "vllm-sparse"
KERNEL_MODULE = "vllm.v1.attention.ops.xpu_mla_sparse"
TOPK_MULTIPLE = 16  # the interface asserts index_topk % BLOCK_N == 0 (BLOCK_N = 16)
PROFILE = profile_file("vllm-triton-sparse.toml")

LIMITS = (
    "H in 1..16 (one KV head of 576 dims, V = its first 512)",
    "CUDA only (Triton); vLLM 0.33.0 triton_bf16_mla_sparse_interface",
    "keys dequantised by the adapter: exact for power-of-two scales",
    "every entry < 0 or >= the cache's rows is masked, as the kernel masks (bounded_index_reads = True)",
    "rows padded with -1 to a multiple of 16 keys; no split-KV: batch-invariant",
    "rows without a valid key: lse -inf set by the adapter (the kernel returns ln 2 * (-1e30 + log2 W) there, out 0)",
)


@dataclass
class VllmSparseCall:
    """One prepared call: the kernel launches (`run`, one per int32-safe row chunk) on buffers the
    adapter built, and the mapping of its outputs to the contract (`finish`)."""

    kernel: ModuleType
    q: torch.Tensor
    chunks: list[tuple[int, int, torch.Tensor, torch.Tensor]]
    counts: torch.Tensor
    width: int
    softmax_scale: float
    results: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def run(self) -> None:
        """The kernel alone: triton_bf16_mla_sparse_interface on each chunk of rows (start, stop,
        its key buffer [n, 1, 576], its indices int32 [rows, 1, W])."""
        self.results = []
        for start, stop, k_chunk, local in self.chunks:
            got, _, lse = self.kernel.triton_bf16_mla_sparse_interface(self.q[start:stop], k_chunk, local, self.softmax_scale)
            self.results.append((got, lse))

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(out, lse) of the contract from the kernel's outputs (module docstring)."""
        outs = [got for got, _ in self.results]
        got = outs[0] if len(outs) == 1 else torch.cat(outs)
        result = out.copy_(got) if out is not None else got
        if not return_lse:
            return result, None
        lses = [lse for _, lse in self.results]
        lse_all = lses[0] if len(lses) == 1 else torch.cat(lses)
        return result, torch.where((self.counts > 0).view(-1, 1), lse_all, float("-inf"))


@dataclass(frozen=True)
class VllmSparseEngine:
    """vLLM's xpu_mla_sparse module."""

    kernel: ModuleType


DECLARATION = Declaration.on_own_heads(
    NAME,
    PROFILE,
    LIMITS,
    bounded_index_reads=True,
    batch_invariant=True,
    note="whole adapter: bf16 keys (kept cache or per slot), slot indices (-1 masked), kernel, lse fix-up",
    bare_note="triton_bf16_mla_sparse_interface on the prepared keys and indices",
)


class VllmSparseAdapter(TritonAdapter):
    """The `vllm-sparse` adapter (kernel.peers.protocol; refusals: TritonAdapter)."""

    declaration = DECLARATION

    def load_engine(self) -> VllmSparseEngine:
        """vLLM's kernel; BackendUnavailable (with the reason) without vLLM's files, or where vLLM
        disabled Triton in this process (kernel.engines.vllm_triton_reason)."""
        return VllmSparseEngine(load_vllm(KERNEL_MODULE, NAME)[0])

    def new_state(self, engine: VllmSparseEngine, *, kept: bool = True) -> KeptKeys | None:
        return KeptKeys(dequant=DequantCache(), layouts=LayoutCache(LAYOUTS_KEPT)) if kept else None

    def prepare(self, engine: VllmSparseEngine, state: KeptKeys | None, args: CallArgs) -> VllmSparseCall:
        """Keys and per-chunk buffer indices (-1 where masked) for one validated call with n_q >= 1.
        state: the whole cache kept dequantised (None: gathered per slot; the same keys either
        way), the slot layout and kernel indices kept per index tensors (None: built per call)."""
        indices, indptr = args.indices, args.indptr
        kept = KeptKeys() if state is None else state
        keys = slot_keys(indices, indptr, args.kv_cache, multiple=TOPK_MULTIPLE, kept=kept.dequant, layouts=kept.layouts)
        buffer = keys.keys.view(-1, 1, HEAD_DIM)

        def kernel_indices() -> list[tuple[int, int, torch.Tensor]]:
            ranges = keys.row_chunks()
            local = [torch.where(keys.valid[a:b], keys.table[a:b] - keys.chunk_base(a), -1) for a, b in ranges]
            return [(a, b, part.unsqueeze(1).contiguous()) for (a, b), part in zip(ranges, local, strict=True)]

        params = (NAME, args.kv_rows, keys.per_slot)  # the indices sent are a function of these and the stream
        launches = kept_index(kept.layouts, indices, indptr, params, kernel_indices)
        return VllmSparseCall(
            kernel=engine.kernel,
            q=args.q,
            chunks=[(start, stop, keys.chunk_rows(buffer, start, stop), local) for start, stop, local in launches],
            counts=keys.counts,
            width=keys.width,
            softmax_scale=float(args.softmax_scale),
        )


ADAPTER = VllmSparseAdapter()


__all__ = ["ADAPTER", "DECLARATION", "LIMITS", "NAME", "PROFILE", "VllmSparseAdapter", "VllmSparseCall", "VllmSparseEngine"]
