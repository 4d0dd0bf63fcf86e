"""VALU semantics (VOP1 / VOP2 / VOP3 / VOPC / VOP3P / SDWA forms the kernel uses).

Each factory takes the decoded instruction and returns `fn(wave, executor)`; results are written
on EXEC lanes only. Sources per opcode: the CDNA3 ISA reference guide ("AMD Instinct MI300
Instruction Set Architecture", ch. 12 "Instructions", VOP1/VOP2/VOP3/VOPC/VOP3P opcode
descriptions, which CDNA4 keeps for these opcodes) and LLVM's VOP*Instructions.td /
llvm/test/MC/AMDGPU/gfx950_*.s for the gfx950 additions (permlane swaps, scaled conversions,
v_cvt_pk_f32_fp8 forms). docs/reference/isa-opcodes.md lists every opcode with its source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernel.isa import numerics as nm
from kernel.isa.asm import Imm, Instr, Reg, modifier_list
from kernel.isa.consts import K
from kernel.isa.errors import UnknownInstruction, UnsupportedOperands
from kernel.isa.operands import (
    check_vgpr,
    lane_mask_src,
    require,
    sdst,
    src32,
    src64,
    src64_lo_checked,
    src_pair,
    vdst,
    write_half,
    write_s,
    write_v,
    write_v64,
    write_vn,
)
from kernel.isa.state import LANES, QUIET, Wave, mask_to_int

Fn = Callable[[Wave, Any], int | None]
U32 = np.uint32
M32 = np.uint64(0xFFFFFFFF)

VALU: dict[str, Callable[[Instr, Any], Fn]] = {}


def op(*names: str):
    def deco(f):
        for n in names:
            VALU[n] = f
        return f

    return deco


def base_name(m: str) -> tuple[str, str]:
    for suf in ("_e32", "_e64", "_sdwa", "_dpp"):
        if m.endswith(suf):
            return m[: -len(suf)], suf[1:]
    return m, ""


def no_modifiers(ins: Instr, allowed: tuple[str, ...] = ()) -> None:
    extra = [k for k in ins.modifiers if k not in allowed]
    if extra:
        raise UnknownInstruction(f"`{ins.text}` (#{ins.index}): modifier(s) {extra} not modelled for {ins.mnemonic}")


def f32v(a: np.ndarray) -> np.ndarray:
    return a.view(np.float32)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(U32)


# ------------------------------------------------------------------ integer

_INT2 = {
    "v_add_u32": lambda a, b: a + b,
    "v_sub_u32": lambda a, b: a - b,
    "v_subrev_u32": lambda a, b: b - a,
    "v_and_b32": lambda a, b: a & b,
    "v_or_b32": lambda a, b: a | b,
    "v_xor_b32": lambda a, b: a ^ b,
    "v_lshlrev_b32": lambda a, b: b << (a & U32(31)),
    "v_lshrrev_b32": lambda a, b: b >> (a & U32(31)),
    "v_ashrrev_i32": lambda a, b: (b.view(np.int32) >> (a & U32(31)).astype(np.int32)).view(U32),
    "v_max_i32": lambda a, b: np.maximum(a.view(np.int32), b.view(np.int32)).view(U32),
    "v_min_i32": lambda a, b: np.minimum(a.view(np.int32), b.view(np.int32)).view(U32),
    "v_max_u32": np.maximum,
    "v_min_u32": np.minimum,
    "v_mul_lo_u32": lambda a, b: ((a.astype(np.uint64) * b.astype(np.uint64)) & M32).astype(U32),
    "v_mul_u32_u24": lambda a, b: ((a & U32(0xFFFFFF)).astype(np.uint64) * (b & U32(0xFFFFFF)).astype(np.uint64) & M32).astype(U32),
}
_INT3 = {
    "v_add3_u32": lambda a, b, c: a + b + c,
    "v_add_lshl_u32": lambda a, b, c: (a + b) << (c & U32(31)),
    "v_lshl_add_u32": lambda a, b, c: (a << (b & U32(31))) + c,
    "v_lshl_or_b32": lambda a, b, c: (a << (b & U32(31))) | c,
    "v_and_or_b32": lambda a, b, c: (a & b) | c,
    "v_or3_b32": lambda a, b, c: a | b | c,
    "v_xor3_b32": lambda a, b, c: a ^ b ^ c,
    "v_bfe_u32": lambda a, b, c: (a >> (b & U32(31))) & ((U32(1) << (c & U32(31))) - U32(1)),
    "v_max3_i32": lambda a, b, c: np.maximum(np.maximum(a.view(np.int32), b.view(np.int32)), c.view(np.int32)).view(U32),
    "v_min3_i32": lambda a, b, c: np.minimum(np.minimum(a.view(np.int32), b.view(np.int32)), c.view(np.int32)).view(U32),
    "v_max3_u32": lambda a, b, c: np.maximum(np.maximum(a, b), c),
    "v_min3_u32": lambda a, b, c: np.minimum(np.minimum(a, b), c),
    "v_med3_i32": lambda a, b, c: _med3(a.view(np.int32), b.view(np.int32), c.view(np.int32)).view(U32),
    "v_med3_u32": lambda a, b, c: _med3(a, b, c),
    "v_mad_u32_u24": lambda a, b, c: (
        ((a & U32(0xFFFFFF)).astype(np.uint64) * (b & U32(0xFFFFFF)).astype(np.uint64) + c.astype(np.uint64)) & M32
    ).astype(U32),
}


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _int_factory(fn, n):
    def make(ins: Instr, d: Any) -> Fn:
        no_modifiers(ins)
        require(len(ins.operands) == n + 1, ins, "operand count")
        dst = vdst(ins, ins.operands[0])
        srcs = [src32(ins, o) for o in ins.operands[1:]]
        if n == 2:
            s0, s1 = srcs

            def run2(w: Wave, x: Any) -> None:  # uint32 array arithmetic wraps silently
                write_v(w, dst, fn(s0(w, x), s1(w, x)).astype(U32, copy=False))

            return run2
        s0, s1, s2 = srcs

        def run3(w: Wave, x: Any) -> None:
            write_v(w, dst, fn(s0(w, x), s1(w, x), s2(w, x)).astype(U32, copy=False))

        return run3

    return make


for _n, _f in _INT2.items():
    VALU[_n] = _int_factory(_f, 2)
for _n, _f in _INT3.items():
    VALU[_n] = _int_factory(_f, 3)


@op("v_mov_b32")
def _mov(ins: Instr, d: Any) -> Fn:
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0])
    s = src32(ins, ins.operands[1])
    return lambda w, x: write_v(w, dst, s(w, x))


@op("v_mov_b64")
def _mov64(ins: Instr, d: Any) -> Fn:
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0], 2)
    s = src64(ins, ins.operands[1])
    return lambda w, x: write_v64(w, dst, s(w, x))


@op("v_cndmask_b32")
def _cndmask(ins: Instr, d: Any) -> Fn:
    """D = mask[lane] ? S1 : S0 (mask = VCC or an SGPR pair)."""
    no_modifiers(ins)
    require(len(ins.operands) == 4, ins, "operand count")
    dst = vdst(ins, ins.operands[0])
    s0 = src32(ins, ins.operands[1], flt=True)
    s1 = src32(ins, ins.operands[2], flt=True)
    m = lane_mask_src(ins, ins.operands[3])
    return lambda w, x: write_v(w, dst, np.where(m(w, x), s1(w, x), s0(w, x)))


@op("v_readfirstlane_b32")
def _readfirstlane(ins: Instr, d: Any) -> Fn:
    """SDST = S0 of the lowest active lane (lane 0 when EXEC = 0)."""
    no_modifiers(ins)
    dst = sdst(ins, ins.operands[0])
    src = ins.operands[1]
    require(isinstance(src, Reg) and src.file == "v" and src.count == 1, ins, "source")
    idx = src.index

    def run(w: Wave, x: Any) -> None:
        act = np.nonzero(w.exec)[0]
        lane = int(act[0]) if act.size else 0
        if x.chk:
            check_vgpr(w, x, idx, lanes=np.arange(LANES) == lane)
        write_s(w, dst, int(w.v[idx][lane]))

    return run


@op("v_addc_co_u32", "v_add_co_u32", "v_sub_co_u32", "v_subb_co_u32")
def _addc(ins: Instr, d: Any) -> Fn:
    """D = S0 + S1 (+ carry-in S2 for addc); SDST[lane] = carry out (borrow for sub)."""
    no_modifiers(ins)
    name = base_name(ins.mnemonic)[0]
    carry_in = name in ("v_addc_co_u32", "v_subb_co_u32")
    require(len(ins.operands) == (5 if carry_in else 4), ins, "operand count")
    dst = vdst(ins, ins.operands[0])
    cdst = sdst(ins, ins.operands[1], 2)
    s0 = src32(ins, ins.operands[2])
    s1 = src32(ins, ins.operands[3])
    cin = lane_mask_src(ins, ins.operands[4]) if carry_in else None
    sub = name.startswith("v_sub")

    def run(w: Wave, x: Any) -> None:
        a = s0(w, x).astype(np.int64)
        b = s1(w, x).astype(np.int64)
        c = cin(w, x).astype(np.int64) if cin else 0
        r = a - b - c if sub else a + b + c
        carry = (r < 0) if sub else (r > 0xFFFFFFFF)
        write_v(w, dst, (r & 0xFFFFFFFF).astype(U32))
        write_s(w, cdst, mask_to_int(carry & w.exec), 2)

    return run


@op("v_mad_u64_u32")
def _mad64(ins: Instr, d: Any) -> Fn:
    """{D1, D0} = S0 * S1 + S2 (u32 x u32 + u64); SDST[lane] = carry out of the 64-bit sum."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0], 2)
    cdst = sdst(ins, ins.operands[1], 2)
    s0 = src32(ins, ins.operands[2])
    s1 = src32(ins, ins.operands[3])
    s2, s2_hi = src64_lo_checked(ins, ins.operands[4])

    def run(w: Wave, x: Any) -> None:
        p = s0(w, x).astype(np.uint64) * s1(w, x).astype(np.uint64)
        c = s2(w, x)
        r = p + c
        hi_def = w.vdef[s2_hi].copy() if s2_hi is not None else None
        write_v64(w, dst, r)
        if hi_def is not None:  # an undefined high addend leaves D's high dword undefined (no read of it yet)
            w.vdef[dst + 1][w.exec] &= hi_def[w.exec]
            w.vfull[dst + 1] = False
        write_s(w, cdst, mask_to_int((r < c) & w.exec), 2)

    return run


@op("v_lshl_add_u64")
def _lshl_add64(ins: Instr, d: Any) -> Fn:
    """D64 = (S0_64 << S1[2:0]) + S2_64 (gfx940+; shift amount 0..4)."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0], 2)
    s0 = src64(ins, ins.operands[1])
    s1 = src32(ins, ins.operands[2])
    s2 = src64(ins, ins.operands[3])

    sop = ins.operands[2]
    if isinstance(sop, Imm) and 0 <= sop.value <= 4:  # the usual form: a constant shift
        ksh = K(sop.value, np.uint64)

        def run_k(w: Wave, x: Any) -> None:
            write_v64(w, dst, (s0(w, x) << ksh) + s2(w, x))

        return run_k

    def run(w: Wave, x: Any) -> None:
        sh = s1(w, x)
        if np.count_nonzero(sh > K(4)):
            raise UnsupportedOperands(f"`{ins.text}`: shift {int(sh.max())} > 4 (the instruction takes 0..4)")
        write_v64(w, dst, (s0(w, x) << sh.astype(np.uint64)) + s2(w, x))

    return run


@op("v_lshlrev_b64", "v_lshrrev_b64")
def _shift64(ins: Instr, d: Any) -> Fn:
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0], 2)
    s0 = src32(ins, ins.operands[1])
    s1 = src64(ins, ins.operands[2])
    left = "lshl" in ins.mnemonic

    def run(w: Wave, x: Any) -> None:
        sh = (s0(w, x) & U32(63)).astype(np.uint64)
        v = s1(w, x)
        write_v64(w, dst, (v << sh) if left else (v >> sh))

    return run


# ------------------------------------------------------------------ compares

_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lg": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _cmp_factory(ins: Instr, d: Any) -> Fn:
    """VOPC: SDST[lane] = S0 <op> S1 on active lanes, 0 on inactive lanes."""
    no_modifiers(ins)
    name, _enc = base_name(ins.mnemonic)
    parts = name.split("_")  # v cmp <op> <type>
    require(len(parts) == 4, ins, "compare form")
    cop, ty = parts[2], parts[3]
    require(cop in _CMP, ins, f"compare {cop}")
    require(len(ins.operands) == 3, ins, "operand count")
    dst = sdst(ins, ins.operands[0], 2)
    fn = _CMP[cop]
    if ty in ("u64", "i64"):
        a, b = src64(ins, ins.operands[1]), src64(ins, ins.operands[2])
        conv = (lambda v: v) if ty == "u64" else (lambda v: v.view(np.int64))
    else:
        require(ty in ("i32", "u32", "f32"), ins, f"compare type {ty}")
        a, b = src32(ins, ins.operands[1], flt=ty == "f32"), src32(ins, ins.operands[2], flt=ty == "f32")
        conv = {"i32": lambda v: v.view(np.int32), "u32": lambda v: v, "f32": lambda v: v.view(np.float32)}[ty]
    if ty == "f32" and cop == "lg":

        def fn(p: Any, q: Any) -> Any:
            return (p < q) | (p > q)

    def run(w: Wave, x: Any) -> None:
        with QUIET:
            r = fn(conv(a(w, x)), conv(b(w, x)))
        write_s(w, dst, mask_to_int(r if w.exec_all else r & w.exec), 2)

    return run


for _c in _CMP:
    for _t in ("i32", "u32", "f32", "u64", "i64"):
        VALU[f"v_cmp_{_c}_{_t}"] = _cmp_factory


# ------------------------------------------------------------------ f32 arithmetic


def _fmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE-mode maximum: a NaN operand yields the other operand (both NaN: quiet NaN);
    -0 < +0 (CDNA ISA V_MAX_F32 with IEEE mode on, as the descriptor sets)."""
    fa, fb = a.view(np.float32), b.view(np.float32)
    r = np.fmax(fa, fb)
    zero = (fa == 0) & (fb == 0)
    if zero.any():
        r = np.where(zero, np.where(np.signbit(fa) & np.signbit(fb), np.float32(-0.0), np.float32(0.0)), r)
    r = np.where(np.isnan(fa) & np.isnan(fb), np.float32(np.nan), r)
    return bits(r)


def _fmin(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fa, fb = a.view(np.float32), b.view(np.float32)
    r = np.fmin(fa, fb)
    zero = (fa == 0) & (fb == 0)
    if zero.any():
        r = np.where(zero, np.where(np.signbit(fa) | np.signbit(fb), np.float32(-0.0), np.float32(0.0)), r)
    r = np.where(np.isnan(fa) & np.isnan(fb), np.float32(np.nan), r)
    return bits(r)


_F2 = {
    "v_add_f32": lambda a, b: bits(f32v(a) + f32v(b)),
    "v_sub_f32": lambda a, b: bits(f32v(a) - f32v(b)),
    "v_subrev_f32": lambda a, b: bits(f32v(b) - f32v(a)),
    "v_mul_f32": lambda a, b: bits(f32v(a) * f32v(b)),
    "v_max_f32": _fmax,
    "v_min_f32": _fmin,
}
_F3 = {
    "v_max3_f32": lambda a, b, c: _fmax(_fmax(a, b), c),
    "v_min3_f32": lambda a, b, c: _fmin(_fmin(a, b), c),
    "v_fma_f32": lambda a, b, c: bits(nm.fma_f32(f32v(a), f32v(b), f32v(c))),
}
_F1 = {
    "v_exp_f32": lambda a: bits(nm.exp2_f32(f32v(a))),
    "v_log_f32": lambda a: bits(nm.log2_f32(f32v(a))),
    "v_rcp_f32": lambda a: bits(nm.rcp_f32(f32v(a))),
}


def _float_factory(fn, n):
    def make(ins: Instr, d: Any) -> Fn:
        no_modifiers(ins)
        require(len(ins.operands) == n + 1, ins, "operand count")
        dst = vdst(ins, ins.operands[0])
        srcs = [src32(ins, o, flt=True) for o in ins.operands[1:]]

        def run(w: Wave, x: Any) -> None:
            with QUIET:
                write_v(w, dst, fn(*[s(w, x) for s in srcs]))

        return run

    return make


for _tbl, _n in ((_F1, 1), (_F2, 2), (_F3, 3)):
    for _k, _f in _tbl.items():
        VALU[_k] = _float_factory(_f, _n)


@op("v_fmac_f32")
def _fmac(ins: Instr, d: Any) -> Fn:
    """D = fma(S0, S1, D), one rounding."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0])
    s0 = src32(ins, ins.operands[1], flt=True)
    s1 = src32(ins, ins.operands[2], flt=True)
    acc = src32(ins, Reg("v", dst), flt=True)

    def run(w: Wave, x: Any) -> None:
        with QUIET:
            write_v(w, dst, bits(nm.fma_f32(f32v(s0(w, x)), f32v(s1(w, x)), f32v(acc(w, x)))))

    return run


def _exp_field(v: np.ndarray) -> np.ndarray:
    return ((v >> U32(23)) & U32(0xFF)).astype(np.int64)


@op("v_div_scale_f32")
def _div_scale(ins: Instr, d: Any) -> Fn:
    """V_DIV_SCALE_F32 D, VCC, S0, S1 (denominator), S2 (numerator), per the CDNA3 ISA
    pseudocode: VCC = 0, D = S0; then the first matching case: S2 == 0 or S1 == 0 -> D = NaN;
    exp(S2) - exp(S1) >= 96 -> VCC = 1, D = S0 * 2^64 if S0 == S1; S1 denormal -> D = S0 * 2^64;
    1/S1 denormal and S2/S1 denormal -> VCC = 1, D = S0 * 2^64 if S0 == S1; 1/S1 denormal ->
    D = S0 * 2^-64; S2/S1 denormal -> VCC = 1, D = S0 * 2^64 if S0 == S2; exp(S2) <= 23 ->
    D = S0 * 2^64 (exp = biased exponent field)."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0])
    cdst = sdst(ins, ins.operands[1], 2)
    s0 = src32(ins, ins.operands[2], flt=True)
    s1 = src32(ins, ins.operands[3], flt=True)
    s2 = src32(ins, ins.operands[4], flt=True)

    def run(w: Wave, x: Any) -> None:
        out, vcc = div_scale(s0(w, x), s1(w, x), s2(w, x))
        write_v(w, dst, out)
        write_s(w, cdst, mask_to_int(vcc & w.exec), 2)

    return run


def div_scale(a: np.ndarray, den: np.ndarray, num: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V_DIV_SCALE_F32 on f32 bits of any shape: (D bits, VCC bool), as documented above."""
    fa = a.view(np.float32).astype(np.float64)
    fd, fn_ = den.view(np.float32).astype(np.float64), num.view(np.float32).astype(np.float64)
    ed, en = _exp_field(den), _exp_field(num)
    with QUIET:
        rcp_den = np.abs(1.0 / fd) < 2.0**-1022  # as f64 denormal
        quo_den = (np.abs(fn_ / fd) < 2.0**-126) & (fn_ / fd != 0)
    denorm_d = (ed == 0) & (fd != 0)
    up = np.ldexp(fa, 64)
    out = fa.copy()
    vcc = np.zeros(a.shape, dtype=bool)
    done = np.zeros(a.shape, dtype=bool)

    def case(cond, val=None, setv=False):
        nonlocal out, vcc, done
        c = cond & ~done
        if val is not None:
            out = np.where(c, val, out)
        if setv:
            vcc = vcc | c
        done = done | c

    case((fn_ == 0) | (fd == 0), np.nan)
    c = (en - ed >= 96) & ~done
    case(c & (fa == fd), up, True)
    case(c, None, True)
    case(denorm_d, up)
    c = rcp_den & quo_den & ~done
    case(c & (fa == fd), up, True)
    case(c, None, True)
    case(rcp_den, np.ldexp(fa, -64))
    c = quo_den & ~done
    case(c & (fa == fn_), up, True)
    case(c, None, True)
    case(en <= 23, up)
    return bits(nm.round_f64_to_f32(out)), vcc


@op("v_div_fmas_f32")
def _div_fmas(ins: Instr, d: Any) -> Fn:
    """D = fma(S0, S1, S2), times 2^32 on lanes where VCC is set (CDNA3 ISA V_DIV_FMAS_F32)."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0])
    s = [src32(ins, o, flt=True) for o in ins.operands[1:4]]
    vcc = lane_mask_src(ins, Reg("s", 106, 2))

    def run(w: Wave, x: Any) -> None:
        a, b, c = s[0](w, x), s[1](w, x), s[2](w, x)
        write_v(w, dst, div_fmas(a, b, c, vcc(w, x), w.exec))

    return run


def div_fmas(a: np.ndarray, b: np.ndarray, c: np.ndarray, m: np.ndarray, act: np.ndarray) -> np.ndarray:
    """V_DIV_FMAS_F32 on f32 bits of any shape: fma(a, b, c), times 2^32 where the lane mask
    m is set (act: the active lanes, m's broadcastable shape)."""
    with QUIET:
        r = nm.fma_f32(f32v(a), f32v(b), f32v(c))
        if (m & act).any():
            r = np.where(m, nm.round_f64_to_f32(r.astype(np.float64) * 2.0**32), r)
    return bits(r)


@op("v_div_fixup_f32")
def _div_fixup(ins: Instr, d: Any) -> Fn:
    """V_DIV_FIXUP_F32 D, S0 (quotient), S1 (denominator), S2 (numerator), CDNA3 ISA pseudocode
    order: S2 NaN -> S2 (quieted); S1 NaN -> S1; 0/0 or inf/inf -> NaN; S1 == 0 or |S2| == inf
    -> +-inf; |S1| == inf or S2 == 0 -> +-0; exp(S2) - exp(S1) < -150 -> +-0 (underflow);
    exp(S1) == 255 -> +-inf (overflow); else |S0| with the sign of S1 * S2."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0])
    q_, d_, n_ = (src32(ins, o, flt=True) for o in ins.operands[1:4])

    def run(w: Wave, x: Any) -> None:
        qb, db, nb = (g(w, x) for g in (q_, d_, n_))
        write_v(w, dst, div_fixup(qb, db, nb))

    return run


def div_fixup(qb: np.ndarray, db: np.ndarray, nb: np.ndarray) -> np.ndarray:
    """V_DIV_FIXUP_F32 on f32 bits of any shape (quotient, denominator, numerator), as
    documented above."""
    q, den, num = (f32v(v).astype(np.float64) for v in (qb, db, nb))
    sign = np.signbit(den) ^ np.signbit(num)
    ed, en = _exp_field(db), _exp_field(nb)
    with QUIET:
        mag = np.abs(q)
        conds = [
            (np.isnan(num), num),
            (np.isnan(den), den),
            (((den == 0) & (num == 0)) | (np.isinf(den) & np.isinf(num)), np.nan),
            ((den == 0) | np.isinf(num), np.where(sign, -np.inf, np.inf)),
            (np.isinf(den) | (num == 0), np.where(sign, -0.0, 0.0)),
            (en - ed < -150, np.where(sign, -0.0, 0.0)),
            (ed == 255, np.where(sign, -np.inf, np.inf)),
        ]
        r = np.where(sign, -mag, mag)
        for cond, val in reversed(conds):
            r = np.where(cond, val, r)
    return bits(r.astype(np.float32))


# ------------------------------------------------------------------ packed f32 (VOP3P)


def _pk_sel(ins: Instr, nsrc: int) -> tuple[list[int], list[int], list[int], list[int]]:
    ms = {k: ins.modifiers[k] for k in ins.modifiers}
    op_sel = modifier_list(ms.pop("op_sel"), nsrc) if "op_sel" in ms else [0] * nsrc
    op_sel_hi = modifier_list(ms.pop("op_sel_hi"), nsrc) if "op_sel_hi" in ms else [1] * nsrc
    neg_lo = modifier_list(ms.pop("neg_lo"), nsrc) if "neg_lo" in ms else [0] * nsrc
    neg_hi = modifier_list(ms.pop("neg_hi"), nsrc) if "neg_hi" in ms else [0] * nsrc
    if ms:
        raise UnknownInstruction(f"`{ins.text}`: modifier(s) {list(ms)} not modelled")
    return op_sel, op_sel_hi, neg_lo, neg_hi


@op("v_pk_mul_f32", "v_pk_add_f32", "v_pk_fma_f32")
def _pk_f32(ins: Instr, d: Any) -> Fn:
    """Packed f32 (gfx90a+): element 0 of D from the dwords op_sel picks, element 1 from those
    op_sel_hi picks (default: lo, hi); neg_lo / neg_hi negate per element (LLVM VOP3P:
    VOP3PInstructions.td, V_PK_*_F32; CDNA3 ISA VOP3P). Only the selected dwords of a source
    are read (checked): an unselected half is not an operand. An inline constant is its 32-bit
    value in the low dword; selecting the high dword of a constant is refused at decode (its
    value is not documented for packed f32)."""
    name = ins.mnemonic
    nsrc = 3 if "fma" in name else 2
    op_sel, op_sel_hi, neg_lo, neg_hi = _pk_sel(ins, nsrc)
    require(len(ins.operands) == nsrc + 1, ins, "operand count")
    dst = vdst(ins, ins.operands[0], 2)
    get_lo, get_hi = [], []
    for i, o in enumerate(ins.operands[1:]):
        if isinstance(o, Imm):
            require(not op_sel[i] and not op_sel_hi[i], ins, "high dword of an inline constant in a packed f32 operand")
            g = src32(ins, o, flt=True)
            get_lo.append(g)
            get_hi.append(g)
            continue
        require(isinstance(o, Reg) and o.count == 2 and not o.neg and not o.abs, ins, "packed source")
        pair = src_pair(ins, o)
        get_lo.append(pair[op_sel[i]])
        get_hi.append(pair[op_sel_hi[i]])
    rows = [_pk_rows(o, get_lo[i], get_hi[i], op_sel[i], op_sel_hi[i]) for i, o in enumerate(ins.operands[1:])]
    negs = [
        None if not (neg_lo[i] or neg_hi[i]) else np.array([[neg_lo[i] << 31] * LANES, [neg_hi[i] << 31] * LANES], dtype=U32)
        for i in range(nsrc)
    ]
    kind = "fma" if nsrc == 3 else "mul" if "mul" in name else "add"

    def run(w: Wave, x: Any) -> None:
        write_vn(w, dst, pk_f32(kind, [g(w, x) for g in rows], negs).view(U32))

    return run


def pk_f32(kind: str, rows: list[np.ndarray], negs: list[np.ndarray | None]) -> np.ndarray:
    """Packed f32 `kind` (mul, add, fma) of the sources' uint32 rows [..., (element 0,
    element 1), lane], each first negated where its neg mask (sign bits) is given; f32 result."""
    ops = [(r if n is None else r ^ n).view(np.float32) for r, n in zip(rows, negs)]
    if kind == "mul":
        return ops[0] * ops[1]
    if kind == "add":
        return ops[0] + ops[1]
    return nm.fma_f32(*ops)


def _pk_rows(o: Any, g_lo: Any, g_hi: Any, sel_lo: int, sel_hi: int) -> Callable[[Wave, Any], np.ndarray]:
    """A packed-f32 source as [2, 64] uint32 rows (element 0, element 1): the VGPR pair itself
    (a view) when op_sel / op_sel_hi pick (lo, hi); else the two getters' dwords (checked by
    them). Only the selected dwords are checked."""
    if isinstance(o, Reg) and o.file == "v" and (sel_lo, sel_hi) == (0, 1):
        idx = o.index

        def pair(w: Wave, x: Any) -> np.ndarray:
            if x.chk and not (w.vfull[idx] and w.vfull[idx + 1] and not w.vpend[idx] and not w.vpend[idx + 1]):
                g_lo(w, x)
                g_hi(w, x)
            return w.v[idx : idx + 2]

        return pair
    if g_lo is g_hi:  # both elements take one dword: one read

        def same(w: Wave, x: Any) -> np.ndarray:
            r = g_lo(w, x)
            return np.array((r, r))

        return same
    return lambda w, x: np.array((g_lo(w, x), g_hi(w, x)))


# ------------------------------------------------------------------ conversions


@op("v_cvt_pk_fp8_f32")
def _cvt_pk_fp8(ins: Instr, d: Any) -> Fn:
    """D.word[op_sel[2]] = {e4m3(S1), e4m3(S0)} (byte 0 = S0), RNE, no saturation without clamp;
    the other word of D is kept (LLVM VOP3Instructions.td V_CVT_PK_FP8_F32, gfx950 OCP FP8;
    the op_sel:[0,0,1] form writes the high word)."""
    ms = dict(ins.modifiers)
    sel = modifier_list(ms.pop("op_sel"), 3) if "op_sel" in ms else [0, 0, 0]
    if ms or sel[0] or sel[1]:
        raise UnknownInstruction(f"`{ins.text}`: modifiers {ins.modifiers} not modelled")
    dst = vdst(ins, ins.operands[0])
    s0 = src32(ins, ins.operands[1], flt=True)
    s1 = src32(ins, ins.operands[2], flt=True)
    hi = sel[2]

    def run(w: Wave, x: Any) -> None:
        codes = nm.f32_to_e4m3(np.array((s0(w, x), s1(w, x))).view(np.float32))  # [(S0, S1), lane]
        # the other word is kept, not read: its definedness carries over
        if w.exec_all:
            dbytes = w.v[dst].view(np.uint8)
            dbytes[2 * hi :: 4] = codes[0]
            dbytes[2 * hi + 1 :: 4] = codes[1]
            if not w.vfull[dst]:
                w.vdef[dst] |= 0xC if hi else 0x3
        else:
            write_half(w, dst, hi, codes[0].astype(np.uint16) | (codes[1].astype(np.uint16) << np.uint16(8)))

    return run


def _word_sel(ins: Instr) -> int:
    """Which 16-bit word of S0 a v_cvt_pk_f32_fp8 reads: SDWA src0_sel WORD_0/WORD_1 or
    VOP3 op_sel[0]."""
    ms = dict(ins.modifiers)
    sel = 0
    if "src0_sel" in ms:
        v = ms.pop("src0_sel")
        if v not in ("WORD_0", "WORD_1"):
            raise UnknownInstruction(f"`{ins.text}`: src0_sel:{v} not modelled")
        sel = 1 if v == "WORD_1" else 0
    if "op_sel" in ms:
        s = modifier_list(ms.pop("op_sel"), 2)
        if s[1]:
            raise UnknownInstruction(f"`{ins.text}`: op_sel {s} not modelled")
        sel = s[0]
    if ms:
        raise UnknownInstruction(f"`{ins.text}`: modifier(s) {list(ms)} not modelled")
    return sel


@op("v_cvt_pk_f32_fp8")
def _cvt_pk_f32_fp8(ins: Instr, d: Any) -> Fn:
    """{D+1, D} = f32(e4m3 byte 1, byte 0 of the selected word of S0), exact
    (LLVM VOP1Instructions.td V_CVT_PK_F32_FP8; SDWA src0_sel WORD_1 reads bytes 2-3)."""
    sel = _word_sel(ins)
    dst = vdst(ins, ins.operands[0], 2)
    s0 = src32(ins, ins.operands[1], need=0xC if sel else 0x3)

    b0 = 2 * sel

    def run(w: Wave, x: Any) -> None:
        pair = np.ascontiguousarray(s0(w, x)).view(np.uint8).reshape(LANES, 4)[:, b0 : b0 + 2]  # [lane, (byte 0, byte 1)]
        vals = nm.E4M3_VALUES[pair].astype(np.float32)  # exact
        write_vn(w, dst, vals.view(U32).T)

    return run


@op("v_cvt_scalef32_pk_f16_fp8")
def _cvt_scalef32_pk_f16_fp8(ins: Instr, d: Any) -> Fn:
    """D = {f16(e4m3(b1) * S1), f16(e4m3(b0) * S1)} for bytes b0, b1 of the word op_sel[0]
    selects in S0; S1 is the f32 scale; one RNE rounding (LLVM VOP3Instructions.td
    V_CVT_SCALEF32_PK_F16_FP8, gfx950)."""
    ms = dict(ins.modifiers)
    sel = modifier_list(ms.pop("op_sel"), 3) if "op_sel" in ms else [0, 0, 0]
    if ms or sel[1] or sel[2]:
        raise UnknownInstruction(f"`{ins.text}`: modifiers {ins.modifiers} not modelled")
    dst = vdst(ins, ins.operands[0])
    s0 = src32(ins, ins.operands[1], need=0xC if sel[0] else 0x3)
    s1 = src32(ins, ins.operands[2], flt=True)

    word_sel = sel[0]
    lo_vals, hi_vals = nm.E4M3_WORD_VALUES

    def run(w: Wave, x: Any) -> None:
        word = np.ascontiguousarray(s0(w, x)).view(np.uint16)[word_sel::2].astype(np.intp)
        scale = f32v(s1(w, x)).astype(np.float64)
        if w.exec_all:
            halves = w.v[dst].view(np.float16)
            halves[0::2] = lo_vals[word] * scale  # exact product, one RNE in the f64 -> f16 cast
            halves[1::2] = hi_vals[word] * scale
            if not w.vfull[dst]:
                w.vdef[dst] = 0xF
                w.vfull[dst] = True
        else:
            h = np.empty((LANES, 2), dtype=np.float16)
            h[:, 0] = lo_vals[word] * scale
            h[:, 1] = hi_vals[word] * scale
            write_v(w, dst, h.view(U32).reshape(LANES))

    return run


@op("v_cvt_pk_f16_f32", "v_cvt_pk_bf16_f32")
def _cvt_pk_16(ins: Instr, d: Any) -> Fn:
    """D = {cvt(S1), cvt(S0)} (low half from S0), RNE; bf16 NaN stays a quiet NaN
    (gfx950: V_CVT_PK_BF16_F32; V_CVT_PK_F16_F32 honours the f16 RNE mode)."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0])
    s0 = src32(ins, ins.operands[1], flt=True)
    s1 = src32(ins, ins.operands[2], flt=True)
    bf16 = "bf16" in ins.mnemonic

    def run(w: Wave, x: Any) -> None:
        h = pk16_halves(np.array((s0(w, x), s1(w, x))), bf16)  # [(S0, S1), lane]
        write_v(w, dst, np.ascontiguousarray(h.T).view(U32).reshape(LANES))  # low half from S0

    return run


def pk16_halves(b: np.ndarray, bf16: bool) -> np.ndarray:
    """f32 bits (any shape) -> bf16 (RNE on the bits, NaN -> quiet NaN; no overflow: a non-NaN
    pattern is at most 0xFF800000) or f16 (numpy's cast: RNE, subnormals kept) bits, uint16."""
    if not bf16:
        return b.view(np.float32).astype(np.float16).view(np.uint16)
    sh = b.shape
    top = b >> K(16, U32, sh)
    rounded = (b + K(0x7FFF, U32, sh) + (top & K(1, U32, sh))) >> K(16, U32, sh)
    return np.where((b & K(0x7FFFFFFF, U32, sh)) > K(0x7F800000, U32, sh), top | K(0x40, U32, sh), rounded).astype(np.uint16)


# ------------------------------------------------------------------ cross-lane


@op("v_permlane16_swap_b32", "v_permlane32_swap_b32")
def _permlane_swap(ins: Instr, d: Any) -> Fn:
    """gfx950: permlane16_swap swaps the odd 16-lane rows of VDST with the even rows of VSRC
    (rows 1<->0, 3<->2); permlane32_swap swaps the upper 32 lanes of VDST with the lower 32 of
    VSRC. Both registers are written (LLVM VOP1Instructions.td, GFX950 permlane swaps;
    AMDGPUUsage). Requires a full EXEC (a partial EXEC is not modelled)."""
    no_modifiers(ins)
    a = vdst(ins, ins.operands[0])
    b = vdst(ins, ins.operands[1])
    span = 16 if "16" in ins.mnemonic else 32

    def run(w: Wave, x: Any) -> None:
        if not w.exec_all:
            raise UnsupportedOperands(f"`{ins.text}`: partial EXEC not modelled")
        if x.chk:
            check_vgpr(w, x, a)
            check_vgpr(w, x, b)
        va, vb = w.v[a].copy(), w.v[b].copy()
        for r0 in range(0, LANES, 2 * span):
            hi = slice(r0 + span, r0 + 2 * span)
            lo = slice(r0, r0 + span)
            va[hi], vb[lo] = w.v[b][lo], w.v[a][hi]
        w.v[a] = va
        w.v[b] = vb

    return run


@op("v_bitop3_b32", "v_bitop3_b16")
def _bitop3(ins: Instr, d: Any) -> Fn:
    """gfx950 V_BITOP3_B32: bit i of D = TTBL[(S0[i] << 2) | (S1[i] << 1) | S2[i]] with the 8-bit
    truth table `bitop3:` (LLVM SIISelLowering::getBitOp3: S0 = 0xF0, S1 = 0xCC, S2 = 0xAA)."""
    ms = dict(ins.modifiers)
    require("bitop3" in ms and len(ms) == 1 and ins.mnemonic == "v_bitop3_b32", ins, "bitop3 form")
    tt = int(str(ms["bitop3"]), 0)
    dst = vdst(ins, ins.operands[0])
    s = [src32(ins, o) for o in ins.operands[1:4]]

    def run(w: Wave, x: Any) -> None:
        a, b, c = (g(w, x) for g in s)
        na, nb, nc = ~a, ~b, ~c
        r = np.zeros(LANES, dtype=U32)
        for i in range(8):
            if (tt >> i) & 1:
                r |= (a if i & 4 else na) & (b if i & 2 else nb) & (c if i & 1 else nc)
        write_v(w, dst, r)

    return run


VALU["v_xad_u32"] = _int_factory(lambda a, b, c: (a ^ b) + c, 3)


# ------------------------------------------------------------------ opcodes of foreign FlyDSL kernels

_FCMP_NEG = {  # negated compares: true when the ordered compare is false (so true on NaN)
    "neq": np.equal,
    "nlt": np.less,
    "nle": np.less_equal,
    "ngt": np.greater,
    "nge": np.greater_equal,
}


def _fcmp_extra_factory(ins: Instr, d: Any) -> Fn:
    """VOPC f32 compares beyond the ordered six (CDNA3 ISA VOPC table): neq/nlt/nle/ngt/nge are
    the negations of eq/lt/le/gt/ge (true when either operand is NaN), nlg = !(a < b || a > b),
    o = neither is NaN, u = either is NaN, f = 0, tru = 1; 0 on inactive lanes."""
    no_modifiers(ins)
    name, _enc = base_name(ins.mnemonic)
    cop = name.split("_")[2]
    require(len(ins.operands) == 3, ins, "operand count")
    dst = sdst(ins, ins.operands[0], 2)
    a, b = src32(ins, ins.operands[1], flt=True), src32(ins, ins.operands[2], flt=True)

    def run(w: Wave, x: Any) -> None:
        p, q = a(w, x).view(np.float32), b(w, x).view(np.float32)
        with QUIET:
            if cop in _FCMP_NEG:
                r = ~_FCMP_NEG[cop](p, q)
            elif cop == "nlg":
                r = ~((p < q) | (p > q))
            elif cop == "o":
                r = ~(np.isnan(p) | np.isnan(q))
            elif cop == "u":
                r = np.isnan(p) | np.isnan(q)
            elif cop == "f":
                r = np.zeros(LANES, dtype=bool)
            else:  # tru
                r = np.ones(LANES, dtype=bool)
        write_s(w, dst, mask_to_int(r if w.exec_all else r & w.exec), 2)

    return run


for _c in (*_FCMP_NEG, "nlg", "o", "u", "f", "tru"):
    VALU[f"v_cmp_{_c}_f32"] = _fcmp_extra_factory


@op("v_subbrev_co_u32", "v_subrev_co_u32")
def _subrev_co(ins: Instr, d: Any) -> Fn:
    """D = S1 - S0 (- borrow-in S2 for subbrev); SDST[lane] = borrow out (CDNA3 ISA VOP2 /
    VOP3b V_SUBREV_CO_U32, V_SUBBREV_CO_U32: D = S1 - S0 - VCC, VCC = borrow)."""
    no_modifiers(ins)
    carry_in = base_name(ins.mnemonic)[0] == "v_subbrev_co_u32"
    require(len(ins.operands) == (5 if carry_in else 4), ins, "operand count")
    dst = vdst(ins, ins.operands[0])
    cdst = sdst(ins, ins.operands[1], 2)
    s0 = src32(ins, ins.operands[2])
    s1 = src32(ins, ins.operands[3])
    cin = lane_mask_src(ins, ins.operands[4]) if carry_in else None

    def run(w: Wave, x: Any) -> None:
        c = cin(w, x).astype(np.int64) if cin else 0
        r = s1(w, x).astype(np.int64) - s0(w, x).astype(np.int64) - c
        write_v(w, dst, (r & 0xFFFFFFFF).astype(U32))
        write_s(w, cdst, mask_to_int((r < 0) & w.exec), 2)

    return run


@op("v_mad_i64_i32")
def _mad_i64(ins: Instr, d: Any) -> Fn:
    """{SDST[lane], D.i64} = 65-bit sext(S0.i32) * sext(S1.i32) + sext(S2.i64) (CDNA3 ISA VOP3b
    V_MAD_I64_I32): D is the low 64 bits, SDST bit 64 of the 65-bit two's-complement sum."""
    no_modifiers(ins)
    dst = vdst(ins, ins.operands[0], 2)
    cdst = sdst(ins, ins.operands[1], 2)
    s0 = src32(ins, ins.operands[2])
    s1 = src32(ins, ins.operands[3])
    s2 = src64(ins, ins.operands[4])

    def run(w: Wave, x: Any) -> None:
        p = s0(w, x).view(np.int32).astype(np.int64) * s1(w, x).view(np.int32).astype(np.int64)  # |p| <= 2^62
        c = s2(w, x).view(np.int64)
        with QUIET:
            s = p + c  # wraps mod 2^64
        pos_ovf = (p >= 0) & (c >= 0) & (s < 0)
        neg_ovf = (p < 0) & (c < 0) & (s >= 0)
        bit64 = neg_ovf | (~pos_ovf & (s < 0))
        write_v64(w, dst, s.view(np.uint64))
        write_s(w, cdst, mask_to_int(bit64 & w.exec), 2)

    return run


@op("v_ldexp_f32")
def _ldexp(ins: Instr, d: Any) -> Fn:
    """D = S0 * 2^S1 (S1 a signed integer), one RNE rounding, denormals kept (CDNA3 ISA VOP2 /
    VOP3 V_LDEXP_F32). Formed exactly in float64 with S1 clamped to +-300 (beyond that every
    finite non-zero f32 over- or underflows either way), then rounded once to f32."""
    no_modifiers(ins)
    require(len(ins.operands) == 3, ins, "operand count")
    dst = vdst(ins, ins.operands[0])
    s0 = src32(ins, ins.operands[1], flt=True)
    s1 = src32(ins, ins.operands[2])

    def run(w: Wave, x: Any) -> None:
        e = np.clip(s1(w, x).view(np.int32).astype(np.int64), -300, 300)
        with QUIET:
            r = np.ldexp(f32v(s0(w, x)).astype(np.float64), e)
        write_v(w, dst, bits(nm.round_f64_to_f32(r)))

    return run


def _byte_permute(hi: np.ndarray, lo: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """CDNA3 ISA V_PERM_B32 BYTE_PERMUTE on the 8 bytes {hi (S0): bytes 4-7, lo (S1): bytes 0-3}
    for each selector byte: 0-7 pick that byte, 8-11 replicate the sign bit of byte 1, 3, 5, 7
    (bits 15, 31, 47, 63), 12 gives 0x00, 13-255 give 0xFF."""
    v = lo.astype(np.uint64) | (hi.astype(np.uint64) << np.uint64(32))
    out = np.zeros(lo.shape, dtype=U32)
    for i in range(4):
        s = ((sel >> U32(8 * i)) & U32(0xFF)).astype(np.uint64)
        byte = (v >> (np.minimum(s, np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
        sign_bit = np.array([15, 31, 47, 63], dtype=np.uint64)[np.clip(s.astype(np.int64) - 8, 0, 3)]
        sign = np.where((v >> sign_bit) & np.uint64(1), np.uint64(0xFF), np.uint64(0))
        b = np.where(s < 8, byte, np.where(s < 12, sign, np.where(s == 12, np.uint64(0), np.uint64(0xFF))))
        out |= b.astype(U32) << U32(8 * i)
    return out


VALU["v_perm_b32"] = _int_factory(_byte_permute, 3)


def _fmaximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE 754-2019 maximum (gfx950 V_MAXIMUM3_F32): NaN if either is NaN, -0 < +0."""
    fa, fb = a.view(np.float32), b.view(np.float32)
    r = np.maximum(fa, fb)  # numpy maximum propagates NaN
    zero = (fa == 0) & (fb == 0)
    if zero.any():
        r = np.where(zero, np.where(np.signbit(fa) & np.signbit(fb), np.float32(-0.0), np.float32(0.0)), r)
    return bits(r)


def _fminimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fa, fb = a.view(np.float32), b.view(np.float32)
    r = np.minimum(fa, fb)
    zero = (fa == 0) & (fb == 0)
    if zero.any():
        r = np.where(zero, np.where(np.signbit(fa) | np.signbit(fb), np.float32(-0.0), np.float32(0.0)), r)
    return bits(r)


VALU["v_maximum3_f32"] = _float_factory(lambda a, b, c: _fmaximum(_fmaximum(a, b), c), 3)
VALU["v_minimum3_f32"] = _float_factory(lambda a, b, c: _fminimum(_fminimum(a, b), c), 3)


@op("v_pk_mov_b32")
def _pk_mov(ins: Instr, d: Any) -> Fn:
    """gfx90a+ V_PK_MOV_B32 D[0:1], S0[0:1], S1[0:1]: D.lo = S0 dword op_sel[0], D.hi = S1 dword
    op_sel[1] (LLVM VOP3PInstructions.td V_PK_MOV_B32; only the selected dwords are read)."""
    ms = dict(ins.modifiers)
    sel = modifier_list(ms.pop("op_sel"), 2) if "op_sel" in ms else [0, 0]
    if "op_sel_hi" in ms:
        ms.pop("op_sel_hi")  # ignored by V_PK_MOV_B32
    if ms:
        raise UnknownInstruction(f"`{ins.text}`: modifier(s) {list(ms)} not modelled")
    dst = vdst(ins, ins.operands[0], 2)
    g0 = src_pair(ins, ins.operands[1])[sel[0]]
    g1 = src_pair(ins, ins.operands[2])[sel[1]]

    def run(w: Wave, x: Any) -> None:
        lo, hi = g0(w, x).copy(), g1(w, x).copy()
        write_v(w, dst, lo)
        write_v(w, dst + 1, hi)

    return run
