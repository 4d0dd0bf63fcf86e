"""FlyDSL sparse MLA forward kernel for gfx950 (MI355X) over fp8_ds_mla records.

The kernel is written in three modules, one job each: kernel/flydsl/layout.py (record
and launch geometry, LDS layout, lane mapping, index semantics: pure integer arithmetic shared
with the lane-level models), kernel/flydsl/mlir_layer.py (the generic IR layer: `V`,
memory, control flow, conversions) and this file (the algorithm, its numerics constants and
the launcher). flydsl (0.4.x) is imported on the first build, so all three import without it.
`build_launcher(heads, has_invalid, return_lse)` returns the `@flyc.jit` launcher of one
configuration; the host wrapper (kernel/flydsl/host.py) calls it with raw device addresses.

Algorithm (one 4-wave workgroup of 256 threads per query row, rows issued in reverse order so
the long causal tail starts first; 128-token tiles over indices[indptr[q] : indptr[q + 1]]):

    tile_count      nt = ceil(len / 128); with has_invalid, a scan of the row (split over the
                    4 waves) finds the last entry >= 0 and nt = ceil(last_valid / 128).
    load_slots      position p of a row reads index-buffer entry indptr[q] + p, and 0 (KV row
                    0, a valid key) where that lies outside the buffer (below it: a negative
                    indptr start; past it), as emulated's bounded reads; the reads go through a
                    buffer descriptor based at the row start clamped into the index buffer and
                    sized to the rest of it. A position is masked when it is >= len or its
                    entry is < 0 (with or without has_invalid). A masked position's loads read
                    the host's zero record (656 zero bytes) instead of a cache row.
    quantize_q      Q per (head, 128-dim block): E8M0 byte s = max(exp_field(amax) - 7, 5),
                    hi = e4m3(RNE(q * 2^(127-s))), lo = e4m3(RNE((q * 2^(127-s) - hi) * 32))
                    with E8M0 s - 5 (always >= 0).
    qk_scores       v_mfma_scale_f32_16x16x128_f8f6f4: MFMA j (0..3) covers dims 32j..32j+31 of
                    every record block (E8M0 scale group kb = record block kb): A = 16 tokens'
                    raw e4m3 codes from LDS with the record scale's exponent field as E8M0,
                    B = Q hi, then the same with Q lo; then the rope part as two bf16 16x16x32
                    MFMAs, all into one f32 accumulator.
    online_softmax  x = s * c_log2 (masked: -1e30); tile max per head over the 4 waves through
                    LDS; m_new = max(m, tile max) (m starts at -1e30); alpha = exp2(m - m_new);
                    P = exp2(x - max(m_new - 8, -1e20)); l = l * alpha + sum(P); o *= alpha.
    scale_p         P' = fp16(P * scale_v), scale_v = the record's f32 scale of the wave's
                    128-dim block with its bits clamped to [1, bits(2^7)] (smallest positive
                    float .. 2^7; a zero-scale record attends like a zero latent).
    pv_accumulate   V raw e4m3 in LDS read transposed (ds_read_b64_tr_b8), exact e4m3 -> f16
                    (v_cvt_scalef32_pk_f16_fp8, scale 1), v_mfma_f32_16x16x32_f16 into f32;
                    K-chunk kc = 2hf + sub holds the tile keys with bit 6 = hf, bit 2 = sub.
    finalize        l summed (g0 + g1) + (g2 + g3) over lane groups, then ((w0 + w1) + w2) + w3
                    over waves; out = bf16(o * (1 / l)) (0 for an empty row);
                    lse = ((m + log2 l) - 8) * ln 2 (-inf for an empty row), when asked.

These are the groupings and formulas kernel/emulated/gfx950.py documents, so the two are meant to
differ only by what the emulator cannot know (MFMA internal rounding, v_exp/v_log ulps).

Work split: wave w computes the scores of tokens [32w, 32w + 32) of the tile for every head,
and in PV owns output dims [128w, 128w + 128), which is exactly record scale block w. The
latent tile is filled by global_load_lds_dwordx4 DMA from 64-bit row addresses (the cache may
exceed 4 GiB): wave w fills block w (and block w's scale words, global_load_lds_dword) for all
128 tokens. Memory pipeline per tile t (kernel/flydsl/pipeline_model.py models it):
loop top vmcnt(0) + barrier; tile t + 2's index words issued; QK; tile t + 1's rope loads
and mask entries issued (their index words arrived a tile ago); softmax; PV, whose reads of
block w are all issued by its halfway point, where the refill DMA of tile t + 1 goes out under
the second half's 16 MFMAs (every tile: after the last one it copies the zero record). In the
LDS tile, token x of a half sits in slot x ^ ((x >> 2) & 4), so the PV transposed reads are
bank-conflict free (64 cycles per tile under a 64-bank model instead of 128).

Deliberate differences from the seed kernel: (1) a masked position contributes exactly zero
whatever the cache holds (its loads read the zero record, and its score is -1e30 before the
max); (2) the Q hi E8M0 is clamped at 5 so the lo E8M0 never leaves the E8M0 range.

Hardware facts this code relies on (from LLVM/AMD documentation; never executed here):
- MFMA 16x16 operand layouts (wave64, lane l, t = l % 16, g = l // 16): A[m = t][k], B[k][n = t],
  D[m = 4g + r][n = t] in register r. 16x16x32 f16/bf16: k = 8g + j in element j.
  16x16x128 f8: byte j < 16 of the 32-byte operand is k = 16g + j, byte 16 + j is k = 64 + 16g + j;
  the scale of row/column t for k-block kb (32 wide) comes from lane t + 16kb, byte `opsel`.
- ds_read_b64_tr_b8 per 16-lane group: lane 2j supplies the address of row j's bytes 0..7, lane
  2j + 1 of its bytes 8..15; lane t receives byte j = row j, column t (j = 0..7).
- global_load_lds_dword{,x4}: lane l's 4/16 bytes land at M0 + 4l / 16l (M0 wave-uniform).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from kernel.flydsl import layout, mlir_layer
from kernel.flydsl.layout import (
    LDS_BYTES,
    LDS_K,
    LDS_SCAN,
    MAX_HEADS,
    RECORD_BYTES,
    ROPE_OFFSET,
    SCALE_OFFSET,
    THREADS,
    TILE,
    dma_token,
    index_offset,
    lds_k,
    lds_p,
    lds_scale,
    lds_x,
    out_dim,
    pv_token,
    qk_block,
    qk_dim,
    qk_out_token,
    qk_row_token,
    row_skew,
    scan_candidate,
    scan_start,
    slot_of,
    tr8_address,
)
from kernel.flydsl.mlir_layer import (
    V,
    _bf16,
    _f16,
    _f32,
    _i16,
    _i32,
    _i64,
    _vec,
    barrier,
    bf16_pair_to_f32,
    cf,
    ci,
    cl,
    e4m3x8_to_f16x8,
    exp2,
    for_loop,
    global_load,
    global_ptr,
    global_store,
    if_then,
    lane_xor,
    lds_load,
    lds_ptr,
    lds_store,
    log2,
    mfma_bf16,
    mfma_f16,
    no_wrap,
    pack_e4m3,
    pipelined,
    readfirstlane,
    sched_fence,
    unpack_e4m3,
    vec_bitcast,
    vec_cat,
    vec_get,
    vec_of,
    wait_lgkm,
    wait_vm,
    zeros_f32x4,
)

# flydsl's modules (mlir_layer.FLYDSL_NAMES), bound here by _require_flydsl() on the first build:
# the kernel body names them.
flyc = fx = ir = arith = llvm = rocdl = scf = vector = as_ir_value = None


def _require_flydsl() -> None:
    """Import flydsl on first use and bind its modules in this module too."""
    if ir is None:
        globals().update(mlir_layer.flydsl_modules())


P_SHIFT = 8.0  # P = exp2(x - m + 8) <= 2^8
SCALE_V_MIN_BITS = 0x00000001  # smallest positive f32
SCALE_V_MAX_BITS = 0x43000000  # 2^7
MASKED_SCORE = -1.0e30  # x of a masked token, and the initial running max
M_FLOOR = -1.0e20  # floor of m - 8 in P = exp2(x - max(m - 8, -1e20))
LN2 = math.log(2.0)
LOG2E = 1.0 / math.log(2.0)


SOURCE_FILES = (layout.__file__, mlir_layer.__file__)  # with this file: the kernel's source


def source_tag() -> str:
    """Hash of the kernel's source (this file, layout.py, mlir_layer.py): part of every launcher's
    JIT cache key (a closure value), so flydsl's on-disk cache never serves a kernel built from an
    older version of this code."""
    import hashlib

    digest = hashlib.sha256()
    for path in (__file__, *SOURCE_FILES):
        with open(path, "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()[:16]


def kernel_name(heads: int, has_invalid: bool, return_lse: bool) -> str:
    """Symbol name of one configuration's kernel (also the ISA dump directory name)."""
    return f"sparse_mla_fp8ds_gfx950_h{heads}_i{int(has_invalid)}_l{int(return_lse)}"


# ================================================================ the scaled MFMA
# Kept with the kernel (not in mlir_layer.py): its operand formats are this kernel's choice, and
# the ISA mutation self-test (isa_edits.py) edits them in this file.


def mfma_scaled(a: ir.Value, b: ir.Value, acc: ir.Value, sel_a: int, scale_a: V, sel_b: int, scale_b: V) -> ir.Value:
    """v_mfma_scale_f32_16x16x128_f8f6f4 with e4m3 A and B; E8M0 scales from byte sel of a VGPR."""
    fmt = ir.Attribute.parse("#rocdl<matrix_format fp8_e4m3>")
    return rocdl.mfma_scale_f32_16x16x128_f8f6f4_(_vec(4, _f32()), a, b, acc, fmt, fmt, sel_a, scale_a.v, sel_b, scale_b.v)


# ================================================================ the kernel body


class _Ctx:
    """Per-workgroup values shared by the stages (all built once, before the tile loop)."""

    def __init__(self, heads: int, has_invalid: bool, return_lse: bool, args: dict[str, V]) -> None:
        self.H = heads
        self.has_invalid = has_invalid
        self.return_lse = return_lse
        self.a = args
        tid = V(as_ir_value(fx.thread_idx.x))
        self.wave = readfirstlane(tid >> 6)  # wave-uniform
        self.lane = tid & 63
        self.t = self.lane & 15  # head (QK/PV output) or token row (QK A operand)
        self.g = self.lane >> 4  # lane group
        self.h_ok = self.t < heads
        # ds_bpermute byte addresses of lanes 4g + r (tile_masks)
        self.mask_src = [((self.g << 2) + r) << 2 for r in range(4)]
        # Long rows first: block b serves query row n_q - 1 - b.
        self.qi = args["n_q"] - 1 - V(as_ir_value(fx.block_idx.x))
        storage = fx.SharedAllocator().allocate(LDS_BYTES)
        self.lds = V(as_ir_value(fx.ptrtoint(storage._ptr)))
        if ir.IntegerType(self.lds.type).width != 32:
            self.lds = self.lds.i32()


def load_slots(c: _Ctx) -> None:
    """load_slots (part 1): this row's CSR slice and its bounded index buffer descriptor.

    Row position p reads index-buffer entry beg + p, and 0 (KV row 0) where beg + p lies
    outside the buffer (kernel/emulated/gfx950.py's bounded_read). The descriptor's base is
    the row start clamped into the buffer and its size is the rest of the buffer, so every
    index read stays inside the index buffer whatever indptr holds; `c.skew` = min(beg, 0)
    shifts positions of a row that starts before the buffer (p + skew < 0 reads 0).
    """
    a = c.a
    row_ptr = a["iptr"] + (c.qi.i64() << 2)
    beg = readfirstlane(V(global_load(_i32(), row_ptr, 4)))
    end = readfirstlane(V(global_load(_i32(), row_ptr + 4, 4)))
    n_idx = V(arith.shrui(a["idx_bytes"].v, cl(2).v))
    length = end - beg
    c.len = (length < 0).sel(0, length)
    c.skew = row_skew(beg)  # wave-uniform; 0 for every row that starts inside the buffer
    # clamp(beg, 0, n_idx) in 64 bits
    beg64 = V(arith.extsi(_i64(), beg.v))
    beg64 = V(arith.maxsi(beg64.v, cl(0).v))
    beg64 = V(arith.minsi(beg64.v, n_idx.v))
    base = a["idx"] + (beg64 << 2)
    left = a["idx_bytes"] - (beg64 << 2)
    left = V(arith.minui(left.v, cl(0xFFFFFFFF).v))
    c.idx_rsrc = rocdl.make_buffer_rsrc(
        ir.Type.parse("!llvm.ptr<8>"),
        global_ptr(base),
        arith.constant(_i16(), 0),
        left.v,
        ci(0x27000).v,  # raw buffer, 32-bit data format (CDNA word 3)
    )


def idx_load1(c: _Ctx, pos: V) -> V:
    """The raw index word of row position pos >= 0: descriptor entry max(pos + skew, 0) (0
    past the index buffer); slot_word turns it into the position's slot word."""
    q = index_offset(pos, c.skew)  # descriptor entry; pos + skew < 0 only before the buffer
    return V(rocdl.raw_ptr_buffer_load(_i32(), c.idx_rsrc, (q << 2).v, ci(0).v))


def slot_word(c: _Ctx, pos: V, raw: V) -> V:
    """The slot word of row position pos: indices[beg + pos], 0 when beg + pos is outside the
    index buffer (below it: the skew select; past it: the descriptor returned 0), and -1 when
    pos >= len, so that slot_valid is `word >= 0` (load_slots' masking). Applied where the word
    is used, not where it is loaded, so no loop-carried word waits for its load early."""
    return slot_of(pos, raw, c.len, c.skew)


def idx_load4(c: _Ctx, q: V) -> ir.Value:
    """Descriptor-relative entries q .. q + 3 (q >= 0) as vector<4xi32> (0 past the buffer)."""
    return rocdl.raw_ptr_buffer_load(_vec(4, _i32()), c.idx_rsrc, (q << 2).v, ci(0).v)


def slot_valid(slot: V) -> V:
    """load_slots (masking): a slot word (idx_load1) marks a masked position (>= len, or an
    entry < 0) by its sign."""
    return slot >= 0


def row_address(c: _Ctx, slot: V) -> V:
    """64-bit address of the record a slot word reads: its cache row, or the zero record."""
    row = c.a["kv"] + slot.i64() * RECORD_BYTES
    return slot_valid(slot).sel(row, c.a["zero"])


def tile_count(c: _Ctx) -> V:
    """tile_count: number of 128-token tiles this row needs (wave-uniform i32)."""
    if not c.has_invalid:
        last = c.len
    else:
        # One past the last position < len whose entry is >= 0. Positions p < -skew (a row
        # starting before the index buffer) read 0, a valid entry: last >= min(len, -skew).
        # The rest of the row is descriptor entries q = p + skew in [0, len + skew), scanned
        # 4096 a step: wave w scans 1024 of them with 4 loads in flight (4 consecutive a lane).
        n_in, first = scan_start(c.len, c.skew)  # first: 0 unless the row starts before the buffer
        n_scan = (n_in >> 12) + ((n_in & 4095).ne(0)).sel(1, 0)

        def scan(it: V, st: list[ir.Value]) -> list[ir.Value]:
            best = V(st[0])
            starts = [(it << 12) + (c.wave << 10) + (k << 8) + (c.lane << 2) for k in range(4)]
            words = [idx_load4(c, q0) for q0 in starts]
            for q0, wv in zip(starts, words):
                for k in range(4):
                    qk = q0 + k
                    # plain integer ops keep the 16 conditions out of SGPR lane masks
                    best = best.smax(scan_candidate(qk, n_in, c.skew, vec_get(wv, k)))
            return [best.v]

        last = V(for_loop(ci(0), n_scan, [first.v], scan)[0])
        for m in (1, 2, 4, 8, 16, 32):
            last = last.smax(lane_xor(last, c.lane, m))
        # Max over the 4 waves (slots used by nothing else).
        with no_wrap():
            lds_store(last.v, c.lds + LDS_SCAN + (c.wave << 2), 4)
        wait_lgkm()
        barrier()
        with no_wrap():
            parts = lds_load(_vec(4, _i32()), c.lds + LDS_SCAN, 16)
        for k in range(4):
            last = last.smax(vec_get(parts, k))
    nt = (last >> 7) + ((last & 127).ne(0)).sel(1, 0)
    return readfirstlane(nt)


def quantize_q(c: _Ctx) -> None:
    """quantize_q: this lane's Q operands for the scaled QK MFMAs and the bf16 rope MFMAs.

    Lane (head t, group g) holds, for QK MFMA j, the 16 dims qk_dim(j, part, g) .. + 15 of
    blocks qk_block(0, g) (operand bytes 0..15) and qk_block(1, g) (bytes 16..31), as e4m3 hi
    and lo words. Per (head, block): E8M0 s = max(exp_field(amax) - 7, 5), hi =
    e4m3(RNE(q 2^(127-s))), lo = e4m3(RNE((q 2^(127-s) - hi) * 32)) with E8M0 s - 5 >= 0.
    The lane supplies block g's E8M0 (hi and lo, byte 0). Heads >= H are zero.
    """
    a = c.a
    t_safe = c.h_ok.sel(c.t, 0)
    row = a["q"] + ((c.qi.i64() * a["sq"] + t_safe.i64() * a["sqh"]) << 1)
    zero = cf(0.0)
    vals: list[list[list[V]]] = [[[], []] for _ in range(4)]  # [j][part] -> 16 f32
    for j in range(4):
        for part in range(2):
            base = row + (qk_dim(j, part, c.g).i64() << 1)
            for half in range(2):
                words = global_load(_vec(4, _i32()), base + 16 * half, 16)
                for k in range(4):
                    lo_, hi_ = bf16_pair_to_f32(vec_get(words, k))
                    vals[j][part] += [c.h_ok.sel(lo_, zero), c.h_ok.sel(hi_, zero)]
    # amax per block: this lane holds 64 of block qk_block(part, g)'s dims, lane group g ^ 1
    # the other 64. |x| bits compare like the magnitudes.
    scale: list[V] = []
    inv: list[V] = []
    for part in range(2):
        amax = ci(0)
        for j in range(4):
            for x in vals[j][part]:
                amax = amax.umax(x.as_i32() & 0x7FFFFFFF)
        amax = amax.umax(lane_xor(amax, c.lane, 16))
        e8 = ((amax >> 23) - 7).smax(5)  # hi E8M0; lo E8M0 = e8 - 5 >= 0
        scale.append(e8)
        inv.append(((ci(254) - e8) << 23).as_f32())  # 2^(127 - e8), normal for e8 in [5, 248]
    c.q_hi: list[ir.Value] = []
    c.q_lo: list[ir.Value] = []
    for j in range(4):
        hi_words: list[V] = []
        lo_words: list[V] = []
        for part in range(2):
            for w4 in range(4):
                x = [vals[j][part][4 * w4 + k] * inv[part] for k in range(4)]
                hw = pack_e4m3(x)
                dec = unpack_e4m3(hw)
                hi_words.append(hw)
                lo_words.append(pack_e4m3([(x[k] - dec[k]) * 32.0 for k in range(4)]))
        c.q_hi.append(vec_of(hi_words, _i32()))
        c.q_lo.append(vec_of(lo_words, _i32()))
    # Lane group g supplies block g's E8M0: block g < 2 sits in part 0 of lane group 2g (and
    # 2g + 1), block g >= 2 in part 1 of lane group 2(g - 2): both are lane group 2(g & 1).
    src = c.t + ((c.g & 1) << 5)
    from_p0 = V(rocdl.ds_bpermute(_i32(), (src << 2).v, scale[0].v))
    from_p1 = V(rocdl.ds_bpermute(_i32(), (src << 2).v, scale[1].v))
    c.q_scale_hi = (c.g < 2).sel(from_p0, from_p1)
    c.q_scale_lo = c.q_scale_hi - 5
    # Rope: dims 512 + 8g + [0, 8) and 512 + 32 + 8g + [0, 8) as bf16 MFMA B operands.
    c.q_rope: list[ir.Value] = []
    zeros = V(arith.constant(_vec(4, _i32()), ir.DenseElementsAttr.get_splat(_vec(4, _i32()), ir.IntegerAttr.get(_i32(), 0))))
    for k in range(2):
        off = ((c.g << 3) + (512 + 32 * k)).i64() << 1
        words = global_load(_vec(4, _i32()), row + off, 16)
        c.q_rope.append(vec_bitcast(c.h_ok.sel(V(words), zeros).v, 8, _bf16()))


class _TileIdx:
    """load_slots (part 2): the index words one tile needs (issued two tiles ahead).

    raw: the 4 loaded words (DMA halves hf = 0, 1, then rope rows s = 0, 1), carried through
    the loop as loaded; dma[hf] / arow[s] (slot words, slot_word) are formed on first use:
    dma[hf] of token dma_token(hf, lane) (the latent / scale DMA lane's row), arow[s] of token
    qk_row_token(w, s, t) (the rope A-operand row).
    """

    def __init__(self, c: _Ctx, tb: V, raw: list[V]) -> None:
        self.c = c
        self.tb = tb
        self.raw = raw
        self._dma: list[V] | None = None
        self._arow: list[V] | None = None

    def _pos(self) -> list[V]:
        c = self.c
        return [self.tb + dma_token(hf, c.lane) for hf in range(2)] + [self.tb + qk_row_token(c.wave, s, c.t) for s in range(2)]

    @staticmethod
    def load(c: _Ctx, tb: V) -> _TileIdx:
        ti = _TileIdx(c, tb, [])
        ti.raw = [idx_load1(c, p) for p in ti._pos()]
        return ti

    @property
    def dma(self) -> list[V]:
        if self._dma is None:
            pos = self._pos()
            self._dma = [slot_word(self.c, pos[k], self.raw[k]) for k in range(2)]
        return self._dma

    @property
    def arow(self) -> list[V]:
        if self._arow is None:
            pos = self._pos()
            self._arow = [slot_word(self.c, pos[2 + k], self.raw[2 + k]) for k in range(2)]
        return self._arow

    def words(self) -> list[ir.Value]:
        return [x.v for x in self.raw]

    @staticmethod
    def of_words(c: _Ctx, tb: V, words: Sequence[ir.Value]) -> _TileIdx:
        return _TileIdx(c, tb, [V(w) for w in words])


def tile_masks(c: _Ctx, ti: _TileIdx) -> list[V]:
    """Entries of the QK output-layout tokens qk_out_token(w, s, g, r), (s, r) order: token
    32w + 16s + 4g + r is the rope row of lane 4g + r (arow[s]), fetched by ds_bpermute."""
    out: list[V] = []
    for s in range(2):
        for r in range(4):
            out.append(V(rocdl.ds_bpermute(_i32(), c.mask_src[r].v, ti.arow[s].v)))
    return out


def issue_tile_dma(c: _Ctx, ti: _TileIdx) -> None:
    """Copy block w (and block w's scale word) of the tile's 128 records into LDS.

    Window (half hf, chunk ch) holds chunk ch of tokens 64hf .. 64hf + 63, lane l's 16 bytes
    being token 64hf + l's, so each lane streams from its own 64-bit row address.
    """
    for hf in range(2):
        row = row_address(c, ti.dma[hf])
        blk = row + (c.wave.i64() << 7)  # record bytes 128w .. 128w + 127
        for ch in range(8):
            # Wave-uniform window (M0); lane l's 16 bytes land at window + 16l.
            with no_wrap():
                window = c.lds + lds_k(c.wave, dma_token(hf, 0), ch)
            rocdl.global_load_lds(global_ptr(blk + 16 * ch), lds_ptr(window), 16, 0)
        with no_wrap():
            window = c.lds + lds_scale(c.wave, dma_token(hf, 0))  # lane l's 4 bytes at + 4l
        src = row + SCALE_OFFSET + (c.wave.i64() << 2)
        rocdl.global_load_lds(global_ptr(src), lds_ptr(window), 4, 0)


def load_rope(c: _Ctx, ti: _TileIdx, volatile: bool = False) -> list[ir.Value]:
    """The QK A operands of the rope MFMAs: token 32w + 16s + t, dims 8g.. and 32 + 8g..

    The prologue's copy is volatile: otherwise LLVM folds the loop-header phi of the prologue's
    and the loop's rope loads into one load at the top of the tile (issued and waited for in
    the same tile), undoing the prefetch.
    """
    out: list[ir.Value] = []
    for s in range(2):
        row = row_address(c, ti.arow[s])
        for k in range(2):
            addr = row + ROPE_OFFSET + 64 * k + (c.g.i64() << 4)  # rope dims 32k + 8g .. + 7
            out.append(vec_bitcast(global_load(_vec(4, _i32()), addr, 16, volatile), 8, _bf16()))
    return out


def qk_scores(c: _Ctx, rope: list[ir.Value]) -> list[ir.Value]:
    """qk_scores: S for tokens qk_out_token(w, s, g, r), head t (two vector<4xf32>, s = 0, 1).

    Per subtile s (16 tokens): MFMA j (0..3) multiplies dims 32j .. 32j + 31 of every record
    block, A = the tokens' e4m3 codes with E8M0 = the exponent field of the record scale of
    block g (this lane's scale group), B = Q hi, then the same with Q lo; then the rope part
    as two bf16 MFMAs into the same f32 accumulator.
    """
    e8: list[V] = []
    acc = [zeros_f32x4(), zeros_f32x4()]
    # Per-lane bases; lds_k is affine in block and chunk, so the MFMA-dependent parts are
    # immediate offsets (checked lane by lane in tests/kernel/flydsl/test_compile.py).
    with no_wrap():
        toks = [qk_row_token(c.wave, s, c.t) for s in range(2)]  # A-operand row tokens (0..127)
        k_base = [c.lds + lds_k(qk_block(0, c.g), tok, c.g & 1) for tok in toks]
        s_addr = [c.lds + lds_scale(c.g, tok) for tok in toks]

    def issue(i: int) -> object:
        s, j = divmod(i, 4)
        scale_word = None
        with no_wrap():
            if j == 0:
                scale_word = V(lds_load(_i32(), s_addr[s], 4))
            parts = [lds_load(_vec(4, _i32()), k_base[s] + (lds_k(2 * part, 0, 2 * j) - LDS_K), 16) for part in range(2)]
        return scale_word, vec_cat(parts[0], parts[1])

    def consume(i: int, data: object) -> None:
        s, j = divmod(i, 4)
        scale_word, a_op = data  # type: ignore[misc]
        if j == 0:
            e8.append((scale_word >> 23) & 0xFF)  # the pow2 scale's exponent field
        x = mfma_scaled(a_op, c.q_hi[j], acc[s], 0, e8[s], 0, c.q_scale_hi)
        acc[s] = mfma_scaled(a_op, c.q_lo[j], x, 0, e8[s], 0, c.q_scale_lo)
        if j == 3:
            for k in range(2):
                acc[s] = mfma_bf16(rope[2 * s + k], c.q_rope[k], acc[s])

    pipelined(8, 2, issue, consume)
    return acc


def online_softmax(c: _Ctx, tb: V, sacc: list[ir.Value], dout: list[V], m_old: V, l_old: V) -> tuple[V, V, V, list[V]]:
    """online_softmax: tile max over the workgroup, P, alpha, and the new m and lane-partial l.

    x = s * c_log2 (masked: -1e30); m_new = max(m_old, tile max) (NaN scores do not take part
    in the max); alpha = exp2(m_old - m_new); P = exp2(x - max(m_new - 8, -1e20)) <= 2^8;
    l = l * alpha + (P_0 + P_1 + ... + P_7) over this lane's 8 tokens in (s, r) order.
    `dout` holds the entries of tokens qk_out_token(w, s, g, r) in (s, r) order (tile_masks).
    Returns (m_new, l_new, alpha, P for tokens qk_out_token(w, s, g, r) in (s, r) order).
    """
    c_log2 = c.a["c_log2"]
    masked_x = cf(MASKED_SCORE)
    xs: list[V] = []
    tmax = cf(float("-inf"))
    for s in range(2):
        for r in range(4):
            ok = slot_valid(dout[4 * s + r])
            x = ok.sel(vec_get(sacc[s], r) * c_log2, masked_x)
            xs.append(x)
            tmax = tmax.fmax(x)  # v_max_f32: a NaN operand yields the other one
    # Max over the 4 lane groups (xor 16, 32); own value kept in the max so the result does not
    # depend on which half of the swapped pair holds the partner.
    for swap in (rocdl.permlane16_swap, rocdl.permlane32_swap):
        pair = swap(ir.Type.parse("!llvm.struct<(i32, i32)>"), tmax.as_i32().v, tmax.as_i32().v, False, False)
        p0 = V(llvm.extractvalue(_i32(), pair, [0])).as_f32()
        p1 = V(llvm.extractvalue(_i32(), pair, [1])).as_f32()
        tmax = tmax.fmax(p0).fmax(p1)
    with no_wrap():
        lds_store(tmax.v, c.lds + lds_x(c.t, c.wave), 4)
    wait_lgkm()
    barrier()
    with no_wrap():
        waves = lds_load(_vec(4, _f32()), c.lds + lds_x(c.t, 0), 16)
    m_new = m_old
    for k in range(4):
        m_new = m_new.fmax(vec_get(waves, k))
    alpha = exp2(m_old - m_new)
    m_shift = (m_new - P_SHIFT).fmax(M_FLOOR)  # everything masked so far: P = exp2(-1e30 + 1e20) = 0
    ps = [exp2(x - m_shift) for x in xs]
    total = ps[0]
    for p in ps[1:]:
        total = total + p
    l_new = l_old * alpha + total
    return m_new, l_new, alpha, ps


def store_p(c: _Ctx, ps: list[V]) -> None:
    """P rows to LDS: head t, tokens 32w + 16s + 4g + r (16 contiguous bytes per s)."""
    for s in range(2):
        with no_wrap():
            addr = c.lds + lds_p(c.t, qk_out_token(c.wave, s, c.g, 0))  # r = 0..3 consecutive
        lds_store(vec_of(ps[4 * s : 4 * s + 4], _f32()), addr, 16)


def scale_p(c: _Ctx, p_words: list[ir.Value], sv_words: list[ir.Value]) -> ir.Value:
    """scale_p: the PV B operand P'[pv_token(kc, g, j)][head t], j = 0..7, as vector<8xf16>.

    P' = fp16(P * scale_v) with scale_v = the record scale of block w, its bits clamped to
    [1, bits(2^7)] (an integer clamp, so zero, negative and NaN scales clamp too).
    """
    out: list[V] = []
    for j in range(8):
        bits = vec_get(sv_words[j // 4], j % 4).smax(SCALE_V_MIN_BITS).smin(SCALE_V_MAX_BITS)
        prod = vec_get(p_words[j // 4], j % 4) * bits.as_f32()
        out.append(V(arith.truncf(_f16(), prod.v)))
    return vec_of(out, _f16())


def pv_accumulate(c: _Ctx, o: list[ir.Value], after_reads: Callable[[], None]) -> list[ir.Value]:
    """pv_accumulate: O^T[128w + 16ch + 4g + r][t] += V^T[., tok] P'^T[tok, t] over the tile.

    K-chunk kc covers tokens pv_token(kc, g, j) (MFMA k = 8g + j), the chunks accumulated in
    order kc = 0..3. ds_read_b64_tr_b8: lanes 2j, 2j+1 of group g address bytes 0..7 / 8..15
    of chunk ch (dims 16ch..16ch+15 of block w) of token pv_token(kc, g, j); lane t receives
    dim 16ch + t of those 8 tokens (byte j). `after_reads` runs once all of this wave's LDS
    reads of the tile are issued, halfway through the MFMAs (the DMA refill of block w goes
    there).
    """
    out = list(o)
    pps: dict[int, ir.Value] = {}
    # Per-lane bases (one per sub = kc & 1: the slot swizzle flips token bit 2 with lane-group
    # bit 0) plus immediate offsets (tr8_address, lds_p and lds_scale are affine in hf = kc >> 1
    # and ch for a fixed sub; tests/kernel/flydsl/test_compile.py checks the split for every lane).
    with no_wrap():
        tr_base = [c.lds + tr8_address(c.wave, sub, 0, c.t, c.g) for sub in range(2)]
        p_base = c.lds + lds_p(c.t, pv_token(0, c.g, 0))
        sv_base = [c.lds + lds_scale(c.wave, pv_token(sub, c.g, 0)) for sub in range(2)]

    def side(kc: int) -> tuple[list[ir.Value], list[ir.Value]]:
        """P[tok][t] and block w's scale of tokens pv_token(kc, g, 4k .. 4k + 3), k = 0, 1 (4
        consecutive tokens, 4 consecutive slots each)."""
        sub = kc & 1
        with no_wrap():
            offs = [4 * (pv_token(kc, 0, 4 * k) - pv_token(0, 0, 0)) for k in range(2)]
            soffs = [lds_scale(0, pv_token(kc, 0, 4 * k)) - lds_scale(0, pv_token(sub, 0, 0)) for k in range(2)]
            return (
                [lds_load(_vec(4, _f32()), p_base + off, 16) for off in offs],
                [lds_load(_vec(4, _i32()), sv_base[sub] + off, 16) for off in soffs],
            )

    def tr8(i: int) -> ir.Value:
        kc, ch = divmod(i, 8)
        sub = kc & 1
        with no_wrap():
            addr = tr_base[sub] + (tr8_address(0, kc, ch, 0, 0) - tr8_address(0, sub, 0, 0, 0))
        return rocdl.ds_read_tr8_b64_(_vec(2, _i32()), lds_ptr(addr))

    # K-chunks 0, 1 (tokens 0-63): tr8 reads pipelined 4 ahead of their MFMAs. The P' operands
    # of K-chunks 2, 3 are read and formed during the first half (4 registers each), then every
    # tr8 read of K-chunks 2, 3 is issued at once: all of this wave's reads of block w are
    # issued halfway through PV and the refill (`after_reads`) overlaps the second half's 16
    # MFMAs (the seed's refill point). MFMA order per output chunk stays kc = 0, 1, 2, 3.
    half = 16
    sides = {0: side(0)}
    raws = {i: tr8(i) for i in range(4)}
    for i in range(32):
        kc, ch = divmod(i, 8)
        sched_fence()
        if i == half:
            for j in range(half, 32):
                raws[j] = tr8(j)
            sched_fence()
            after_reads()
        elif i + 4 < half:
            if (i + 4) % 8 == 0:
                sides[(i + 4) // 8] = side((i + 4) // 8)
            raws[i + 4] = tr8(i + 4)
        if i == 8:
            sides[2], sides[3] = side(2), side(3)
        sched_fence()
        if ch == 0 and kc < 2:
            pps[kc] = scale_p(c, *sides.pop(kc))
        if i == 12:
            for k in (2, 3):
                pps[k] = scale_p(c, *sides.pop(k))
        out[ch] = mfma_f16(e4m3x8_to_f16x8(raws.pop(i)), pps[kc], out[ch])
    sched_fence()
    return out


def finalize(c: _Ctx, m: V, l_lane: V, o: list[ir.Value]) -> None:
    """finalize: l over the 4 lane groups and 4 waves, out = bf16(o * (1 / l)), lse."""
    a = c.a
    l_g = l_lane + lane_xor(l_lane.as_i32(), c.lane, 16).as_f32()
    l_w = l_g + lane_xor(l_g.as_i32(), c.lane, 32).as_f32()
    with no_wrap():
        lds_store(l_w.v, c.lds + lds_x(c.t, c.wave), 4)
    wait_lgkm()
    barrier()
    with no_wrap():
        parts = lds_load(_vec(4, _f32()), c.lds + lds_x(c.t, 0), 16)
    l_tot = vec_get(parts, 0)
    for k in range(1, 4):
        l_tot = l_tot + vec_get(parts, k)
    has = l_tot > 0.0
    inv = has.sel(V(arith.divf(cf(1.0).v, l_tot.v)), cf(0.0))
    t_safe = c.h_ok.sel(c.t, 0)
    base = a["out"] + ((c.qi.i64() * a["so"] + t_safe.i64() * a["soh"]) << 1)
    vals = []
    for ch in range(8):
        dims = out_dim(c.wave, ch, c.g)  # registers r = 0..3 are dims + r
        bf = [V(arith.truncf(_bf16(), (vec_get(o[ch], r) * inv).v)) for r in range(4)]
        vals.append((base + (dims.i64() << 1), vec_of(bf, _bf16())))

    def store_out() -> None:
        for addr, v in vals:
            global_store(v, addr, 8)

    if_then(c.h_ok, store_out)
    if c.return_lse:
        lse = has.sel(((m + log2(l_tot)) - P_SHIFT) * LN2, cf(float("-inf")))
        first = V(arith.andi(V(arith.andi(c.wave.eq(0).v, c.g.eq(0).v)).v, c.h_ok.v))
        addr = a["lse"] + ((c.qi.i64() * c.H + t_safe.i64()) << 2)
        if_then(first, lambda: global_store(lse.v, addr, 4))


def emit_kernel(heads: int, has_invalid: bool, return_lse: bool, source: str, args: dict[str, V]) -> None:
    """The whole kernel body, traced inside the @flyc.kernel function (`source` only keys the
    JIT cache)."""
    c = _Ctx(heads, has_invalid, return_lse, args)
    load_slots(c)
    nt = tile_count(c)
    quantize_q(c)

    # Prologue: tile 0's indices, latent DMA, rope and mask entries, and tile 1's indices; the
    # loop carries (m, l, o[8], rope of tile t [4], mask entries of tile t [8], index words of
    # tile t + 1 [4]) and loads tile t + 2's index words at its top, so no index load is
    # waited for within the tile that issues it.
    ti0 = _TileIdx.load(c, ci(0))
    if_then(nt > 0, lambda: issue_tile_dma(c, ti0))
    rope0 = load_rope(c, ti0, volatile=True)
    dout0 = tile_masks(c, ti0)
    ti1 = _TileIdx.load(c, ci(TILE))
    init = [cf(MASKED_SCORE).v, cf(0.0).v] + [zeros_f32x4() for _ in range(8)] + rope0 + [x.v for x in dout0] + ti1.words()

    def tile(it: V, st: list[ir.Value]) -> list[ir.Value]:
        m_old, l_old = V(st[0]), V(st[1])
        o = st[2:10]
        rope = st[10:14]
        dout = [V(x) for x in st[14:22]]
        tb = it << 7
        nxt = _TileIdx.of_words(c, tb + TILE, st[22:26])
        # This tile's latent and scales (every wave's DMA) and rope are in LDS / registers.
        wait_vm()
        barrier()
        # Tile t + 2's index words: first used at the end of tile t + 1.
        nn = _TileIdx.load(c, tb + 2 * TILE)
        sacc = qk_scores(c, rope)
        # The next tile's rope (this tile's is dead now; index words loaded a tile ago) and
        # mask entries: in flight through softmax and PV. Past the last tile every position
        # is masked, so these read only the zero record.
        rope_n = load_rope(c, nxt)
        dout_n = tile_masks(c, nxt)
        m_new, l_new, alpha, ps = online_softmax(c, tb, sacc, dout, m_old, l_old)
        store_p(c, ps)
        o = [arith.mulf(x, vector.broadcast(_vec(4, _f32()), alpha.v)) for x in o]
        wait_lgkm()
        barrier()

        def refill() -> None:
            # Block w of the LDS tile (and scale row w) is read only by this wave's PV, whose
            # reads are all issued halfway through PV: once they have landed, stream in the
            # next tile's block w while the second half's MFMAs run.
            # Unconditional: after the last tile every position is masked and the copy reads
            # only the zero record (nothing reads it). A branch here would join a path with and
            # one without the 18 DMA loads, and LLVM's vmcnt for the loop-carried index words
            # at the join would then wait for the DMA on the refill path.
            wait_lgkm()
            issue_tile_dma(c, nxt)

        o = pv_accumulate(c, o, refill)
        return [m_new.v, l_new.v] + list(o) + rope_n + [x.v for x in dout_n] + nn.words()

    fin = for_loop(ci(0), nt, init, tile)
    finalize(c, V(fin[0]), V(fin[1]), fin[2:10])


def build_launcher(heads: int, has_invalid: bool, return_lse: bool) -> Callable:
    """JIT launcher of one (heads, has_invalid, return_lse) configuration.

    Call it as launcher(q, kv, idx, indptr, out, lse, zero_record, n_q, stride_q, stride_qh,
    stride_o, stride_oh, idx_bytes, c_log2, stream=stream): addresses are device byte
    addresses (int), strides are in elements, idx_bytes is the index buffer's byte size,
    c_log2 = softmax_scale * log2(e). One workgroup of 256 threads per query row.
    """
    if not 1 <= heads <= MAX_HEADS:
        raise ValueError(f"heads must be in [1, {MAX_HEADS}], got {heads}")
    _require_flydsl()
    name = kernel_name(heads, has_invalid, return_lse)
    H, HI, RL = int(heads), bool(has_invalid), bool(return_lse)
    SRC = source_tag()  # closure value: keys flydsl's cache on this file's contents

    @flyc.kernel(name=name, known_block_size=[THREADS, 1, 1])
    def sparse_mla_fp8ds_gfx950(
        q: fx.Int64,
        kv: fx.Int64,
        idx: fx.Int64,
        iptr: fx.Int64,
        out: fx.Int64,
        lse: fx.Int64,
        zero: fx.Int64,
        n_q: fx.Int32,
        sq: fx.Int64,
        sqh: fx.Int64,
        so: fx.Int64,
        soh: fx.Int64,
        idx_bytes: fx.Int64,
        c_log2: fx.Float32,
    ):
        emit_kernel(
            H,
            HI,
            RL,
            SRC,
            {
                "q": V(as_ir_value(q)),
                "kv": V(as_ir_value(kv)),
                "idx": V(as_ir_value(idx)),
                "iptr": V(as_ir_value(iptr)),
                "out": V(as_ir_value(out)),
                "lse": V(as_ir_value(lse)),
                "zero": V(as_ir_value(zero)),
                "n_q": V(as_ir_value(n_q)),
                "sq": V(as_ir_value(sq)),
                "sqh": V(as_ir_value(sqh)),
                "so": V(as_ir_value(so)),
                "soh": V(as_ir_value(soh)),
                "idx_bytes": V(as_ir_value(idx_bytes)),
                "c_log2": V(as_ir_value(c_log2)),
            },
        )

    @flyc.jit
    def launch(
        q: fx.Int64,
        kv: fx.Int64,
        idx: fx.Int64,
        iptr: fx.Int64,
        out: fx.Int64,
        lse: fx.Int64,
        zero: fx.Int64,
        n_q: fx.Int32,
        sq: fx.Int64,
        sqh: fx.Int64,
        so: fx.Int64,
        soh: fx.Int64,
        idx_bytes: fx.Int64,
        c_log2: fx.Float32,
        stream: fx.Stream = fx.Stream(None),  # noqa: B008
    ):
        sparse_mla_fp8ds_gfx950(q, kv, idx, iptr, out, lse, zero, n_q, sq, sqh, so, soh, idx_bytes, c_log2).launch(
            grid=(n_q, 1, 1), block=(THREADS, 1, 1), stream=stream
        )

    launch.compile_hints = {"waves_per_eu": 2, "fast_fp_math": False}
    return launch
