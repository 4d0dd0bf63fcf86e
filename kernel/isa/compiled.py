"""Batched closures: one call executes an instruction for a whole lockstep group of k waves
(`kernel.isa.lockstep.Batch`) on [k, 64] lane arrays, decoded once per instruction.

Each batched form computes, per wave and lane, exactly what the per-wave closure of
`ops_vector` computes (the same numpy functions on arrays with a leading wave axis), with the
same checks per wave (definedness, loads in flight) and the same writes (EXEC lanes only,
definedness bytes). Instructions without a batched form here (memory, MFMA, SALU, cross-lane
and the rarer VALU forms) run wave by wave; `compile_batched` returns None for them.
`tests/kernel/isa/test_batched.py` runs every batched form against its per-wave closure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernel.isa import numerics as nm
from kernel.isa import ops_vector as ov
from kernel.isa.asm import Imm, Instr, Operand, Program, Reg, modifier_list
from kernel.isa.batched_regs import (
    ABS32,
    SIGN32,
    U32,
    U64,
    BFn,
    BGet,
    _check_v,
    _lanes_of,
    _mark,
    _sreg,
    _svals,
    _vreg,
    bwrite_half,
    bwrite_mask,
    bwrite_v,
    bwrite_v64,
    bwrite_vn,
)
from kernel.isa.consts import K
from kernel.isa.lockstep import Batch
from kernel.isa.operands import check_vgpr
from kernel.isa.state import LANES, int_to_mask


def bsrc32(op: Operand, flt: bool = False, need: int = 0xF) -> BGet | None:
    """A 32-bit source as uint32 [k, 64] (neg / abs applied when flt), as operands.src32."""
    if isinstance(op, Imm):
        bits = op.bits & 0xFFFFFFFF
        return lambda b: K(bits, U32, b.shape)
    if not isinstance(op, Reg) or op.count != 1 or op.file not in ("v", "s"):
        return None
    if (op.neg or op.abs) and not flt:
        return None
    idx, neg, ab = op.index, op.neg, op.abs
    if op.file == "v":

        def g(b: Batch) -> np.ndarray:
            if b.chk and idx not in b.ok:
                _check_v(b, idx, need)
            return b.V[:, idx]
    else:

        def g(b: Batch) -> np.ndarray:
            return _lanes_of(b, _svals(b, idx, 1), U32)

    if not (neg or ab):
        return g

    def gm(b: Batch) -> np.ndarray:
        v = g(b)
        if ab:
            v = v & ABS32
        if neg:
            v = v ^ SIGN32
        return v

    return gm


def bsrc64(op: Operand) -> BGet | None:
    """A 64-bit integer source as uint64 [k, 64], as operands.src64."""
    if isinstance(op, Imm):
        if op.is_float:
            return None
        val = (op.value & 0xFFFFFFFFFFFFFFFF) if not op.literal else (op.bits & 0xFFFFFFFF)
        return lambda b: K(val, U64, b.shape)
    vi = _vreg(op, 2)
    if vi is not None:

        def g(b: Batch) -> np.ndarray:
            if b.chk and not (vi in b.ok and vi + 1 in b.ok):
                _check_v(b, vi)
                _check_v(b, vi + 1)
            return np.ascontiguousarray(b.V[:, vi : vi + 2].transpose(0, 2, 1)).view(U64).reshape(b.k, LANES)

        return g
    si = _sreg(op, 2)
    if si is None:
        return None
    return lambda b: _lanes_of(b, _svals(b, si, 2), U64)


def bmask_src(op: Operand) -> Callable[[Batch], np.ndarray] | None:
    """A 64-bit lane mask operand (vcc, an SGPR pair, a constant) as bool [k, 64] or [64]."""
    if isinstance(op, Imm):
        m = int_to_mask((op.bits & 0xFFFFFFFF) if op.literal else (op.value & 0xFFFFFFFFFFFFFFFF))
        return lambda b: m
    si = _sreg(op, 2)
    if si is None:
        return None

    def g(b: Batch) -> np.ndarray:
        vals = _svals(b, si, 2)
        v0 = vals[0]
        if vals.count(v0) == len(vals):
            return int_to_mask(v0)
        return np.array([int_to_mask(v) for v in vals])

    return g


# ------------------------------------------------------------------ forms

BVALU: dict[str, Callable[[Instr], BFn | None]] = {}


def _srcs(ins: Instr, n: int, flt: bool = False) -> tuple[int, list[BGet]] | None:
    """(dst, sources) of a plain `op vD, s0 .. s{n-1}` form, or None."""
    if ins.modifiers or len(ins.operands) != n + 1:
        return None
    dst = _vreg(ins.operands[0])
    srcs = [bsrc32(o, flt) for o in ins.operands[1:]]
    if dst is None or any(s is None for s in srcs):
        return None
    return dst, srcs  # type: ignore[return-value]


def _elementwise(fn: Callable, n: int, flt: bool) -> Callable[[Instr], BFn | None]:
    def make(ins: Instr) -> BFn | None:
        got = _srcs(ins, n, flt)
        if got is None:
            return None
        dst, srcs = got
        if n == 1:
            (s0,) = srcs
            return lambda b: bwrite_v(b, dst, fn(s0(b)).astype(U32, copy=False))
        if n == 2:
            s0, s1 = srcs
            return lambda b: bwrite_v(b, dst, fn(s0(b), s1(b)).astype(U32, copy=False))
        s0, s1, s2 = srcs
        return lambda b: bwrite_v(b, dst, fn(s0(b), s1(b), s2(b)).astype(U32, copy=False))

    return make


for _tbl, _n, _flt in ((ov._INT2, 2, False), (ov._INT3, 3, False), (ov._F1, 1, True), (ov._F2, 2, True), (ov._F3, 3, True)):
    for _k, _f in _tbl.items():
        BVALU[_k] = _elementwise(_f, _n, _flt)
BVALU["v_mov_b32"] = _elementwise(lambda a: a, 1, False)
BVALU["v_perm_b32"] = _elementwise(ov._byte_permute, 3, False)
BVALU["v_xad_u32"] = _elementwise(lambda a, b, c: (a ^ b) + c, 3, False)
BVALU["v_maximum3_f32"] = _elementwise(lambda a, b, c: ov._fmaximum(ov._fmaximum(a, b), c), 3, True)
BVALU["v_minimum3_f32"] = _elementwise(lambda a, b, c: ov._fminimum(ov._fminimum(a, b), c), 3, True)


def _cndmask(ins: Instr) -> BFn | None:
    if ins.modifiers or len(ins.operands) != 4:
        return None
    dst = _vreg(ins.operands[0])
    s0, s1 = bsrc32(ins.operands[1], True), bsrc32(ins.operands[2], True)
    m = bmask_src(ins.operands[3])
    if dst is None or s0 is None or s1 is None or m is None:
        return None
    return lambda b: bwrite_v(b, dst, np.where(m(b), s1(b), s0(b)))


BVALU["v_cndmask_b32"] = _cndmask


def _cmp(ins: Instr) -> BFn | None:
    parts = ov.base_name(ins.mnemonic)[0].split("_")
    if ins.modifiers or len(parts) != 4 or parts[2] not in ov._CMP or len(ins.operands) != 3:
        return None
    cop, ty = parts[2], parts[3]
    dst = _sreg(ins.operands[0], 2)
    if ty in ("u64", "i64"):
        a, c = bsrc64(ins.operands[1]), bsrc64(ins.operands[2])
        conv = (lambda v: v) if ty == "u64" else (lambda v: v.view(np.int64))
    elif ty in ("i32", "u32", "f32"):
        a, c = bsrc32(ins.operands[1], ty == "f32"), bsrc32(ins.operands[2], ty == "f32")
        conv = {"i32": lambda v: v.view(np.int32), "u32": lambda v: v, "f32": lambda v: v.view(np.float32)}[ty]
    else:
        return None
    if dst is None or a is None or c is None:
        return None
    fn = ov._CMP[cop]
    if ty == "f32" and cop == "lg":

        def fn(p: Any, q: Any) -> Any:
            return (p < q) | (p > q)

    return lambda b: bwrite_mask(b, dst, fn(conv(a(b)), conv(c(b))))


for _c in ov._CMP:
    for _t in ("i32", "u32", "f32", "u64", "i64"):
        BVALU[f"v_cmp_{_c}_{_t}"] = _cmp


def _lshl_add64(ins: Instr) -> BFn | None:
    """Constant shifts 0..4 only (the per-wave closure checks a register shift)."""
    if ins.modifiers or len(ins.operands) != 4:
        return None
    dst = _vreg(ins.operands[0], 2)
    s0, s2 = bsrc64(ins.operands[1]), bsrc64(ins.operands[3])
    sop = ins.operands[2]
    if dst is None or s0 is None or s2 is None or not (isinstance(sop, Imm) and 0 <= sop.value <= 4):
        return None
    sh = sop.value
    return lambda b: bwrite_v64(b, dst, (s0(b) << K(sh, U64, b.shape)) + s2(b))


BVALU["v_lshl_add_u64"] = _lshl_add64


def _pk_rows(o: Operand, sel_lo: int, sel_hi: int) -> Callable[[Batch], np.ndarray] | None:
    """A packed-f32 source as uint32 [k, 2, 64] (element 0, element 1), or [k, 1, 64] where
    both elements take one dword; only the selected dwords checked (as ops_vector._pk_rows)."""
    if isinstance(o, Imm):
        if sel_lo or sel_hi:
            return None
        g = bsrc32(o, True)
        return lambda b: g(b)[:, None, :]  # both elements: one dword, broadcast
    vi = _vreg(o, 2)
    if vi is not None and (sel_lo, sel_hi) == (0, 1):

        def pair(b: Batch) -> np.ndarray:
            if b.chk and not (vi in b.ok and vi + 1 in b.ok):
                _check_v(b, vi)
                _check_v(b, vi + 1)
            return b.V[:, vi : vi + 2]

        return pair
    if not isinstance(o, Reg) or o.count != 2 or o.neg or o.abs:
        return None
    halves = (bsrc32(Reg(o.file, o.index, 1)), bsrc32(Reg(o.file, o.index + 1, 1)))
    g_lo, g_hi = halves[sel_lo], halves[sel_hi]
    if g_lo is None or g_hi is None:
        return None
    if sel_lo == sel_hi:
        return lambda b: g_lo(b)[:, None, :]  # both elements: one dword, broadcast
    return lambda b: np.stack((g_lo(b), g_hi(b)), axis=1)


def _pk_f32(ins: Instr) -> BFn | None:
    nsrc = 3 if "fma" in ins.mnemonic else 2
    try:
        op_sel, op_sel_hi, neg_lo, neg_hi = ov._pk_sel(ins, nsrc)
    except Exception:
        return None
    if len(ins.operands) != nsrc + 1:
        return None
    dst = _vreg(ins.operands[0], 2)
    rows = [_pk_rows(o, op_sel[i], op_sel_hi[i]) for i, o in enumerate(ins.operands[1:])]
    if dst is None or any(r is None for r in rows):
        return None
    negs = [
        None if not (neg_lo[i] or neg_hi[i]) else np.array([[neg_lo[i] << 31] * LANES, [neg_hi[i] << 31] * LANES], dtype=U32)
        for i in range(nsrc)
    ]
    kind = "fma" if nsrc == 3 else "mul" if "mul" in ins.mnemonic else "add"

    def run(b: Batch) -> None:
        res = ov.pk_f32(kind, [g(b) for g in rows], negs)
        if res.shape[1] == 1:  # every source one dword
            res = np.broadcast_to(res, (b.k, 2, LANES))
        bwrite_vn(b, dst, res.view(U32))

    return run


for _m in ("v_pk_mul_f32", "v_pk_add_f32", "v_pk_fma_f32"):
    BVALU[_m] = _pk_f32


def _cvt_pk_fp8(ins: Instr) -> BFn | None:
    ms = dict(ins.modifiers)
    sel = modifier_list(ms.pop("op_sel"), 3) if "op_sel" in ms else [0, 0, 0]
    if ms or sel[0] or sel[1] or len(ins.operands) != 3:
        return None
    dst = _vreg(ins.operands[0])
    s0, s1 = bsrc32(ins.operands[1], True), bsrc32(ins.operands[2], True)
    if dst is None or s0 is None or s1 is None:
        return None
    hi = sel[2]

    def run(b: Batch) -> None:
        codes = nm.f32_to_e4m3(np.stack((s0(b), s1(b)), axis=1).view(np.float32))  # [k, (S0, S1), lane]
        if b.exec_mask() is None:
            dbytes = b.V[:, dst].view(np.uint8)
            dbytes[:, 2 * hi :: 4] = codes[:, 0]
            dbytes[:, 2 * hi + 1 :: 4] = codes[:, 1]
            if dst not in b.ok:
                _mark(b, dst, 0xC if hi else 0x3)
        else:
            bwrite_half(b, dst, hi, codes[:, 0].astype(np.uint16) | (codes[:, 1].astype(np.uint16) << np.uint16(8)))

    return run


BVALU["v_cvt_pk_fp8_f32"] = _cvt_pk_fp8


def _cvt_pk_f32_fp8(ins: Instr) -> BFn | None:
    try:
        sel = ov._word_sel(ins)
    except Exception:
        return None
    dst = _vreg(ins.operands[0], 2)
    s0 = bsrc32(ins.operands[1], need=0xC if sel else 0x3)
    if dst is None or s0 is None or len(ins.operands) != 2:
        return None
    b0 = 2 * sel

    def run(b: Batch) -> None:
        pair = np.ascontiguousarray(s0(b)).view(np.uint8).reshape(b.k, LANES, 4)[:, :, b0 : b0 + 2]
        vals = nm.E4M3_VALUES[pair].astype(np.float32)  # exact
        bwrite_vn(b, dst, vals.view(U32).transpose(0, 2, 1))

    return run


BVALU["v_cvt_pk_f32_fp8"] = _cvt_pk_f32_fp8


def _cvt_scalef32_pk_f16_fp8(ins: Instr) -> BFn | None:
    ms = dict(ins.modifiers)
    sel = modifier_list(ms.pop("op_sel"), 3) if "op_sel" in ms else [0, 0, 0]
    if ms or sel[1] or sel[2] or len(ins.operands) != 3:
        return None
    dst = _vreg(ins.operands[0])
    s0 = bsrc32(ins.operands[1], need=0xC if sel[0] else 0x3)
    s1 = bsrc32(ins.operands[2], True)
    if dst is None or s0 is None or s1 is None:
        return None
    word_sel = sel[0]
    lo_vals, hi_vals = nm.E4M3_WORD_VALUES

    def run(b: Batch) -> None:
        word = np.ascontiguousarray(s0(b)).view(np.uint16)[:, word_sel::2].astype(np.intp)
        scale = s1(b).view(np.float32).astype(np.float64)
        if b.exec_mask() is None:
            halves = b.V[:, dst].view(np.float16)
            halves[:, 0::2] = lo_vals[word] * scale  # exact product, one RNE in the f64 -> f16 cast
            halves[:, 1::2] = hi_vals[word] * scale
            if dst not in b.ok:
                _mark(b, dst, 0xF)
        else:
            h = np.empty((b.k, LANES, 2), dtype=np.float16)
            h[:, :, 0] = lo_vals[word] * scale
            h[:, :, 1] = hi_vals[word] * scale
            bwrite_v(b, dst, h.view(U32).reshape(b.k, LANES))

    return run


BVALU["v_cvt_scalef32_pk_f16_fp8"] = _cvt_scalef32_pk_f16_fp8


def _cvt_pk_16(ins: Instr) -> BFn | None:
    got = _srcs(ins, 2, True)
    if got is None:
        return None
    dst, (s0, s1) = got
    bf16 = "bf16" in ins.mnemonic

    def run(b: Batch) -> None:
        h = ov.pk16_halves(np.stack((s0(b), s1(b)), axis=1), bf16)  # [k, (S0, S1), lane]
        bwrite_v(b, dst, np.ascontiguousarray(h.transpose(0, 2, 1)).view(U32).reshape(b.k, LANES))

    return run


BVALU["v_cvt_pk_f16_f32"] = _cvt_pk_16
BVALU["v_cvt_pk_bf16_f32"] = _cvt_pk_16


def _fmac(ins: Instr) -> BFn | None:
    got = _srcs(ins, 2, True)
    if got is None:
        return None
    dst, (s0, s1) = got
    acc = bsrc32(Reg("v", dst), True)

    def run(b: Batch) -> None:
        bwrite_v(b, dst, ov.bits(nm.fma_f32(ov.f32v(s0(b)), ov.f32v(s1(b)), ov.f32v(acc(b)))))

    return run


def _div_scale(ins: Instr) -> BFn | None:
    if ins.modifiers or len(ins.operands) != 5:
        return None
    dst, cdst = _vreg(ins.operands[0]), _sreg(ins.operands[1], 2)
    srcs = [bsrc32(o, True) for o in ins.operands[2:5]]
    if dst is None or cdst is None or any(g is None for g in srcs):
        return None
    s0, s1, s2 = srcs

    def run(b: Batch) -> None:
        out, vcc = ov.div_scale(s0(b), s1(b), s2(b))
        bwrite_v(b, dst, out)
        bwrite_mask(b, cdst, vcc)

    return run


def _div_fmas(ins: Instr) -> BFn | None:
    got = _srcs(ins, 3, True)
    if got is None:
        return None
    dst, (s0, s1, s2) = got
    vcc = bmask_src(Reg("s", 106, 2))

    def run(b: Batch) -> None:
        x, y, z = s0(b), s1(b), s2(b)
        m = b.exec_mask()
        bwrite_v(b, dst, ov.div_fmas(x, y, z, vcc(b), True if m is None else m))

    return run


def _div_fixup(ins: Instr) -> BFn | None:
    got = _srcs(ins, 3, True)
    if got is None:
        return None
    dst, (s0, s1, s2) = got
    return lambda b: bwrite_v(b, dst, ov.div_fixup(s0(b), s1(b), s2(b)))


def _mad_u64(ins: Instr) -> BFn | None:
    """As ops_vector._mad64: an undefined high dword of a VGPR addend only makes D's high dword
    undefined (its outstanding load is still checked)."""
    if ins.modifiers or len(ins.operands) != 5:
        return None
    dst, cdst = _vreg(ins.operands[0], 2), _sreg(ins.operands[1], 2)
    s0, s1 = bsrc32(ins.operands[2]), bsrc32(ins.operands[3])
    ci = _vreg(ins.operands[4], 2)
    if ci is not None:

        def c_get(b: Batch) -> np.ndarray:
            if b.chk:
                if ci not in b.ok:
                    _check_v(b, ci)
                for w in b.waves:
                    if w.vpend[ci + 1]:
                        check_vgpr(b.at(w), w.x, ci + 1, need=0)
            return b.V[:, ci].astype(U64) | (b.V[:, ci + 1].astype(U64) << U64(32))

        c = c_get
    else:
        c = bsrc64(ins.operands[4])
    if dst is None or cdst is None or s0 is None or s1 is None or c is None:
        return None

    def run(b: Batch) -> None:
        p = s0(b).astype(U64) * s1(b).astype(U64)
        cv = c(b)
        r = p + cv
        hi_def = b.VDEF[:, ci + 1].copy() if ci is not None else None
        bwrite_v64(b, dst, r)
        if hi_def is not None:
            m = b.exec_mask()
            d = b.VDEF[:, dst + 1]
            if m is None:
                d &= hi_def
            else:
                d[m] &= hi_def[m]
            for w in b.waves:
                w.vfull[dst + 1] = False
            b.ok.discard(dst + 1)
        bwrite_mask(b, cdst, r < cv)

    return run


BVALU["v_fmac_f32"] = _fmac
BVALU["v_div_scale_f32"] = _div_scale
BVALU["v_div_fmas_f32"] = _div_fmas
BVALU["v_div_fixup_f32"] = _div_fixup
BVALU["v_mad_u64_u32"] = _mad_u64


def _nop(b: Batch) -> None:
    return None


def batched_form(ins: Instr, per_wave: Callable[[Any, Any], Any] | None = None) -> BFn | None:
    """The batched closure of one (already decoded) instruction, or None; memory forms need
    the instruction's per-wave closure (`per_wave`) for their slow path."""
    if ins.mnemonic == "s_nop":
        return _nop
    if ins.mnemonic in BMFMA:
        return BMFMA[ins.mnemonic](ins)
    if per_wave is not None:
        from kernel.isa.compiled_memory import BMEM

        if ins.mnemonic in BMEM:
            return BMEM[ins.mnemonic](ins, per_wave)
    base, enc = ov.base_name(ins.mnemonic)
    make = BVALU.get(base)
    if make is None or enc not in ("", "e32", "e64") and not (enc == "sdwa" and base == "v_cvt_pk_f32_fp8"):
        return None
    return make(ins)


def compile_batched(program: Program, d: Any, code: list | None = None) -> list[BFn | None]:
    """The batched closure of each instruction (given the per-wave closures `code`), or None
    where it runs wave by wave."""
    return [batched_form(ins, code[i] if code is not None else None) for i, ins in enumerate(program.instrs)]


# ------------------------------------------------------------------ MFMA (16x16 forms of ops_matrix)


def _rows_of(b: Batch, idx: int, n: int) -> np.ndarray:
    """ops_matrix._operand_rows per wave: [k, t, g, r] uint32, C-contiguous, checked."""
    if b.chk:
        for i in range(idx, idx + n):
            if i not in b.ok:
                _check_v(b, i)
    return np.ascontiguousarray(b.V[:, idx : idx + n].reshape(b.k, n, 4, 16).transpose(0, 3, 2, 1))


def _bacc(op: Operand) -> Callable[[Batch], np.ndarray] | None:
    """The C operand as float64 [k, 16, 16] (m, n), as ops_matrix._acc."""
    if isinstance(op, Imm):
        return (lambda b: np.zeros((b.k, 16, 16))) if op.bits == 0 else None
    ic = _vreg(op, 4)
    if ic is None:
        return None

    def get(b: Batch) -> np.ndarray:
        if b.chk:
            for i in range(ic, ic + 4):
                if i not in b.ok:
                    _check_v(b, i)
        return b.V[:, ic : ic + 4].view(np.float32).reshape(b.k, 4, 4, 16).transpose(0, 2, 1, 3).reshape(b.k, 16, 16).astype(np.float64)

    return get


def _bstore_d(b: Batch, dst: int, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """D = A @ B + C per wave, rounded once to f32, into dword r of lane 16 g + t (as
    ops_matrix._store_d). The stacked float64 matmul forms each wave's product as the per-wave
    2-D `@` does (numpy's matmul loop calls the same BLAS gemm per matrix; tests/kernel/isa/
    test_batched.py checks the bits on operands with a wide exponent spread)."""
    vals = (np.matmul(A, B) + C).astype(np.float32).reshape(b.k, 4, 4, 16).transpose(0, 2, 1, 3).reshape(b.k, 4, LANES)
    bwrite_vn(b, dst, vals.view(U32))


def _mods_ok(ins: Instr, allowed: dict[str, str]) -> bool:
    return all(k in allowed and str(v) == allowed[k] for k, v in ins.modifiers.items())


def _mfma_16x16x32(ins: Instr) -> BFn | None:
    if not _mods_ok(ins, {"cbsz": "0", "abid": "0", "blgp": "0"}) or len(ins.operands) != 4:
        return None
    dst, ia, ib = _vreg(ins.operands[0], 4), _vreg(ins.operands[1], 4), _vreg(ins.operands[2], 4)
    c = _bacc(ins.operands[3])
    if dst is None or ia is None or ib is None or c is None:
        return None
    bf16 = ins.mnemonic.endswith("bf16")

    def dec(rows: np.ndarray) -> np.ndarray:  # [k, t, g, r] dwords -> [k, t, 8 g + j] values
        if bf16:
            return (rows.view(np.uint16).astype(U32) << U32(16)).view(np.float32).reshape(-1, 16, 32).astype(np.float64)
        return rows.view(np.float16).reshape(-1, 16, 32).astype(np.float64)

    def run(b: Batch) -> None:
        A = dec(_rows_of(b, ia, 4))
        B = np.ascontiguousarray(dec(_rows_of(b, ib, 4)).transpose(0, 2, 1))
        _bstore_d(b, dst, A, B, c(b))

    return run


def _mfma_scale(ins: Instr) -> BFn | None:
    from kernel.isa import ops_matrix as om

    ms = dict(ins.modifiers)
    sel = modifier_list(ms.pop("op_sel"), 3) if "op_sel" in ms else [0, 0, 0]
    selhi = modifier_list(ms.pop("op_sel_hi"), 3) if "op_sel_hi" in ms else [0, 0, 0]
    for k in ("cbsz", "blgp"):
        if k in ms and str(ms[k]) == "0":
            ms.pop(k)
    if ms or any(sel) or any(selhi) or len(ins.operands) != 6:
        return None
    dst, ia, ib = _vreg(ins.operands[0], 4), _vreg(ins.operands[1], 8), _vreg(ins.operands[2], 8)
    c = _bacc(ins.operands[3])
    isa, isb = _vreg(ins.operands[4]), _vreg(ins.operands[5])
    if dst is None or ia is None or ib is None or c is None or isa is None or isb is None:
        return None
    split = om._k_of_f8() is None

    def operand(b: Batch, idx: int) -> np.ndarray:  # [k, t, K] E4M3 values
        v = _rows_of(b, idx, 8).view(np.uint8).reshape(b.k, 16, 4, 32)
        if split:
            v = v.reshape(b.k, 16, 4, 2, 16).transpose(0, 1, 3, 2, 4)
        return nm.E4M3_VALUES[v.reshape(b.k, 16, 128)]

    def run(b: Batch) -> None:
        A = operand(b, ia)
        B = operand(b, ib)
        if b.chk:
            for i in (isa, isb):
                if i not in b.ok:
                    _check_v(b, i, 0x1)
        sa = om.E8M0_VALUES[b.V[:, isa].view(np.uint8)[:, ::4]].reshape(b.k, 4, 16)  # [k, kb, m]
        sb = om.E8M0_VALUES[b.V[:, isb].view(np.uint8)[:, ::4]].reshape(b.k, 4, 16)  # [k, kb, n]
        As = (A.reshape(b.k, 16, 4, 32) * sa.transpose(0, 2, 1)[:, :, :, None]).reshape(b.k, 16, 128)
        Bs = (B.transpose(0, 2, 1).reshape(b.k, 4, 32, 16) * sb[:, :, None, :]).reshape(b.k, 128, 16)
        _bstore_d(b, dst, As, Bs, c(b))

    return run


BMFMA = {
    "v_mfma_f32_16x16x32_f16": _mfma_16x16x32,
    "v_mfma_f32_16x16x32_bf16": _mfma_16x16x32,
    "v_mfma_scale_f32_16x16x128_f8f6f4": _mfma_scale,
}
