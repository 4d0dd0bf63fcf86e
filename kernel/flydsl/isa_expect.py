"""Instruction counts the FlyDSL gfx950 kernel's ISA must show, derived from its algorithm.

Every number here is a product of the algorithm's loop trip counts (kernel/flydsl/gfx950.py
module docstring and docs/reference/flydsl-checks.md, "Expected ISA counts"), never read off a compiled kernel:
one wave of the 4-wave workgroup, per 128-token tile (one iteration of the tile loop, on every
path through it) and per kernel (static count over the whole code). `expected_counts` is what
isa_checks.check_counts compares with the dump.

Per tile (wave w, lane (t, g)):
- QK: 2 subtiles s x 4 MFMAs j x (hi, lo) scaled fp8 MFMAs = 16; rope 2 s x 2 halves bf16 = 4;
  K operand reads 2 s x 4 j x 2 parts ds_read_b128 = 16; record-scale words 2 s ds_read_b32.
- softmax: tile-max write 1 ds_write_b32, barrier, read 1 ds_read_b128 (4 waves' maxima);
  v_exp_f32: alpha 1 + 8 P values (2 s x 4 r) = 9; P rows 2 s ds_write_b128; barrier.
- PV: 4 K-chunks kc x 8 output chunks ch: 32 ds_read_b64_tr_b8, 32 f16 MFMAs, 32 x 8 codes / 2
  = 128 v_cvt_scalef32_pk_f16_fp8; per kc 2 ds_read_b128 of P and 2 of block w's scales (16),
  8 P' values / 2 = 4 v_cvt_pk_f16_f32 (16).
- refill (every tile; after the last one it copies the zero record): block w of 2 halves x 8
  chunks = 16 global_load_lds_dwordx4, 2 halves x 1 scale word = 2 global_load_lds_dword, 2
  record addresses (v_mad_u64_u32 by 656).
- next tile: rope 2 s x 2 halves global_load_dwordx4 (2 record addresses), mask entries 2 s x 4 r
  ds_bpermute_b32; tile t + 2's index words: 2 DMA + 2 rope rows buffer_load_dword.
- barriers: loop top + tile max + P = 3 (with or without has_invalid).

Per kernel: the tile loop once, plus
- quantize_q: Q 4 j x 2 parts x 2 halves + rope 2 = 18 global_load_dwordx4; 4 j x 2 parts x 4
  words x (hi, lo) x 2 pairs = 128 v_cvt_pk_fp8_f32; hi decoded 4 x 2 x 4 words x 2 pairs = 64
  v_cvt_pk_f32_fp8; amax lane exchange 2 parts + E8M0 lanes 2 = 4 ds_bpermute_b32.
- prologue: tile 0's DMA 16 + 2 and 2 record addresses, its rope 4 loads and 2 addresses, its
  masks 8 ds_bpermute_b32; tiles 0 and 1's index words 2 x 4 buffer_load_dword.
- has_invalid scan: one loop of 4 buffer_load_dwordx4 a step, 6 ds_bpermute_b32 (lane max over
  xor 1..32), 1 ds_write_b32 + barrier + 1 ds_read_b128 (wave max).
- finalize: 2 ds_bpermute_b32 (lane-group sum), 1 ds_write_b32, barrier, 1 ds_read_b128, one
  division (1 v_rcp_f32), 8 chunks x 4 values / 2 = 16 v_cvt_pk_bf16_f32, 8 global_store_dwordx2;
  with return_lse 1 v_log_f32 and 1 global_store_dword, without them none.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------- the algorithm's trip counts
SUBTILES = 2  # 16-token QK subtiles per wave (32 tokens)
QK_MFMAS = 4  # 16x16x128 MFMAs per subtile (dims 32j..32j+31 of the 4 blocks)
QK_PARTS = 2  # 16-byte halves of a 32-byte fp8 operand
ROPE_HALVES = 2  # 16x16x32 bf16 MFMAs per subtile (64 rope dims)
K_CHUNKS = 4  # PV K-chunks of 32 tokens
OUT_CHUNKS = 8  # PV output chunks of 16 dims (128 dims of block w)
SCORES_PER_LANE = SUBTILES * 4  # accumulator registers r = 0..3 per subtile
DMA_HALVES = 2
DMA_CHUNKS = 8  # 16-byte chunks of a 128-byte record block
Q_LOADS = QK_MFMAS * QK_PARTS * 2 + 2  # 16-byte Q loads: 2 per 32 dims + 2 rope
Q_WORDS = QK_MFMAS * QK_PARTS * 4  # i32 words of e4m3 codes per operand set (hi or lo)
WAVES = 4


@dataclass(frozen=True)
class Expected:
    """Expected counts: `tile[m]` on every path through one tile-loop iteration (a set of allowed
    values), `kernel[m]` over the whole code. Keys are full
    mnemonics, or a prefix ending in '*' (every mnemonic starting with it)."""

    tile: dict[str, frozenset[int]]
    kernel: dict[str, int]
    record_mads: int  # v_mad_u64_u32 by 656 in the kernel
    record_mads_tile: frozenset[int]
    masked_selects_tile: int  # x = masked ? -1e30 : s * c_log2, per tile


def expected_counts(heads: int, has_invalid: bool, return_lse: bool) -> Expected:
    """The counts of one configuration (`heads` changes none of them: heads >= H are lanes
    whose stores are masked, not fewer instructions)."""
    del heads
    hi, rl = int(bool(has_invalid)), int(bool(return_lse))
    scaled = SUBTILES * QK_MFMAS * 2
    bf16 = SUBTILES * ROPE_HALVES
    f16 = K_CHUNKS * OUT_CHUNKS
    tr8 = f16
    cvt_v = tr8 * 8 // 2
    exps = 1 + SCORES_PER_LANE
    k_reads = SUBTILES * QK_MFMAS * QK_PARTS
    side_reads = K_CHUNKS * 2 * 2  # P and scales, 2 x 16 bytes per kc
    dmax4 = DMA_HALVES * DMA_CHUNKS
    dma1 = DMA_HALVES
    rope_loads = SUBTILES * ROPE_HALVES
    idx_words = DMA_HALVES + SUBTILES
    masks = SUBTILES * 4
    barriers_tile = 3
    tile = {
        "v_mfma_scale_f32_16x16x128_f8f6f4": {scaled},
        "v_mfma_f32_16x16x32_bf16": {bf16},
        "v_mfma_f32_16x16x32_f16": {f16},
        "ds_read_b64_tr_b8": {tr8},
        "v_cvt_scalef32_pk_f16_fp8": {cvt_v},
        "v_cvt_pk_f16_f32": {K_CHUNKS * 8 // 2},
        "ds_read_b128": {k_reads + side_reads + 1},
        "ds_read_b32": {SUBTILES},
        "ds_write_b128": {SUBTILES},
        "ds_write_b32": {1},
        "ds_bpermute_b32": {masks},
        "v_exp_f32*": {exps},
        "v_log_f32*": {0},
        "global_load_lds_dwordx4": {dmax4},
        "global_load_lds_dword": {dma1},
        "global_load_dwordx4": {rope_loads},
        "buffer_load_dword": {idx_words},
        "buffer_load_dwordx4": {0},
        "s_barrier": {barriers_tile},
        "global_store*": {0},
        "v_cvt_pk_fp8_f32": {0},
        "v_rcp_f32*": {0},
    }
    kernel = {
        "v_mfma_scale_f32_16x16x128_f8f6f4": scaled,
        "v_mfma_f32_16x16x32_bf16": bf16,
        "v_mfma_f32_16x16x32_f16": f16,
        "ds_read_b64_tr_b8": tr8,
        "v_cvt_scalef32_pk_f16_fp8": cvt_v,
        "v_cvt_pk_fp8_f32": Q_WORDS * 2 * 2,
        "v_cvt_pk_f32_fp8*": Q_WORDS * 2,
        "v_exp_f32*": exps,
        "v_log_f32*": rl,
        "v_rcp_f32*": 1,
        "v_div_fixup_f32": 1,
        "global_load_lds_dwordx4": 2 * dmax4,
        "global_load_lds_dword": 2 * dma1,
        "global_load_dwordx4": Q_LOADS + 2 * rope_loads,
        "buffer_load_dword": 3 * idx_words,
        "buffer_load_dwordx4": 4 * hi,
        "ds_bpermute_b32": 4 + 2 * masks + 2 + 6 * hi,
        "ds_read_b128": k_reads + side_reads + 1 + 1 + hi,
        "ds_read_b32": SUBTILES,
        "ds_write_b32": 1 + 1 + hi,
        "ds_write_b128": SUBTILES,
        "s_barrier": barriers_tile + 1 + hi,
        "v_cvt_pk_bf16_f32": OUT_CHUNKS * 4 // 2,
        "global_store_dwordx2": OUT_CHUNKS,
        "global_store_dword": rl,
    }
    return Expected(
        tile={k: frozenset(v) for k, v in tile.items()},
        kernel=kernel,
        record_mads=2 * (DMA_HALVES + SUBTILES),
        record_mads_tile=frozenset({DMA_HALVES + SUBTILES}),
        masked_selects_tile=SCORES_PER_LANE,
    )


def expected_lds_bytes() -> int:
    """LDS bytes of the layout (gfx950.py's layout section): latent tile 4 blocks x 16 KiB, scale
    rows 4 x 576, P rows 16 heads x 528, exchange slots 16 heads x 4 waves x 4 B, scan 4 x 4 B."""
    return 4 * 16384 + 4 * (128 * 4 + 64) + 16 * (128 * 4 + 16) + 16 * WAVES * 4 + WAVES * 4


def expected_tr8_offsets() -> list[int]:
    """Immediate offsets of the 32 ds_read_b64_tr_b8 of a tile in issue order (kc, ch): the
    per-lane base of sub = kc & 1 plus hf * 8192 (half) + ch * 1024 (chunk window)."""
    return [(kc >> 1) * 8192 + ch * 1024 for kc in range(K_CHUNKS) for ch in range(OUT_CHUNKS)]


def expected_tr8_bases() -> list[int]:
    """Which of the two per-lane base registers (0: sub 0, 1: sub 1) each tr8 read uses, in
    issue order."""
    return [kc & 1 for kc in range(K_CHUNKS) for _ in range(OUT_CHUNKS)]
