"""The gfx950 sparse MLA kernel's algorithm, step by step, in torch (CPU or any GPU).

All rows and heads are processed at once; the only loops are over row chunks (bounded memory),
over 128-key tiles, and over the fixed in-tile accumulation steps. With the default per-tile
stages the tiles of a chunk run batched (`_run_chunk_batched`): every stage without state across
tiles runs once for a group of tiles (QK per row over all its tiles' keys: group_scores; P' and
the PV products: group_pv_terms), and only the running m, l and o are updated tile by tile
(m by a running max; l and o by emulated_state.advance), bit-identical to the per-tile loop
(`batch_tiles=False`). On CUDA the group's QK scores and its PV products with the running-state
updates are DMMA kernels (emulated_qk, emulated_pv), and the QK accumulation, the running-state
updates and the K and V decode Triton kernels (emulated_scores, emulated_state, emulated_decode):
the fast paths emulated.qk, pv, scores, state and decode (kernel.fastpath; this module registers
the three whose self-checks compare with its torch functions), used where they reproduced the
torch operations' bits on a probe (CONFORMANCE_FAST_PATHS switches them).
Stages carry the names the FlyDSL kernel uses:

    read_q          q rows and heads through their strides (f32 view of bf16)
    tile_count      tiles per row: ceil(len / 128), or with has_invalid ceil(last_valid / 128)
    load_slots      the KV row of each tile position; positions >= len and entries < 0 masked,
                    index reads past the index stream return 0 (bounded buffer reads)
    gather_records  656-byte records of the slots (64-bit byte offsets)
    quantize_q      Q per (head, 128 dims): E8M0 s = max(exp(amax) - 7, 5), hi = e4m3(q 2^(127-s)),
                    lo = e4m3((q 2^(127-s) - hi) * 32) with E8M0 s - 5 (never below 0)
    qk_scores       scaled fp8 MFMA with the record scale's exponent field as E8M0, then two
                    bf16 rope MFMAs, f32 accumulator
    online_softmax  x = s * c_log2, tile max, m, alpha = exp2(m_old - m_new),
                    P = exp2(x - max(m - 8, -1e20)), l partial sums per (wave, lane group)
    scale_p         P' = fp16(P * scale_v), scale_v = f32 bits clamped to [1, bits(2^7)], 0 masked
    pv_accumulate   o = o * alpha, then 4 f16 MFMAs of 32 keys each per tile
    finalize        l over lane groups and waves, out = bf16(o * (1 / l)), lse = (m + log2 l - 8) ln 2

Two deliberate improvements over the seed kernel: a masked position contributes exactly zero
even when the row it falls back to (row 0) holds NaN codes (its V is zeroed), and a tiny or zero
Q block never yields an out-of-range E8M0 for its lo part (s >= 5).

Modelling choices where the hardware is not documented:
- An MFMA forms its products and their sum exactly (float64 here) and rounds once (RNE) when it
  adds to the f32 accumulator. QK MFMA j covers dims 32j..32j+31 of each 128-dim block; PV MFMA
  kk = 2 hf + sub covers the 32 tile keys with key bit 6 == hf and bit 2 == sub.
- v_exp_f32 and v_log_f32 are correctly rounded f32 (float64 evaluation, then RNE to f32);
  subnormal results are kept, not flushed.
- f32 -> fp8 conversions are RNE without saturation; f32 -> f16 and f32 -> bf16 are RNE.
- The lane-group sum of l is (l0 + l1) + (l2 + l3); the wave sum ((w0 + w1) + w2) + w3.
- NaN payloads and signs are not modelled: a NaN reaching out becomes bf16's one NaN pattern
  in the final conversion (torch writes every f32 NaN as the same bf16 bits), and lse is never
  NaN (-inf unless l > 0), so the path a NaN takes leaves every output bit as it is.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernel import fastpath
from kernel.backend import Backend
from kernel.contract import begin_call
from kernel.emulated import decode as emulated_decode
from kernel.emulated import pv as emulated_pv
from kernel.emulated import qk as emulated_qk
from kernel.emulated import scores as emulated_scores
from kernel.emulated import state as emulated_state
from kernel.fp8 import E4M3_NAN_CODE, E8M0_BIAS, E8M0_NAN, e4m3_table
from kernel.host_copy import to_device
from kernel.record import LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET, index_records, record_words

TILE = 128
P_SHIFT = 8.0
MASKED_SCORE = -1.0e30
M_FLOOR = -1.0e20
SCALE_CAP_BITS = 0x43000000  # f32 bits of 2^7
LO_FACTOR = 32.0
LO_E8M0_OFFSET = 5
MIN_HI_E8M0 = 5
LN2_F32 = float(torch.tensor(math.log(2.0), dtype=torch.float32))
DEFAULT_ROW_KEY_BUDGET = {"cpu": 1 << 16, "cuda": 1 << 19}  # key slots (rows x keys) per step: bounds memory
# Key slots per group of tiles run batched (_run_chunk_batched), at most the budget above. On a
# CPU small groups stay in cache and reuse the allocator's memory (larger tensors cost page
# faults and cache misses that outweigh the launches saved); on a GPU the launches dominate.
TILE_GROUP_SLOTS = {"cpu": 1 << 10, "cuda": 1 << 19}
# Whether a chunk whose groups hold one tile of its rows runs batched: on a GPU the batched
# stages' fewer bytes win; on a CPU (small groups, few launches to save) the loop.
BATCH_SINGLE_TILES = {"cpu": False, "cuda": True}


def f32(x: torch.Tensor) -> torch.Tensor:
    """Round to f32 (RNE)."""
    return x.to(torch.float32)


def add_f32(acc: torch.Tensor, term: torch.Tensor) -> torch.Tensor:
    """f32(acc + term) for f32 acc and f64 term: the sum formed in f64 (acc widened exactly) and
    rounded once (RNE), in one launch (the f32 output of a mixed-precision add)."""
    out = torch.empty(acc.shape, dtype=torch.float32, device=acc.device)
    return torch.add(acc, term, out=out)


def exp2_f32(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded f32 exp2 of f32 x."""
    return f32(torch.exp2(x.to(torch.float64)))


def log2_f32(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded f32 log2 of f32 x."""
    return f32(torch.log2(x.to(torch.float64)))


# ---------------------------------------------------------------------------------------------
# Stages. Each is a plain function; `Stages` bundles them so a variant kernel can swap one.


def read_q(q: torch.Tensor) -> torch.Tensor:
    """q [n_q, H, 576] bf16 (any row/head strides) -> f32 [n_q, H, 576] (exact widening)."""
    return q.to(torch.float32)


def load_row_ranges(indptr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(r_beg, r_len) per row, int64; a negative length counts as 0."""
    ptr = indptr.to(torch.int64)
    return ptr[:-1], (ptr[1:] - ptr[:-1]).clamp_min(0)


def bounded_read(indices: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """indices[positions] as int64, 0 where a position lies outside the index buffer."""
    if indices.numel() == 0:
        return torch.zeros_like(positions)
    clamped = positions.clamp(0, indices.numel() - 1)
    outside = clamped != positions
    return indices[clamped].to(torch.int64).masked_fill_(outside, 0)  # a fresh tensor either way


def tile_count(indices: torch.Tensor, r_beg: torch.Tensor, r_len: torch.Tensor, has_invalid: bool) -> torch.Tensor:
    """Tiles per row (int64): ceil(len / 128), or with has_invalid ceil(last_valid / 128) where
    last_valid is one past the last position p < len whose entry is >= 0."""
    if not has_invalid:
        return (r_len + TILE - 1) // TILE
    width = int(r_len.max()) if r_len.numel() else 0
    if width == 0:
        return torch.zeros_like(r_len)
    offsets = torch.arange(width, device=r_len.device)
    in_row = offsets < r_len.unsqueeze(1)
    entries = bounded_read(indices, r_beg.unsqueeze(1) + offsets)
    marks = (in_row & (entries >= 0)) * (offsets + 1)  # offset + 1 where valid, else 0
    last_valid = marks.amax(dim=1)
    return (last_valid + TILE - 1) // TILE


def load_slot_range(
    indices: torch.Tensor, r_beg: torch.Tensor, r_len: torch.Tensor, first_tile: int, n_tiles: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots, masked) [R, n_tiles * 128] for tiles first_tile .. first_tile + n_tiles - 1 of each
    row: KV row per position (0 where masked)."""
    positions = torch.arange(first_tile * TILE, (first_tile + n_tiles) * TILE, device=r_beg.device)
    entries = bounded_read(indices, r_beg.unsqueeze(1) + positions)  # a fresh tensor: filled in place below
    masked = (positions >= r_len.unsqueeze(1)) | (entries < 0)
    return entries.masked_fill_(masked, 0), masked


def load_slots(indices: torch.Tensor, r_beg: torch.Tensor, r_len: torch.Tensor, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots, masked) [R, 128] for tile `tile` of each row: KV row per position (0 where masked)."""
    return load_slot_range(indices, r_beg, r_len, tile, 1)


def gather_records(kv_rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Records uint8 [..., 656] of the slots from the flat [rows, 656] cache (64-bit offsets).

    A slot past the cache (a broken precondition) reads the last row here instead of faulting
    (a negative slot counts from the end, as in torch indexing);
    run_emulated checks every tile's slots once at the end of the call and raises IndexError
    (on every device, where the real kernel would read past the cache: on a GPU that keeps a
    device-side assert from poisoning the process), without a host sync per tile."""
    rows = kv_rows.shape[0]
    if rows:  # a negative slot counts from the end, as torch indexing does; then clamped to [0, rows - 1]:
        # the slot clamped to [-rows, rows - 1] modulo rows (a slot below -rows reads row 0, one past the cache the last)
        clamped = slots.clamp(-rows, rows - 1).remainder_(rows)
    else:
        clamped = torch.where(slots < 0, slots + rows, slots).clamp(0, rows - 1)
    return index_records(kv_rows, clamped.reshape(-1)).view(*slots.shape, RECORD_BYTES)


def check_slots(peak: torch.Tensor | None, kv_rows: int) -> None:
    """Raise IndexError when the largest slot any tile gathered (`peak`, a device scalar) lies
    past the cache's `kv_rows` rows (one host sync per call)."""
    if peak is not None and int(peak) >= kv_rows:
        raise IndexError(f"KV row {int(peak)} is outside the cache's {kv_rows} rows: the kernel would read past the cache")


@dataclass(frozen=True)
class QuantizedQ:
    """Q as the QK MFMAs see it.

    hi, lo: f64 [n_q, H, 512] e4m3 values (codes decoded); hi_e8m0, lo_e8m0: int64 [n_q, H, 4]
    E8M0 bytes per 128-dim block; rope: f64 [n_q, H, 64] bf16 values.
    """

    hi: torch.Tensor
    lo: torch.Tensor
    hi_e8m0: torch.Tensor
    lo_e8m0: torch.Tensor
    rope: torch.Tensor


def e4m3_codes(x: torch.Tensor) -> torch.Tensor:
    """encode_e4m3(x, saturate=False) of f32 x, the same code for every input, in fewer passes:
    torch's float8_e4m3fn cast (round to nearest even, subnormals included) where |x| <= 448,
    and where torch releases differ the rule itself: 448 < |x| <= 464 rounds to 448, larger
    magnitudes, infinities and NaN give the NaN code 0x7F, with the sign bit of x."""
    cast = x.to(torch.float8_e4m3fn).view(torch.uint8)  # keeps the sign bit, also of NaN and beyond 448
    magnitude = x.abs()
    beyond = (cast | E4M3_NAN_CODE).bitwise_xor_(magnitude <= 464.0)  # sign | 0x7E up to 464, else sign | 0x7F
    return torch.where(magnitude <= 448.0, cast, beyond)


def check_codes(device: torch.device, exhaustive: bool = False, chunk_log2: int = 26) -> list[tuple[str, bool]]:
    """The emulated kernel's fast conversions against their rules on `device`, one (line, passed)
    per check: e4m3_codes against kernel.fp8.encode_e4m3(saturate=False) on f32 bit patterns
    (exhaustive: all 2^32 in chunks of 2^chunk_log2; else 2^24 random ones); the f32 e4m3 table
    widened to f64 (quantize_q's hi) against the f64 table, bit for bit (NaN included); every f32
    NaN (signs, payloads) converted to bf16 giving one bit pattern (outputs do not depend on NaN
    payloads because of it)."""
    from kernel.fp8 import encode_e4m3

    def mismatches(bits: torch.Tensor) -> int:
        x = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
        return int((e4m3_codes(x) != encode_e4m3(x, saturate=False)).sum())

    if exhaustive:
        chunk = 1 << chunk_log2
        bad = sum(mismatches(torch.arange(start, start + chunk, dtype=torch.int64, device=device)) for start in range(0, 1 << 32, chunk))
        what = "all 2^32 f32 patterns"
    else:
        g = torch.Generator(device=device).manual_seed(29)
        bad = mismatches(torch.randint(0, 2**32, (1 << 24,), generator=g, dtype=torch.int64, device=device))
        what = "2^24 random f32 patterns"
    wide = e4m3_table(device, torch.float32).to(torch.float64).view(torch.int64)
    same_table = torch.equal(wide, e4m3_table(device, torch.float64).view(torch.int64))
    payloads = torch.arange(1, 1 << 23, 4093, dtype=torch.int64, device=device)
    nan_bits = torch.cat([payloads | 0x7F800000, payloads | 0xFF800000, torch.tensor([0x7FC00000, 0xFFC00000], device=device)])
    nans = torch.where(nan_bits >= 2**31, nan_bits - 2**32, nan_bits).to(torch.int32).view(torch.float32)
    patterns = torch.unique(nans.to(torch.bfloat16).view(torch.int16)).tolist()
    return [
        (f"e4m3_codes vs encode_e4m3 on {what} ({device}): {bad} differ", bad == 0),
        (f"f32 e4m3 table widened to f64 vs the f64 table ({device}): {'same bits' if same_table else 'DIFFERS'}", same_table),
        (
            f"bf16 of {nans.numel()} f32 NaNs ({device}): {'one pattern' if len(patterns) == 1 else 'several patterns'} "
            f"{[hex(v & 0xFFFF) for v in patterns[:4]]}",
            len(patterns) == 1,
        ),
    ]


def quantize_q(q32: torch.Tensor) -> QuantizedQ:
    """Per (row, head, 128-dim block) hi + lo fp8 quantisation with E8M0 scales (f32 arithmetic)."""
    n_q, heads, _ = q32.shape
    blocks = q32[..., :LATENT_DIM].reshape(n_q, heads, 4, 128)
    amax = blocks.abs().amax(dim=-1)
    s32 = ((amax.view(torch.int32) >> 23) & 0xFF).sub_(7).clamp_min_(MIN_HI_E8M0)  # E8M0 of amax's exponent field
    inv = ((254 - s32) << 23).view(torch.float32)  # 2^(127 - s)
    s = s32.to(torch.int64)
    x = blocks * inv.unsqueeze(-1)
    hi = e4m3_codes(x).view(torch.float8_e4m3fn).to(torch.float32)  # exact (a NaN's payload is not modelled)
    lo = e4m3_codes((x - hi) * LO_FACTOR).view(torch.float8_e4m3fn)
    return QuantizedQ(
        hi=hi.to(torch.float64).reshape(n_q, heads, LATENT_DIM),
        lo=lo.to(torch.float64).reshape(n_q, heads, LATENT_DIM),
        hi_e8m0=s,
        lo_e8m0=s - LO_E8M0_OFFSET,
        rope=q32[..., LATENT_DIM:].to(torch.float64),
    )


def _e8m0_factor(byte: torch.Tensor) -> torch.Tensor:
    """2^(b - 127) in f64 (from its bits: a normal number for every byte), NaN for 255; byte: any
    integer dtype holding 0..255."""
    if byte.dtype not in (torch.int32, torch.int64):  # the sum is formed in byte's dtype: one that holds 255 + 896
        byte = byte.to(torch.int64)
    biased = torch.add(byte, 1023 - E8M0_BIAS, out=torch.empty(byte.shape, dtype=torch.int64, device=byte.device))
    return biased.bitwise_left_shift_(52).view(torch.float64).masked_fill_(byte == E8M0_NAN, float("nan"))


def _f32_e8m0(x: torch.Tensor) -> torch.Tensor:
    """The exponent field of f32 values (their E8M0 byte), int32 (f32_exponent_field's values)."""
    return (x.contiguous().view(torch.int32) >> 23) & 0xFF


def decode_codes(codes: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Values of e4m3 codes in `dtype` (f64, or f16: exact either way; NaN for NaN codes, the
    table's NaN, whose f16 widens to the f64 table's bits), same shape (contiguous).

    A gather from the value table through 32-bit indices (index_select: the same entries as
    table[codes.long()], without the int64 index tensor)."""
    table = e4m3_table(codes.device, dtype)
    return table.index_select(0, codes.reshape(-1).to(torch.int32)).view(codes.shape)


def qk_scores(qq: QuantizedQ, rows: torch.Tensor, records: torch.Tensor) -> torch.Tensor:
    """f32 scores s [R, H, 128] of the tile's keys for query rows `rows` (unmasked; see online_softmax)."""
    r = records.shape[0]
    # codes as [R, block b, mfma j, 32, keys], permuted as bytes before decoding, decoded to f16
    # (exact) and widened to f64 by the scale's product below (one f64 tensor written, not two)
    k_codes = decode_codes(records[..., :SCALE_OFFSET].reshape(r, TILE, 4, 4, 32).permute(0, 2, 3, 4, 1).contiguous(), torch.float16)
    k_scale_bits = records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)  # [R, 128, 4]
    k_e8m0 = _f32_e8m0(k_scale_bits)
    k_rope = records[..., ROPE_OFFSET:].contiguous().view(torch.bfloat16).to(torch.float64)  # [R, 128, 64]
    heads = qq.hi.shape[1]
    acc = torch.zeros(r, heads, TILE, dtype=torch.float32, device=records.device)
    # Scales folded into the operands (powers of two: exact).
    k_view = k_codes * _e8m0_factor(k_e8m0).permute(0, 2, 1).reshape(r, 4, 1, 1, TILE)  # [R, b, j, 32, keys]
    # hi and lo of every head in one batched product: [R, b, j, 2H, 32] x [R, b, j, 32, keys]
    q_values = torch.cat((qq.hi[rows], qq.lo[rows]), dim=1).reshape(r, 2 * heads, 4, 128)
    e8m0 = torch.cat((qq.hi_e8m0[rows], qq.lo_e8m0[rows]), dim=1)  # [R, 2H, 4]
    q_scaled = (q_values * _e8m0_factor(e8m0).unsqueeze(-1)).reshape(r, 2 * heads, 4, 4, 32)
    dots = torch.matmul(q_scaled.permute(0, 2, 3, 1, 4), k_view)  # [R, b, j, 2H, keys], each exact
    # one MFMA j sums its 4 blocks; a fixed order keeps every device's f64 result identical
    scaled = ((dots[:, 0] + dots[:, 1]) + dots[:, 2]) + dots[:, 3]  # [R, j, 2H, keys]
    hi_terms, lo_terms = scaled[:, :, :heads], scaled[:, :, heads:]
    for j in range(4):
        acc = add_f32(acc, hi_terms[:, j])
        acc = add_f32(acc, lo_terms[:, j])
    rope_dots = torch.matmul(
        qq.rope[rows].reshape(r, heads, 2, 32).permute(0, 2, 1, 3),
        k_rope.reshape(r, TILE, 2, 32).permute(0, 2, 3, 1),
    )  # [R, 2, H, keys]
    for i in range(2):
        acc = add_f32(acc, rope_dots[:, i])
    return acc


@dataclass
class SoftmaxState:
    """Running state per (row, head): m f32 [R, H]; l_parts f32 [R, H, 4 waves, 4 lane groups];
    o f32 [R, H, 512]; buffer: None, or f32 [R, H, 512 + 16] whose views o and l_parts are
    (new_state)."""

    m: torch.Tensor
    l_parts: torch.Tensor
    o: torch.Tensor
    buffer: torch.Tensor | None = None


def new_state(rows: int, heads: int, device: torch.device) -> SoftmaxState:
    """The state before a row's first tile: m = -1e30, l = 0, o = 0; l_parts and o are views of
    one f32 [rows, H, 512 + 16] buffer (o first), so one multiply scales both."""
    buffer = torch.zeros(rows, heads, LATENT_DIM + 16, dtype=torch.float32, device=device)
    return SoftmaxState(
        m=torch.full((rows, heads), MASKED_SCORE, dtype=torch.float32, device=device),
        l_parts=buffer[..., LATENT_DIM:].view(rows, heads, 4, 4),
        o=buffer[..., :LATENT_DIM],
        buffer=buffer,
    )


def online_softmax(
    state: SoftmaxState, scores: torch.Tensor, masked: torch.Tensor, c_log2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Update m and l for one tile; return (P f32 [R, H, 128], alpha f32 [R, H]) for pv_accumulate.

    x = s * c_log2 (masked keys: -1e30), m_new = max(m_old, tile max), alpha = exp2(m_old - m_new),
    P = exp2(x - max(m_new - 8, -1e20)); each (wave w, lane group g) sums its 8 keys
    32w + 16s + 4g + r in (s, r) order and does l = l * alpha + psum.
    """
    x = tile_logits(scores, masked, c_log2)
    m_new = torch.maximum(state.m, tile_max(x))
    alpha = exp2_f32(state.m - m_new)
    p = tile_p(x, m_new)
    r, heads, _ = p.shape
    state.l_parts = state.l_parts * alpha.view(r, heads, 1, 1) + lane_sums(p)
    state.m = m_new
    return p, alpha


def tile_logits(scores: torch.Tensor, masked: torch.Tensor, c_log2: torch.Tensor) -> torch.Tensor:
    """x = s * c_log2 f32 [..., H, 128], masked keys (masked [..., 128]) at the f32 value of -1e30."""
    return (scores * c_log2).masked_fill_(masked.unsqueeze(-2), MASKED_SCORE)


def tile_max(x: torch.Tensor) -> torch.Tensor:
    """Max over a tile's keys f32 [..., H], NaN scores left out (never NaN: -1e30 at least)."""
    return x.masked_fill(torch.isnan(x), float("-inf")).amax(dim=-1)


def tile_p(x: torch.Tensor, m_new: torch.Tensor) -> torch.Tensor:
    """P = exp2(x - max(m_new - 8, -1e20)) f32 [..., H, 128] for m_new f32 [..., H]."""
    return exp2_f32(x - torch.clamp_min(m_new - P_SHIFT, M_FLOOR).unsqueeze(-1))


def lane_sums(p: torch.Tensor) -> torch.Tensor:
    """psum f32 [..., H, 4 waves, 4 lane groups] of P [..., H, 128]: (wave w, lane group g) sums
    its 8 keys 32w + 16s + 4g + r in (s, r) order, starting from 0."""
    lead = p.shape[:-1]
    lanes = p.reshape(*lead, 4, 2, 4, 4).transpose(-3, -2).reshape(*lead, 4, 4, 8)  # [.., w, g, (s, r)]
    psum = torch.zeros(*lead, 4, 4, dtype=torch.float32, device=p.device)
    for k in range(8):
        psum = psum + lanes[..., k]
    return psum


def scale_p(p: torch.Tensor, records: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """P' f16 [R, H, 128, 4 blocks] = fp16(P * scale_v[block]); scale_v from the scale's f32 bits
    clamped to [1, bits(2^7)] (a zero scale attends like a zero latent), 0 for masked keys."""
    bits = records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.int32)  # [R, 128, 4]
    scale_v = bits.clamp(1, SCALE_CAP_BITS).masked_fill_(masked.unsqueeze(-1), 0).view(torch.float32)
    return (p.unsqueeze(-1) * scale_v.unsqueeze(1)).to(torch.float16)


def pv_accumulate(
    o: torch.Tensor, alpha: torch.Tensor, p_scaled: torch.Tensor, records: torch.Tensor, masked: torch.Tensor
) -> torch.Tensor:
    """o = f32(o * alpha), then o += V^T P' by 4 f16 MFMAs (32 keys each) per 128-dim block.

    V codes of masked keys are zeroed, so a NaN row they fall back to cannot reach o."""
    terms = pv_block_terms(p_scaled, records, masked)
    r, heads = o.shape[:2]
    o = (o * alpha.unsqueeze(-1)).view(r, heads, 4, 128)
    for kk in range(4):
        o = add_f32(o, terms[:, kk])
    return o.view(r, heads, LATENT_DIM)


def pv_terms(p_scaled: torch.Tensor, records: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """The 4 f16 PV MFMAs' exact products f64 [R, kk, H, 512] of one tile (see pv_accumulate)."""
    r, heads = p_scaled.shape[:2]
    return pv_block_terms(p_scaled, records, masked).reshape(r, 4, heads, LATENT_DIM)


def pv_block_terms(p_scaled: torch.Tensor, records: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """pv_terms' products as f64 [R, kk, H, 4 blocks, 128] (a permuted view of the MFMAs' result:
    added to o viewed as [R, H, 4, 128] without a copy)."""
    r, heads, _, _ = p_scaled.shape
    codes = records[..., :SCALE_OFFSET].masked_fill(masked.unsqueeze(-1), 0)
    # key = 64 hf + 32 a + 16 b + 8 c + 4 sub + t  ->  [hf, sub] x 32 keys (permuted as bytes)
    v_codes = codes.reshape(r, 2, 2, 2, 2, 2, 4, 4, 128).permute(0, 1, 5, 7, 2, 3, 4, 6, 8).reshape(r, 4, 4, 32, 128)
    v_groups = decode_codes(v_codes)  # exact f16 values, [R, kk, block, 32 keys, 128 dims]
    p_groups = (
        p_scaled.to(torch.float64).reshape(r, heads, 2, 2, 2, 2, 2, 4, 4).permute(0, 1, 2, 6, 8, 3, 4, 5, 7).reshape(r, heads, 4, 4, 32)
    )  # [R, H, kk, b, 32]
    terms = torch.matmul(p_groups.permute(0, 2, 3, 1, 4), v_groups)  # [R, kk, b, H, 128]
    return terms.permute(0, 1, 3, 2, 4)


def finalize(state: SoftmaxState) -> tuple[torch.Tensor, torch.Tensor]:
    """(out bf16 [R, H, 512], lse f32 [R, H]): l over lane groups and waves, out = bf16(o * (1 / l)),
    lse = ((m + log2 l) - 8) * ln 2 (natural log), -inf and out 0 where l == 0."""
    parts = state.l_parts
    per_wave = (parts[..., 0] + parts[..., 1]) + (parts[..., 2] + parts[..., 3])
    l_tot = ((per_wave[..., 0] + per_wave[..., 1]) + per_wave[..., 2]) + per_wave[..., 3]
    no_l = (l_tot > 0).logical_not_()  # l == 0, or NaN
    l_safe = l_tot.masked_fill(no_l, 1.0)
    inv_l = (1.0 / l_safe).masked_fill_(no_l, 0.0)
    out = (state.o * inv_l.unsqueeze(-1)).to(torch.bfloat16)
    lse2 = (state.m + log2_f32(l_safe)) - P_SHIFT
    lse = (lse2 * LN2_F32).masked_fill_(no_l, float("-inf"))
    return out, lse


@dataclass(frozen=True)
class Stages:
    """The kernel's stages; a variant kernel replaces one (see dataclasses.replace)."""

    read_q: Callable[..., torch.Tensor] = read_q
    load_row_ranges: Callable[..., tuple[torch.Tensor, torch.Tensor]] = load_row_ranges
    tile_count: Callable[..., torch.Tensor] = tile_count
    load_slots: Callable[..., tuple[torch.Tensor, torch.Tensor]] = load_slots
    gather_records: Callable[..., torch.Tensor] = gather_records
    quantize_q: Callable[..., QuantizedQ] = quantize_q
    qk_scores: Callable[..., torch.Tensor] = qk_scores
    online_softmax: Callable[..., tuple[torch.Tensor, torch.Tensor]] = online_softmax
    scale_p: Callable[..., torch.Tensor] = scale_p
    pv_accumulate: Callable[..., torch.Tensor] = pv_accumulate
    finalize: Callable[..., tuple[torch.Tensor, torch.Tensor]] = finalize


DEFAULT_STAGES = Stages()


_TILE_STAGES = ("load_slots", "gather_records", "qk_scores", "online_softmax", "scale_p", "pv_accumulate")


def tiles_batchable(stages: Stages) -> bool:
    """True when the per-tile stages of `stages` are the default ones, which _run_chunk_batched
    runs over many tiles at once (a variant replacing one of them runs tile by tile)."""
    return all(getattr(stages, name) is getattr(DEFAULT_STAGES, name) for name in _TILE_STAGES)


def _live_counts(chunk_tiles: list[int], first: int, last: int) -> list[int]:
    """For each tile t in first..last - 1: how many rows of the chunk (tile counts sorted
    descending) have more than t tiles (they form a prefix)."""
    ascending = chunk_tiles[::-1]
    return [len(chunk_tiles) - bisect.bisect_right(ascending, t) for t in range(first, last)]


@dataclass(frozen=True)
class ChunkQ:
    """The batched path's Q operands for one chunk's rows (in the chunk's order), built once per
    chunk so that a group of tiles slices them instead of gathering Q per (row, tile).

    latent: f64 [rows, 16 (b, j), 2H, 32]: hi (heads 0..H-1) and lo (H..2H-1) e4m3 values of
    dims 128b + 32j .. + 31 times their block's E8M0 factor (exact: powers of two); rope: f64
    [rows, H, 64] bf16 values."""

    latent: torch.Tensor
    rope: torch.Tensor


def chunk_q(qq: QuantizedQ, rows: torch.Tensor) -> ChunkQ:
    """ChunkQ of `rows` (the chunk's query rows, in order)."""
    n, heads = rows.numel(), qq.hi.shape[1]
    if n == qq.hi.shape[0]:  # the call's every row (one chunk): hi and lo side by side, then gathered once
        values = torch.cat((qq.hi, qq.lo), dim=1)[rows].view(n, 2 * heads, 4, 128)
        e8m0 = torch.cat((qq.hi_e8m0, qq.lo_e8m0), dim=1)[rows]
    else:  # a chunk of the rows: gathered first
        values = torch.cat((qq.hi[rows], qq.lo[rows]), dim=1).view(n, 2 * heads, 4, 128)
        e8m0 = torch.cat((qq.hi_e8m0[rows], qq.lo_e8m0[rows]), dim=1)
    factor = _e8m0_factor(e8m0)  # [n, 2H, 4]
    latent = torch.empty(n, 4, 4, 2 * heads, 32, dtype=torch.float64, device=rows.device)
    torch.mul(values.view(n, 2 * heads, 4, 4, 32).permute(0, 2, 3, 1, 4), factor.permute(0, 2, 1)[:, :, None, :, None], out=latent)
    return ChunkQ(latent=latent.view(n, 16, 2 * heads, 32), rope=qq.rope[rows])


def group_scores(cq: ChunkQ, live0: int, group: int, records: torch.Tensor, decode_kernel: bool = False) -> torch.Tensor:
    """qk_scores of a group of tiles: f32 [live0 rows, H, group * 128 keys] for the chunk's first
    live0 rows and their records uint8 [live0 * group, 128, 656] (a masked key's score is
    replaced later). Where the fast path emulated.qk gives a kernel (CUDA, its probe passed)
    it forms them from the records; else group_scores_torch (decode_kernel: K by
    emulated_decode's kernel) - the same bits."""
    latent, rope = cq.latent[:live0], cq.rope[:live0]
    if fastpath.choose(emulated_qk.FAST_PATH, records.device) is None:
        return group_scores_torch(latent, rope, records, live0, group, decode_kernel)
    return emulated_qk.scores(latent, rope, records, live0, group, group_scores_torch)


def group_scores_torch(
    latent: torch.Tensor, rope: torch.Tensor, records: torch.Tensor, live0: int, group: int, decode_kernel: bool = False
) -> torch.Tensor:
    """group_scores by torch operations, from ChunkQ's latent and rope of the group's live0 rows.

    The same f64 values and f32 roundings as qk_scores: each (b, j) MFMA's 32-term dot is exact
    (e4m3 x e4m3 products, one block scale per term), so the dots are formed per row over all its
    tiles' keys (Q not repeated per tile) on the unscaled keys and the key's block factor (a
    power of two) multiplies the exact dot; the 4 blocks are then summed in the fixed order
    ((b0 + b1) + b2) + b3 as there, and the rope MFMAs keep qk_scores' operands and shapes."""
    n_keys = group * TILE
    heads = rope.shape[1]
    lat = records.view(live0, n_keys, RECORD_BYTES)
    k_lat = emulated_decode.keys(records, live0, n_keys, decode_kernel)  # [live0, (b, j), keys, 32]
    dots = torch.matmul(latent, k_lat.transpose(-1, -2))  # [live0, (b, j), 2H, keys]
    k_factor = _e8m0_factor(_f32_e8m0(lat[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)))  # [live0, keys, 4]
    r = live0 * group
    k_rope = torch.empty(r, 2, 32, TILE, dtype=torch.float64, device=records.device)
    k_rope.copy_(records[..., ROPE_OFFSET:].view(torch.bfloat16).view(r, TILE, 2, 32).permute(0, 2, 3, 1))
    q_rope = rope if group == 1 else rope[:, None].expand(live0, group, heads, 64).reshape(r, heads, 64)
    rope_dots = torch.matmul(q_rope.view(r, heads, 2, 32).permute(0, 2, 1, 3), k_rope)  # [R, 2, H, keys]
    return emulated_scores.accumulate(dots, k_factor, rope_dots)


def group_pv_terms(p: torch.Tensor, records: torch.Tensor, masked: torch.Tensor, decode_kernel: bool = False) -> torch.Tensor:
    """pv_block_terms of a group: scale_p and the PV MFMAs' products f64 [R, kk, b, H, 128] for
    P f32 [R, H, 128] (any strides), records [R, 128, 656] (masked keys' bytes zeroed unless
    decode_kernel: V by emulated_decode's kernel, which writes their V as 0), masked
    [R, 128]. P' is written once, as the MFMAs' f64 operand [R, kk, b, H, 32] (f32 product
    rounded to f16 on store, then widened), and V decoded in its MFMA order: the same operands
    as pv_block_terms' product, one batched matmul of the same shapes."""
    r, heads = p.shape[0], p.shape[1]
    bits = records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.int32)  # [R, 128, 4]
    scale_v = bits.clamp(1, SCALE_CAP_BITS).masked_fill_(masked.unsqueeze(-1), 0).view(torch.float32)
    # key = 64 hf + 32 a + 16 b' + 8 c + 4 sub + t; operand [R, (hf, sub), block, H, (a, b', c, t)]
    p_keys = p.reshape(r, heads, 2, 2, 2, 2, 2, 4).permute(0, 2, 6, 1, 3, 4, 5, 7).unsqueeze(3)
    s_keys = scale_v.view(r, 2, 2, 2, 2, 2, 4, 4).permute(0, 1, 5, 7, 2, 3, 4, 6).unsqueeze(4)
    p16 = torch.empty(r, 2, 2, 4, heads, 2, 2, 2, 4, dtype=torch.float16, device=p.device)
    torch.mul(p_keys, s_keys, out=p16)  # f32 product, RNE to f16 (scale_p)
    v_groups = emulated_decode.values(records, masked, decode_kernel)  # [R * (kk, b), 32 keys, 128]
    return torch.bmm(p16.to(torch.float64).view(r * 16, heads, 32), v_groups).view(r, 4, 4, heads, 128)


def _run_chunk_batched(
    state: SoftmaxState,
    rows: torch.Tensor,
    row_tiles: torch.Tensor,
    chunk_tiles: list[int],
    qq: QuantizedQ,
    indices: torch.Tensor,
    r_beg: torch.Tensor,
    r_len: torch.Tensor,
    kv_rows: torch.Tensor,
    c_log2: torch.Tensor,
    budget: int,
    peak: torch.Tensor | None,
) -> torch.Tensor | None:
    """All tiles of one chunk of rows (sorted by tile count, descending) into `state`, in groups
    of tiles whose key slots fit `budget`; returns the updated peak slot (check_slots).
    row_tiles: the rows' tile counts on the device, chunk_tiles the same on the host. No host
    sync.

    The per-tile loop of run_emulated, reorganised: within a group, everything that does not
    carry state from tile to tile (slots, records, QK scores, x, tile max, P, P', the PV MFMA
    products) is computed for all the group's tiles in one pass of each stage, on the rows live
    at the group's first tile; what carries state is done tile by tile on the rows live at that
    tile, with the same f32 operations: m = max(m, tile max) (a running max over the group's
    tiles: a tile past a row's count is masked here, its tile max is -1e30 and m >= -1e30 is
    never NaN, so m keeps its value), l = l * alpha + psum, o = f32(o * alpha) then the 4 rounded
    MFMA adds. alpha = exp2(m_old - m_new) and P then use each tile's m exactly as the loop does.
    A masked key's record bytes are zeroed after the gather: its score is replaced by -1e30 and
    its P' and V are zero in the loop too."""
    heads = state.m.shape[1]
    device = state.m.device
    if state.buffer is None:
        raise ValueError("the batched tiles need new_state's state (o and l_parts in one buffer)")
    total = chunk_tiles[0] if chunk_tiles else 0
    cq = chunk_q(qq, rows) if total else None
    first = 0
    while first < total:
        assert cq is not None
        live0 = _live_counts(chunk_tiles, first, first + 1)[0]
        group = min(total - first, max(1, budget // (live0 * TILE)))  # budget: min(row_key_budget, TILE_GROUP_SLOTS)
        grows = rows[:live0]
        slots, masked = load_slot_range(indices, r_beg[grows], r_len[grows], first, group)
        if chunk_tiles[live0 - 1] < first + group:  # some row ends inside the group: mask its tiles past its count
            tile_of = first + torch.arange(group * TILE, device=device) // TILE
            past = tile_of >= row_tiles[:live0].unsqueeze(1)
            masked = masked | past
            slots = slots.masked_fill_(past, 0)  # load_slot_range's fresh tensor
        top = slots.max()
        peak = top if peak is None else torch.maximum(peak, top)
        records = gather_records(kv_rows, slots).view(live0 * group, TILE, RECORD_BYTES)
        masked = masked.view(live0 * group, TILE)
        decode_kernel = fastpath.choose(emulated_decode.FAST_PATH, device) is not None
        if not decode_kernel:  # the torch decode reads masked keys' V from zeroed bytes (the kernel writes 0 itself)
            record_words(records).masked_fill_(masked.view(live0 * group, TILE, 1), 0)
        scores = group_scores(cq, live0, group, records, decode_kernel)  # [row, H, (tile, key)]
        x = tile_logits(scores.view(live0, heads, group, TILE).transpose(1, 2), masked.view(live0, group, TILE), c_log2)
        m_hist = torch.cat((state.m[:live0].unsqueeze(1), tile_max(x)), dim=1).cummax(dim=1).values  # [row, 1 + tile, H]
        alpha = exp2_f32(m_hist[:, :group] - m_hist[:, 1:])  # [row, tile, H]
        p = tile_p(x, m_hist[:, 1:])  # [row, tile, H, 128]
        counts = [min(group, c - first) for c in chunk_tiles[:live0]]  # the rows' tiles in this group
        pv = fastpath.choose(emulated_pv.FAST_PATH, device) is not None  # P', the PV products, o and l in one kernel
        kernel = pv or fastpath.choose(emulated_state.FAST_PATH, device) is not None
        counts_dev = (row_tiles[:live0] - first).clamp_(0, group).to(torch.int32) if kernel else None
        if not (pv and counts_dev is not None and emulated_pv.advance(state.buffer[:live0], alpha, p, records, masked, counts_dev)):
            terms = group_pv_terms(p.reshape(live0 * group, heads, TILE), records, masked, decode_kernel)  # [(row, tile), kk, b, H, 128]
            emulated_state.advance(state.buffer[:live0], alpha, p, terms, counts, counts_dev, lane_sums)
        state.m[:live0] = m_hist[:, group]
        first += group
    return peak


def run_emulated(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    stages: Stages = DEFAULT_STAGES,
    row_key_budget: int | None = None,
    batch_tiles: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The emulated gfx950 kernel with the contract's signature (stages swappable).

    row_key_budget: key slots (rows x keys) per step, bounding memory (default
    DEFAULT_ROW_KEY_BUDGET for the device). batch_tiles: run a step's tiles batched
    (_run_chunk_batched: the same operations on the same values, a few launches per tile instead
    of one pass of every stage per tile); None = whenever the per-tile stages are the default
    ones (tiles_batchable) and, on a CPU, a group of TILE_GROUP_SLOTS holds 2 tiles of the
    chunk's rows (BATCH_SINGLE_TILES: on a GPU also groups of one tile, whose batched stages move
    fewer bytes than the loop's), False = the per-tile loop (the definition both paths must
    match bit for bit)."""
    info, empty = begin_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    if empty is not None:
        return empty
    n_q, heads = info.n_q, info.heads
    device = q.device
    result = out if out is not None else torch.empty(n_q, heads, LATENT_DIM, dtype=torch.bfloat16, device=device)
    lse = torch.empty(n_q, heads, dtype=torch.float32, device=device) if return_lse else None
    kv_rows = kv_cache.reshape(-1, RECORD_BYTES)
    c_log2 = to_device(float(softmax_scale) * math.log2(math.e), dtype=torch.float32, device=device)
    r_beg, r_len = stages.load_row_ranges(indptr)
    n_tiles = stages.tile_count(indices, r_beg, r_len, has_invalid)
    order = torch.argsort(n_tiles, descending=True, stable=True)  # long rows first
    sorted_tiles = n_tiles[order]
    # tiles per row, longest first: the rows still iterating at any tile are a prefix (the
    # call's one host sync before its arithmetic, read before Q's stages are queued)
    all_tiles = sorted_tiles.tolist()
    q32 = stages.read_q(q)
    qq = stages.quantize_q(q32)
    budget = row_key_budget or DEFAULT_ROW_KEY_BUDGET.get(device.type, DEFAULT_ROW_KEY_BUDGET["cpu"])
    chunk_rows = max(1, budget // TILE)
    peak: torch.Tensor | None = None  # largest slot gathered (check_slots)
    for begin in range(0, n_q, chunk_rows):
        rows = order[begin : begin + chunk_rows]
        row_tiles = sorted_tiles[begin : begin + chunk_rows]
        chunk_tiles = all_tiles[begin : begin + chunk_rows]
        state = new_state(rows.numel(), heads, device)
        group_slots = min(budget, TILE_GROUP_SLOTS.get(device.type, TILE_GROUP_SLOTS["cpu"]))
        # by default a chunk runs batched where groups hold at least 2 tiles of its rows, or
        # on a GPU always (BATCH_SINGLE_TILES)
        single = BATCH_SINGLE_TILES.get(device.type, BATCH_SINGLE_TILES["cuda"])
        batched = tiles_batchable(stages) and (single or group_slots >= 2 * TILE * len(chunk_tiles))
        if batch_tiles if batch_tiles is not None else batched:
            peak = _run_chunk_batched(state, rows, row_tiles, chunk_tiles, qq, indices, r_beg, r_len, kv_rows, c_log2, group_slots, peak)
            chunk_tiles = []  # done: the per-tile loop below runs no tile
        live = len(chunk_tiles)
        for tile in range(chunk_tiles[0] if chunk_tiles else 0):
            while chunk_tiles[live - 1] <= tile:
                live -= 1
            live_rows = rows[:live]
            slots, masked = stages.load_slots(indices, r_beg[live_rows], r_len[live_rows], tile)
            if slots.numel():
                top = slots.max()
                peak = top if peak is None else torch.maximum(peak, top)
            records = stages.gather_records(kv_rows, slots)
            scores = stages.qk_scores(qq, live_rows, records)
            sub = SoftmaxState(m=state.m[:live], l_parts=state.l_parts[:live], o=state.o[:live])
            p, alpha = stages.online_softmax(sub, scores, masked, c_log2)
            p_scaled = stages.scale_p(p, records, masked)
            sub.o = stages.pv_accumulate(sub.o, alpha, p_scaled, records, masked)
            state.m[:live], state.l_parts[:live], state.o[:live] = sub.m, sub.l_parts, sub.o
        chunk_out, chunk_lse = stages.finalize(state)
        result[rows] = chunk_out
        if lse is not None:
            lse[rows] = chunk_lse
    check_slots(peak, kv_rows.shape[0])
    return result, lse


def emulated_backend(stages: Stages = DEFAULT_STAGES, name: str = "emulated") -> Backend:
    """The emulated kernel as a registry Backend (profile gfx950; CPU and CUDA/ROCm devices)."""

    def kernel(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
        return run_emulated(
            q,
            kv_cache,
            indices,
            indptr,
            softmax_scale,
            has_invalid=has_invalid,
            return_lse=return_lse,
            out=out,
            stages=stages,
        )

    return Backend(
        name=name,
        fn=kernel,
        profile="gfx950",
        devices=("cpu", "cuda"),
        accepts_out=True,
        bounded_index_reads=True,
        limits=(
            "H in 1..16",
            "an out-of-range consumed index raises IndexError instead of reading memory",
        ),
    )


def with_stage(name: str, **replacements: Callable[..., object]) -> Backend:
    """An emulated-kernel variant with some stages replaced (used for broken-kernel catalogues)."""
    return emulated_backend(dataclasses.replace(DEFAULT_STAGES, **replacements), name=name)


# The fast paths whose self-checks compare with this module's torch functions (kernel.fastpath).
fastpath.register(
    fastpath.FastPath(
        emulated_state.FAST_PATH, ("triton",), lambda device, variant: emulated_state.self_check(device, lane_sums), emulated_state.eligible
    )
)
fastpath.register(
    fastpath.FastPath(
        emulated_pv.FAST_PATH,
        ("cuda",),
        lambda device, variant: emulated_pv.self_check(device, group_pv_terms, lane_sums, variant),
        emulated_pv.eligible,
        opt_in=emulated_pv.TRITON_VARIANTS,
        needs=(emulated_state.FAST_PATH,),
    )
)
fastpath.register(
    fastpath.FastPath(
        emulated_qk.FAST_PATH,
        ("cuda",),
        lambda device, variant: emulated_qk.self_check(device, group_scores_torch, variant),
        emulated_qk.eligible,
        opt_in=emulated_qk.TRITON_VARIANTS,
    )
)
