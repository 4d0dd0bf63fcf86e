"""sglang's Triton MLA decode kernel as a backend with the kernel contract (`sglang-decode`).

The kernel is `decode_attention_fwd` of sglang 0.5.10.post1
(`sglang/srt/layers/attention/triton_ops/decode_attention.py`), called as sglang's Triton
attention backend calls it for an MLA model (absorbed weights: one KV head of 576 dims whose first
512 are V, page size 1, so any index list is a row):

    decode_attention_fwd(
        q,            # bf16 [n_q, H_k, 576] (H_k >= 2: the grouped MLA kernel, BLOCK_H = 16)
        k_buffer,     # bf16 [n_slots, 1, 576]
        v_buffer,     # k_buffer[..., :512]
        o,            # bf16 [n_q, H_k, 512] (written by stage 2)
        kv_indptr,    # int32 [n_q + 1]: row q's keys are kv_indices[kv_indptr[q] : kv_indptr[q + 1]]
        kv_indices,   # int32: slot numbers in k_buffer
        attn_logits,  # f32 [n_q, H_k, S, 512]: per-split partial outputs (stage 1)
        attn_lse,     # f32 [n_q, H_k, S]: per-split lse, natural log
        num_kv_splits,  # int32 [n_q] = S for every row
        S,            # max_kv_splits
        softmax_scale, 1.0, 1.0)   # sm_scale, k_scale, v_scale

What the adapter does (vectorised; no host sync for streams of at most 4096 entries, and none
at all while the backend keeps the layout of the same index tensors: it keeps the slot layout
and the kernel's index tensors per index tensors and cache row count, kernel.peers.plumbing.LayoutCache):
- keys: dequantised by sglang's own reader of fp8_ds_mla records, `dequantize_k_cache_paged`
  (nsa/dequant_k_cache.py: bf16(f32(code) * f32(scale)), exact for power-of-two scales). The
  backend keeps the whole cache so dequantised while the same cache tensor comes back unchanged
  (kernel.peers.dequant_cache.DequantCache with sglang's reader) and the kernel reads it at the rows' own cache rows;
  otherwise each row's slot records are gathered (torch indexing) and dequantised into a
  [n_q * W, 576] buffer; an entry < 0 or >= the cache's rows is masked
  (kernel.peers.keys.slot_keys). The reader forms token * 656 in int32, so it is
  given records in launches of fewer than 2^31 / 656 rows, not the cache: on a cache of more
  than 3,273,603 rows it would address wrong bytes (repro/sglang_int32_offsets.py);
- rows: the valid slots of each row, in order, as a contiguous CSR (kv_indptr = running sum of the
  valid counts): a masked entry is simply not in its row;
- splits: S = 8 for every row (sglang's default `--triton-attention-num-kv-splits`); stage 1 cuts
  a row of n keys into pieces of ceil(ceil(n / 8) / 32) * 32 keys, so rows of at most 32 keys are
  never split and the pieces depend on the row alone (batch-invariant);
- heads: H = 1 is run as 2 heads (a zero second head, sliced off): with one query head sglang
  dispatches its MHA kernel (`kv_group_num == 1`), which an MLA model never reaches;
- launches: at most 3,728,270 buffer rows per launch (a kept cache of more rows is not used) (the kernel's offsets slot * 576 are int32);
- outputs: o is written by the kernel into `out=` when given (any row / head strides); a row
  without a valid key (the kernel divides 0 by 0 there) gets out 0 and lse -inf;
- lse: the kernel keeps the per-split lse in attn_lse and returns none; the adapter merges them
  as stage 2 does (f32, natural log): lse = max + log(sum exp(lse_i - max)) over the splits that
  hold keys (`split_lse`).
- a repeated call (the same index tensors, the kept cache): the CSR rows, the splits that hold
  keys and the split counts come from the layout kept per index tensors (`RowSplits`); around the
  kernel the call launches only the output mapping: the empty rows of out zeroed in place, and
  with lse its merge (9 device ops at 16 heads), no host sync.

Numerics (from the kernel source; profile oracle/profile_files/sglang-triton-decode.toml): QK as
`tl.dot` of bf16 [16 heads, 512] x [512, 32 keys] plus the 64 rope dims, f32 accumulation on
mma.sync; scores scaled by the f32 sm_scale; online softmax over 32-key tiles with `tl.exp`
(natural base, lowered to ex2.approx.f32 after a log2(e) multiply); P rounded to bf16 for the PV
`tl.dot`, l summed from the f32 P; each split stores acc / l (f32) and its lse = m + log(l); stage
2 merges the splits in the natural-log domain in f32 and writes bf16(acc / l * v_scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from types import ModuleType

import torch

from kernel.engines import int32_chunks, load_sglang
from kernel.peers.dequant_cache import DequantCache
from kernel.peers.keys import KeptKeys, SlotKeys, slot_keys
from kernel.peers.plumbing import LAYOUTS_KEPT, LayoutCache, kept_index, pad_single_head
from kernel.peers.protocol import CallArgs, Declaration, TritonAdapter, profile_file
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES

NAME = "sglang-decode"
KERNEL_MODULE = "sglang.srt.layers.attention.triton_ops.decode_attention"
READER_MODULE = "sglang.srt.layers.attention.nsa.dequant_k_cache"
NUM_KV_SPLITS = 8  # sglang's --triton-attention-num-kv-splits default
MIN_BLOCK_KV = 32  # the kernel's _MIN_BLOCK_KV: split pieces are multiples of it
SLOT_MULTIPLE = 32
PROFILE = profile_file("sglang-triton-decode.toml")

LIMITS = (
    "H in 1..16 (H = 1 runs as 2 heads: the grouped MLA kernel; one KV head of 576 dims, V = its first 512)",
    "CUDA only (Triton); sglang 0.5.10.post1 decode_attention_fwd, page size 1",
    "keys dequantised by sglang's dequantize_k_cache_paged: exact for power-of-two scales",
    "every entry < 0 or >= the cache's rows is masked (with or without has_invalid)",
    "bounded_index_reads = False: the kernel itself has no bound check (an engine never passes one)",
    f"{NUM_KV_SPLITS} KV splits per row (pieces of ceil(ceil(n / 8) / 32) * 32 keys): batch-invariant",
    "lse merged by the adapter from the kernel's per-split lse (f32, natural log), as its stage 2 merges",
    "rows without a valid key: out 0 and lse -inf set by the adapter (the kernel returns NaN there)",
)


def split_holds(counts: torch.Tensor, splits: int = NUM_KV_SPLITS) -> torch.Tensor:
    """bool [n_q, 1, splits]: split s of row q holds keys (stage 1's pieces of a row of counts[q] keys)."""
    n = counts.to(torch.int64)
    per = (n + splits - 1) // splits
    per = (per + MIN_BLOCK_KV - 1) // MIN_BLOCK_KV * MIN_BLOCK_KV
    start = torch.arange(splits, device=counts.device, dtype=torch.int64).unsqueeze(0) * per.unsqueeze(1)
    return (start < n.unsqueeze(1)).unsqueeze(1)


@dataclass(frozen=True)
class RowSplits:
    """What the kernel's splits of each row are, a function of the rows' key counts alone (kept
    with the CSR rows per index tensors, so a repeated call builds none of it).

    empty_split: bool [n_q, 1, S], split s of row q holds no key (never written by the kernel);
    no_key: bool [n_q, 1, 1], the row has no valid key (split 0 holds keys iff the row has any);
    num_kv_splits: int32 [n_q] = S, the kernel's per-row split count."""

    empty_split: torch.Tensor
    no_key: torch.Tensor
    num_kv_splits: torch.Tensor


def row_splits(counts: torch.Tensor, splits: int = NUM_KV_SPLITS) -> RowSplits:
    """RowSplits of rows with counts[q] valid keys."""
    empty = ~split_holds(counts, splits)
    return RowSplits(
        empty_split=empty,
        no_key=empty[..., :1].contiguous(),
        num_kv_splits=torch.full((counts.shape[0],), splits, dtype=torch.int32, device=counts.device),
    )


def split_lse(attn_lse: torch.Tensor, counts: torch.Tensor, splits: int = NUM_KV_SPLITS, rows: RowSplits | None = None) -> torch.Tensor:
    """The row lse [n_q, H] (f32, natural log; -inf for a row without keys) from the kernel's
    per-split lse [n_q, H, splits]: log-sum-exp over the splits that hold keys, in f32 as the
    kernel's stage 2 merges (max first; a non-finite max counts as 0). A split that holds no key
    is never written by the kernel. A row without keys has every split at -inf, so its sum is 0
    and its lse 0 + log(0) = -inf. rows: row_splits(counts, splits) when already known."""
    rows = row_splits(counts, splits) if rows is None else rows
    lse_i = attn_lse.masked_fill(rows.empty_split, float("-inf"))
    safe = lse_i.amax(dim=-1, keepdim=True).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return lse_i.sub_(safe).exp_().sum(dim=-1).log_().add_(safe.squeeze(-1))


def sglang_dequantise(reader: ModuleType, records: torch.Tensor) -> torch.Tensor:
    """bf16 [n, 576] keys of records uint8 [n, 656] by sglang's dequantize_k_cache_paged, run on
    the gathered records with page table 0..n-1 in launches of fewer than 2^31 / 656 rows (its
    row offsets token * 656 are int32; kernel.engines.int32_chunks)."""
    n = records.shape[0]
    out = torch.empty(n, HEAD_DIM, dtype=torch.bfloat16, device=records.device)
    codes = records.view(torch.float8_e4m3fn)
    for start, stop in int32_chunks(n, RECORD_BYTES):
        table = torch.arange(stop - start, dtype=torch.int32, device=records.device)
        out[start:stop] = reader.dequantize_k_cache_paged(codes[start:stop], table).view(stop - start, HEAD_DIM)
    return out


def kept_cache(reader: ModuleType) -> DequantCache:
    """The whole cache kept dequantised by sglang's reader (sglang_dequantise), for the adapter's state."""
    return DequantCache(dequantise=partial(sglang_dequantise, reader))


def csr_of_valid(keys: SlotKeys, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kv_indptr int32 [rows + 1], kv_indices int32 [rows * W]) of rows [start, stop): each row's
    valid slots in order, as buffer rows of the chunk's buffer (SlotKeys.chunk_base)."""
    width = keys.width
    counts = keys.counts[start:stop]
    n = stop - start
    indptr = torch.zeros(n + 1, dtype=torch.int32, device=counts.device)
    torch.cumsum(counts, dim=0, out=indptr[1:])
    dest = torch.where(keys.valid[start:stop], indptr[:-1].unsqueeze(1) + keys.valid_rank()[start:stop], n * width)
    flat = torch.zeros(n * width + 1, dtype=torch.int32, device=counts.device)
    flat.scatter_(0, dest.reshape(-1).to(torch.int64), (keys.table[start:stop] - keys.chunk_base(start)).reshape(-1))
    return indptr, flat[: n * width]


@dataclass
class SglangCall:
    """One prepared call: the kernel launches (`run`, one per int32-safe row chunk) on buffers the
    adapter built, and the mapping of the kernel's outputs to the contract (`finish`)."""

    kernel: ModuleType
    q_run: torch.Tensor
    buffer: torch.Tensor
    chunks: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]]
    o: torch.Tensor
    logits: torch.Tensor
    att_lse: torch.Tensor
    softmax_scale: float
    keys: SlotKeys
    rows: RowSplits
    heads: int

    def run(self) -> None:
        """The kernel alone: decode_attention_fwd on each chunk of rows (start, stop, its key
        buffer [n, 1, 576], kv_indptr, kv_indices)."""
        q, o, logits, att_lse, splits = self.q_run, self.o, self.logits, self.att_lse, self.rows.num_kv_splits
        for start, stop, k_chunk, kv_indptr, kv_indices in self.chunks:
            if len(self.chunks) > 1:  # one chunk: the tensors themselves, no views
                q, o, logits = self.q_run[start:stop], self.o[start:stop], self.logits[start:stop]
                att_lse, splits = self.att_lse[start:stop], self.rows.num_kv_splits[start:stop]
            self.kernel.decode_attention_fwd(
                q,
                k_chunk,
                k_chunk[..., :LATENT_DIM],
                o,
                kv_indptr,
                kv_indices,
                logits,
                att_lse,
                splits,
                NUM_KV_SPLITS,
                self.softmax_scale,
                1.0,
                1.0,
            )

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(out, lse) of the contract from the kernel's outputs (module docstring). The kernel's
        own o is returned (rows without keys zeroed in place) when it is `out` or when it has
        exactly the call's heads; else the heads are copied out of it."""
        no_key = self.rows.no_key
        if self.o.shape[1] == self.heads and (out is None or self.o is out):
            result = self.o.masked_fill_(no_key, 0)
        else:
            got = self.o[:, : self.heads].masked_fill(no_key, 0)
            result = out.copy_(got) if out is not None else got
        att_lse = self.att_lse if self.att_lse.shape[1] == self.heads else self.att_lse[:, : self.heads]
        lse = split_lse(att_lse, self.keys.counts, rows=self.rows) if return_lse else None
        return result, lse


@dataclass(frozen=True)
class SglangEngine:
    """sglang's decode_attention module (the kernel) and dequant_k_cache module (its reader)."""

    kernel: ModuleType
    reader: ModuleType


DECLARATION = Declaration.on_own_heads(
    NAME,
    PROFILE,
    LIMITS,
    bounded_index_reads=False,
    batch_invariant=True,
    note="whole adapter: keys by sglang's reader (kept cache or per slot), CSR of the valid slots, kernel, lse merge",
    bare_note="decode_attention_fwd on the prepared keys, CSR rows and buffers",
)


class SglangDecodeAdapter(TritonAdapter):
    """The `sglang-decode` adapter (kernel.peers.protocol; refusals: TritonAdapter)."""

    declaration = DECLARATION

    def load_engine(self) -> SglangEngine:
        """sglang's kernel and reader; BackendUnavailable (with the reason) without sglang."""
        kernel, _ = load_sglang(KERNEL_MODULE, NAME)
        reader, _ = load_sglang(READER_MODULE, NAME)
        return SglangEngine(kernel, reader)

    def new_state(self, engine: SglangEngine, *, kept: bool = True) -> KeptKeys | None:
        return KeptKeys(dequant=kept_cache(engine.reader), layouts=LayoutCache(LAYOUTS_KEPT)) if kept else None

    def prepare(self, engine: SglangEngine, state: KeptKeys | None, args: CallArgs) -> SglangCall:
        """Keys, CSR rows, heads and output buffers for one validated call with n_q >= 1 (module
        docstring). state: the cache kept dequantised by this reader (`kept_cache(reader)`; None:
        gathered per slot; either way the kernel reads the same keys), the slot layout and CSR
        rows kept per index tensors (None: built per call)."""
        q, indices, indptr = args.q, args.indices, args.indptr
        kept = KeptKeys() if state is None else state
        n_q, heads = q.shape[0], q.shape[1]
        reading = partial(sglang_dequantise, engine.reader)
        keys = slot_keys(
            indices, indptr, args.kv_cache, multiple=SLOT_MULTIPLE, dequantise=reading, kept=kept.dequant, layouts=kept.layouts
        )
        q_run, o = pad_single_head(q, args.out)
        buffer = keys.keys.view(-1, 1, HEAD_DIM)

        def rows_csr() -> tuple[list[tuple[int, int, torch.Tensor, torch.Tensor]], RowSplits]:
            return [(start, stop, *csr_of_valid(keys, start, stop)) for start, stop in keys.row_chunks()], row_splits(keys.counts)

        params = (NAME, args.kv_rows, keys.per_slot)  # the CSR is a function of these and the indices
        csr, rows = kept_index(kept.layouts, indices, indptr, params, rows_csr)
        return SglangCall(
            kernel=engine.kernel,
            q_run=q_run,
            buffer=buffer,
            chunks=[(start, stop, keys.chunk_rows(buffer, start, stop), *csr_rows) for start, stop, *csr_rows in csr],
            o=o,
            logits=torch.empty(n_q, q_run.shape[1], NUM_KV_SPLITS, LATENT_DIM, dtype=torch.float32, device=q.device),
            att_lse=torch.empty(n_q, q_run.shape[1], NUM_KV_SPLITS, dtype=torch.float32, device=q.device),
            softmax_scale=float(args.softmax_scale),
            keys=keys,
            rows=rows,
            heads=heads,
        )


ADAPTER = SglangDecodeAdapter()


__all__ = [
    "ADAPTER",
    "DECLARATION",
    "LIMITS",
    "NAME",
    "NUM_KV_SPLITS",
    "PROFILE",
    "RowSplits",
    "SglangCall",
    "SglangDecodeAdapter",
    "SglangEngine",
    "csr_of_valid",
    "kept_cache",
    "row_splits",
    "sglang_dequantise",
    "split_holds",
    "split_lse",
]
