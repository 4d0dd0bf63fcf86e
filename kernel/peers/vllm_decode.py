"""vLLM's Triton MLA decode kernel as a backend with the kernel contract (`vllm-decode`).

The kernel is `decode_attention_fwd` of vLLM 0.33.0 (`vllm/v1/attention/ops/triton_decode_attention.py`),
called as vLLM's TRITON_MLA backend (`TritonMLAImpl.forward_mqa`) calls it, with page size 1 so any
index list is a row:

    decode_attention_fwd(
        q,             # bf16 [n_q, H_k, 576] (H_k >= 2: the grouped kernel)
        kv,            # bf16 [n_slots, 1, 1, 576]: [blocks, page 1, 1 KV head, 576]
        kv[..., :512], # V = the latent (is_mla: the kernel reuses the loaded K tile as V)
        o,             # bf16 [n_q, H_k, 512]
        lse,           # f32 [n_q, H_k] natural log (the engine passes q.dtype; f32 here)
        block_table,   # int32 [n_q, W]: row q's keys are its first seq_lens[q] page numbers
        seq_lens,      # int32 [n_q]
        attn_logits,   # f32 [n_q, H_k, S, 513]: per-split output and lse
        S, softmax_scale, 1, k_scale=1.0, v_scale=1.0, is_mla=True)

What the adapter does (vectorised; no host sync for streams of at most 4096 entries, and none
at all while the backend keeps the layout of the same index tensors: it keeps the slot layout
and the kernel's index tensors per index tensors and cache row count, kernel.peers.plumbing.LayoutCache):
- keys: dequantised to bf16 (kernel.peers.keys.slot_keys: bf16(bf16(code) *
  bf16(scale)), exact for power-of-two scales; an entry < 0 or >= the cache's rows is masked):
  the backend keeps the whole cache dequantised while the same cache tensor comes back unchanged
  (kernel.peers.dequant_cache) and the kernel reads it at the rows' own cache rows (page
  numbers), else each row's slots are gathered into a [n_q * W, 576] buffer; block_table holds
  each row's valid slots first, seq_lens their count;
- splits: vLLM's own rule, S = min(next_pow2(max(1, W // 512)), 2 * SMs), with W the batch's
  padded row width standing in for the batch's max_seq_len (as in forward_mqa); stage 1 cuts a
  row of n keys into S pieces of ceil(n / S) keys. S depends on the batch: not batch-invariant
  (vLLM's VLLM_BATCH_INVARIANT mode uses S = 1: `vllm-decode` keeps the default);
- heads: H = 1 is run as 2 heads (a zero second head, sliced off): vLLM dispatches its MHA kernel
  for one query head per KV head, which an MLA model never reaches;
- outputs: o and lse are written by the kernel (o into `out=` when given); a row without a valid
  key (0 / 0 there) gets out 0 and lse -inf.

Numerics (from the kernel source; profile oracle/profile_files/vllm-triton-decode.toml): the same
lineage as sglang's kernel (lightllm): QK as `tl.dot` over 512 + 64 dims with f32 accumulation,
scores times the f32 sm_scale, online softmax over 32-key tiles with `tl.exp`, P rounded to bf16
for PV, l from the f32 P, per-split acc / l and lse = m + log(l) in f32, merged in stage 2 in the
natural-log domain: out = bf16(acc / l), lse = m + log(l).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch

from kernel.engines import load_vllm
from kernel.peers.dequant_cache import DequantCache
from kernel.peers.keys import KeptKeys, slot_keys
from kernel.peers.plumbing import LAYOUTS_KEPT, LayoutCache, kept_index, pad_single_head
from kernel.peers.protocol import CallArgs, Declaration, TritonAdapter, profile_file
from kernel.record import HEAD_DIM, LATENT_DIM

NAME = "vllm-decode"
KERNEL_MODULE = "vllm.v1.attention.ops.triton_decode_attention"
MIN_WORK_PER_SPLIT = 512  # vllm/v1/attention/backends/mla/triton_mla.py
SPLIT_OCCUPANCY_MULTIPLIER = 2
SLOT_MULTIPLE = 32
PROFILE = profile_file("vllm-triton-decode.toml")

LIMITS = (
    "H in 1..16 (H = 1 runs as 2 heads: the grouped MLA kernel; one KV head of 576 dims, V = its first 512)",
    "CUDA only (Triton); vLLM 0.33.0 decode_attention_fwd (TRITON_MLA), page size 1, is_mla=True",
    "keys dequantised by the adapter: exact for power-of-two scales",
    "every entry < 0 or >= the cache's rows is masked (with or without has_invalid)",
    "bounded_index_reads = False: the kernel itself has no bound check",
    "KV splits by vLLM's rule from the batch's padded width: not batch-invariant",
    "rows without a valid key: out 0 and lse -inf set by the adapter (the kernel returns NaN there)",
)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


def num_kv_splits(max_seq_len: int, sm_count: int) -> int:
    """vLLM's split count for a batch whose longest row has max_seq_len keys (triton_mla.py)."""
    return min(next_pow2(max(1, max_seq_len // MIN_WORK_PER_SPLIT)), sm_count * SPLIT_OCCUPANCY_MULTIPLIER)


@dataclass
class VllmDecodeCall:
    """One prepared call: the kernel launch (`run`) on buffers the adapter built, and the mapping
    of its outputs to the contract (`finish`)."""

    kernel: ModuleType
    q_run: torch.Tensor
    cache: torch.Tensor
    table: torch.Tensor
    counts: torch.Tensor
    o: torch.Tensor
    lse: torch.Tensor
    logits: torch.Tensor
    splits: int
    softmax_scale: float
    one: torch.Tensor
    heads: int

    def run(self) -> None:
        """The kernel alone: decode_attention_fwd as TritonMLAImpl.forward_mqa calls it."""
        self.kernel.decode_attention_fwd(
            self.q_run,
            self.cache,
            self.cache[..., :LATENT_DIM],
            self.o,
            self.lse,
            self.table,
            self.counts,
            self.logits,
            self.splits,
            self.softmax_scale,
            1,
            k_scale=self.one,
            v_scale=self.one,
            is_mla=True,
        )

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(out, lse) of the contract from the kernel's outputs (module docstring)."""
        n_q = self.o.shape[0]
        has_key = (self.counts > 0).view(n_q, 1, 1)
        if out is not None and self.o is out:
            result = out.masked_fill_(~has_key, 0)
        else:
            got = torch.where(has_key, self.o[:, : self.heads], torch.zeros((), dtype=torch.bfloat16, device=self.o.device))
            result = out.copy_(got) if out is not None else got
        lse = torch.where(has_key.view(n_q, 1), self.lse[:, : self.heads], float("-inf")) if return_lse else None
        return result, lse


@dataclass(frozen=True)
class VllmDecodeEngine:
    """vLLM's triton_decode_attention module and the device's multiprocessor count (its split rule)."""

    kernel: ModuleType
    sm_count: int


DECLARATION = Declaration.on_own_heads(
    NAME,
    PROFILE,
    LIMITS,
    bounded_index_reads=False,
    batch_invariant=False,
    note="whole adapter: bf16 keys (kept cache or per slot), block table of the valid slots, kernel",
    bare_note="decode_attention_fwd on the prepared keys, block table and buffers",
)


class VllmDecodeAdapter(TritonAdapter):
    """The `vllm-decode` adapter (kernel.peers.protocol; refusals: TritonAdapter)."""

    declaration = DECLARATION

    def load_engine(self) -> VllmDecodeEngine:
        """vLLM's kernel and the current device's SM count; BackendUnavailable (with the reason)
        without vLLM's files, or where vLLM disabled Triton in this process
        (kernel.engines.vllm_triton_reason)."""
        kernel, _ = load_vllm(KERNEL_MODULE, NAME)
        return VllmDecodeEngine(kernel, torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)

    def new_state(self, engine: VllmDecodeEngine, *, kept: bool = True) -> KeptKeys | None:
        return KeptKeys(dequant=DequantCache(), layouts=LayoutCache(LAYOUTS_KEPT)) if kept else None

    def prepare(self, engine: VllmDecodeEngine, state: KeptKeys | None, args: CallArgs) -> VllmDecodeCall:
        """Keys, block table, split count and output buffers for one validated call with n_q >= 1.
        state: the whole cache kept dequantised (None: gathered per slot; the same keys either
        way), the slot layout and block table kept per index tensors (None: built per call)."""
        q, indices, indptr = args.q, args.indices, args.indptr
        kept = KeptKeys() if state is None else state
        n_q, heads = q.shape[0], q.shape[1]
        keys = slot_keys(indices, indptr, args.kv_cache, multiple=SLOT_MULTIPLE, kept=kept.dequant, layouts=kept.layouts)
        params = (NAME, args.kv_rows, keys.per_slot)  # the table is a function of these and the indices
        splits = num_kv_splits(keys.width, engine.sm_count)
        q_run, o = pad_single_head(q, args.out)
        return VllmDecodeCall(
            kernel=engine.kernel,
            q_run=q_run,
            cache=keys.keys.view(-1, 1, 1, HEAD_DIM),
            table=kept_index(kept.layouts, indices, indptr, params, keys.valid_first),
            counts=keys.counts,
            o=o,
            lse=torch.empty(n_q, q_run.shape[1], dtype=torch.float32, device=q.device),
            logits=torch.empty(n_q, q_run.shape[1], splits, LATENT_DIM + 1, dtype=torch.float32, device=q.device),
            splits=splits,
            softmax_scale=float(args.softmax_scale),
            one=torch.ones((), dtype=torch.float32, device=q.device),
            heads=heads,
        )


ADAPTER = VllmDecodeAdapter()


__all__ = [
    "ADAPTER",
    "DECLARATION",
    "LIMITS",
    "NAME",
    "PROFILE",
    "VllmDecodeAdapter",
    "VllmDecodeCall",
    "VllmDecodeEngine",
    "num_kv_splits",
]
