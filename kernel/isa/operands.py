"""Operand access for decoded instructions: getters and setters built once per instruction
(decode time) and called per execution with (wave, executor).

Conventions (LLVM AMDGPU / CDNA ISA "Instruction operands"): an inline integer constant is the
integer's two's-complement bits (in a float operation too); a float inline constant is its f32
bits; a 32-bit literal used as a 64-bit integer operand is zero-extended, an inline integer is
sign-extended. Source modifiers neg / abs act on the sign bit of f32 operands only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernel.isa.asm import Imm, Instr, Operand, Reg, Special
from kernel.isa.consts import K
from kernel.isa.errors import Finding, UnknownInstruction
from kernel.isa.state import EXEC, LANES, Wave, int_to_mask

Getter = Callable[[Wave, Any], np.ndarray]
SGetter = Callable[[Wave, Any], int]

SIGN32 = np.uint32(0x80000000)
ABS32 = np.uint32(0x7FFFFFFF)


def lanes_of(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.nonzero(mask)[0]]


def report(x: Any, w: Wave, kind: str, lanes: list[int], detail: str) -> None:
    ins = x.instrs[w.pc]
    x.checks.report(Finding(kind, x.wg.wgid, w.wid, w.pc, ins.text, lanes, detail))


def check_vgpr(w: Wave, x: Any, idx: int, need: int = 0xF, lanes: np.ndarray | None = None) -> None:
    """Definedness (bytes `need`) and outstanding-load checks of v[idx] on `lanes` (default EXEC)."""
    if w.vfull[idx] and not w.vpend[idx]:
        return
    m = w.exec if lanes is None else lanes
    d = w.vdef[idx]
    if (d == 0xF).all():
        w.vfull[idx] = True
    else:
        bad = m & ((d & need) != need)
        if bad.any():
            report(x, w, "uninitialized_read", lanes_of(bad), f"v{idx} read before any write")
    if w.vpend[idx]:
        report(x, w, "register_before_wait", lanes_of(m), f"v{idx} read while a load into it is outstanding (no s_waitcnt covering it)")


def check_sgpr(w: Wave, x: Any, idx: int, n: int) -> None:
    for i in range(idx, idx + n):
        if not w.sdef[i]:
            report(x, w, "uninitialized_read", [], f"s{i} read before any write")
            return
        if w.spend[i]:
            report(x, w, "register_before_wait", [], f"s{i} read while a scalar load into it is outstanding (no s_waitcnt lgkmcnt(0))")
            return


def require(cond: bool, ins: Instr, what: str) -> None:
    if not cond:
        raise UnknownInstruction(f"`{ins.text}` (#{ins.index}): unsupported {what}")


def src32(ins: Instr, op: Operand, flt: bool = False, need: int = 0xF) -> Getter:
    """A 32-bit source as a uint32 lane vector (neg/abs applied when flt)."""
    if isinstance(op, Imm):
        bits = op.bits & 0xFFFFFFFF
        const = np.full(LANES, bits, dtype=np.uint32)
        const.setflags(write=False)
        return lambda w, x: const
    if not isinstance(op, Reg):
        raise UnknownInstruction(f"`{ins.text}`: operand {op} is not a 32-bit source")
    if (op.neg or op.abs) and not flt:
        raise UnknownInstruction(f"`{ins.text}`: neg/abs on an integer operand")
    if op.count != 1:
        raise UnknownInstruction(f"`{ins.text}`: {op.count}-dword register where one dword is read")
    idx = op.index
    neg, ab = op.neg, op.abs

    def mod(val: np.ndarray) -> np.ndarray:
        if ab:
            val = val & ABS32
        if neg:
            val = val ^ SIGN32
        return val

    if op.file == "v":
        if neg or ab:

            def g(w: Wave, x: Any) -> np.ndarray:
                if x.chk and not (w.vfull[idx] and not w.vpend[idx]):
                    check_vgpr(w, x, idx, need)
                return mod(w.v[idx])
        else:

            def g(w: Wave, x: Any) -> np.ndarray:
                if x.chk and not (w.vfull[idx] and not w.vpend[idx]):
                    check_vgpr(w, x, idx, need)
                return w.v[idx]

        return g

    if neg or ab:

        def gsm(w: Wave, x: Any) -> np.ndarray:
            if x.chk and (not w.sdef[idx] or w.spend[idx]):
                check_sgpr(w, x, idx, 1)
            return mod(np.full(LANES, w.s[idx], dtype=np.uint32))

        return gsm

    def gs(w: Wave, x: Any) -> np.ndarray:
        if x.chk and (not w.sdef[idx] or w.spend[idx]):
            check_sgpr(w, x, idx, 1)
        return K(w.s[idx])  # shared, read-only (as an inline constant's array)

    return gs


def src64(ins: Instr, op: Operand) -> Getter:
    """A 64-bit integer source as a uint64 lane vector."""
    if isinstance(op, Imm):
        val = (op.value & 0xFFFFFFFFFFFFFFFF) if not op.literal else (op.bits & 0xFFFFFFFF)
        if op.is_float:
            raise UnknownInstruction(f"`{ins.text}`: float constant as a 64-bit operand")
        const = np.full(LANES, val, dtype=np.uint64)
        const.setflags(write=False)
        return lambda w, x: const
    if not isinstance(op, Reg) or op.count != 2 or op.neg or op.abs:
        raise UnknownInstruction(f"`{ins.text}`: operand {op} is not a 64-bit source")
    idx = op.index
    if op.file == "v":

        def g(w: Wave, x: Any) -> np.ndarray:
            if x.chk and not (w.vfull[idx] and w.vfull[idx + 1] and not w.vpend[idx] and not w.vpend[idx + 1]):
                check_vgpr(w, x, idx)
                check_vgpr(w, x, idx + 1)
            return np.ascontiguousarray(w.v[idx : idx + 2].T).view(np.uint64).reshape(LANES)

        return g

    def gs(w: Wave, x: Any) -> np.ndarray:
        if x.chk:
            check_sgpr(w, x, idx, 2)
        return np.full(LANES, w.s[idx] | (w.s[idx + 1] << 32), dtype=np.uint64)

    return gs


def src64_lo_checked(ins: Instr, op: Operand) -> tuple[Getter, int | None]:
    """A 64-bit source whose high dword is not checked for definedness (its undefinedness is
    propagated to the result's high dword by the caller instead, memcheck style); returns the
    getter and the VGPR index of the high dword (None for SGPR / constant sources)."""
    if isinstance(op, Reg) and op.file == "v" and op.count == 2 and not op.neg and not op.abs:
        idx = op.index

        def g(w: Wave, x: Any) -> np.ndarray:
            if x.chk:
                check_vgpr(w, x, idx)
                if w.vpend[idx + 1]:
                    check_vgpr(w, x, idx + 1, need=0)
            return w.v[idx].astype(np.uint64) | (w.v[idx + 1].astype(np.uint64) << np.uint64(32))

        return g, idx + 1
    return src64(ins, op), None


def src_pair(ins: Instr, op: Operand, need: int = 0xF) -> tuple[Getter, Getter]:
    """The two dwords of a 64-bit register operand as two 32-bit getters (packed-f32 ops)."""
    if not isinstance(op, Reg) or op.count != 2:
        raise UnknownInstruction(f"`{ins.text}`: operand {op} is not a register pair")
    lo = Reg(op.file, op.index, 1)
    hi = Reg(op.file, op.index + 1, 1)
    return src32(ins, lo, need=need), src32(ins, hi, need=need)


def vdst(ins: Instr, op: Operand, count: int = 1) -> int:
    """Index of a VGPR destination of `count` dwords (decode-time validation)."""
    if not isinstance(op, Reg) or op.file != "v" or op.count != count or op.neg or op.abs:
        raise UnknownInstruction(f"`{ins.text}`: destination {op} is not {count} VGPR(s)")
    return op.index


def write_v(w: Wave, idx: int, val: np.ndarray, bytemask: int = 0xF) -> None:
    """v[idx] = val on EXEC lanes; `bytemask` bytes become defined."""
    if w.exec_all:
        w.v[idx] = val
        if not w.vfull[idx]:
            if bytemask == 0xF:
                w.vdef[idx] = 0xF
                w.vfull[idx] = True
            else:
                w.vdef[idx] |= bytemask
    else:
        m = w.exec
        np.copyto(w.v[idx], val.astype(np.uint32, copy=False), where=m)
        w.vdef[idx][m] |= bytemask


def write_vn(w: Wave, idx: int, vals: np.ndarray) -> None:
    """v[idx + i] = vals[i] (uint32 [n, 64]) on EXEC lanes, all bytes defined."""
    n = vals.shape[0]
    if w.exec_all:
        w.v[idx : idx + n] = vals
        full = w.vfull
        for i in range(idx, idx + n):
            if not full[i]:
                w.vdef[i] = 0xF
                full[i] = True
    else:
        for i in range(n):
            write_v(w, idx + i, vals[i])


def write_half(w: Wave, idx: int, hi: int, word: np.ndarray) -> None:
    """The low (hi = 0) or high (hi = 1) 16-bit word of v[idx] = word (uint16 [64]) on EXEC
    lanes; the other word (value and definedness) is kept."""
    if w.exec_all:
        w.v[idx].view(np.uint16)[hi::2] = word
        if not w.vfull[idx]:
            w.vdef[idx] |= 0xC if hi else 0x3
    else:
        prev = w.v[idx]
        word = word.astype(np.uint32)
        val = (prev & np.uint32(0xFFFF)) | (word << np.uint32(16)) if hi else (prev & np.uint32(0xFFFF0000)) | word
        write_v(w, idx, val, 0xC if hi else 0x3)


def write_v64(w: Wave, idx: int, val: np.ndarray) -> None:
    """{v[idx + 1], v[idx]} = val (uint64 [64]) on EXEC lanes."""
    write_vn(w, idx, np.ascontiguousarray(val).view(np.uint32).reshape(LANES, 2).T)


def sdst(ins: Instr, op: Operand, count: int = 1) -> int:
    if not isinstance(op, Reg) or op.file != "s" or op.count != count:
        raise UnknownInstruction(f"`{ins.text}`: destination {op} is not {count} SGPR(s)")
    return op.index


def write_s(w: Wave, idx: int, val: int, count: int = 1) -> None:
    for i in range(count):
        w.s[idx + i] = (val >> (32 * i)) & 0xFFFFFFFF
        w.sdef[idx + i] = True
        w.spend[idx + i] = 0
    if idx <= EXEC + 1 and idx + count > EXEC:
        w.set_exec_from_sgprs()


def ssrc(ins: Instr, op: Operand, count: int = 1) -> SGetter:
    """A scalar source of `count` dwords as a Python int (inline ints sign-extend to 64 bits;
    32-bit literals zero-extend)."""
    if isinstance(op, Imm):
        if count == 1:
            val = op.bits & 0xFFFFFFFF
        else:
            val = (op.bits & 0xFFFFFFFF) if op.literal else (op.value & 0xFFFFFFFFFFFFFFFF)
        return lambda w, x: val
    if not isinstance(op, Reg) or op.file != "s" or op.count != count or op.neg or op.abs:
        raise UnknownInstruction(f"`{ins.text}`: operand {op} is not a {count}-dword scalar source")
    idx = op.index
    if count == 1:

        def g(w: Wave, x: Any) -> int:
            if x.chk and (not w.sdef[idx] or w.spend[idx]):
                check_sgpr(w, x, idx, 1)
            return w.s[idx]

        return g

    def g2(w: Wave, x: Any) -> int:
        if x.chk:
            check_sgpr(w, x, idx, count)
        v = 0
        for i in range(count):
            v |= w.s[idx + i] << (32 * i)
        return v

    return g2


def lane_mask_src(ins: Instr, op: Operand) -> Callable[[Wave, Any], np.ndarray]:
    """A 64-bit lane mask operand (vcc or an SGPR pair) as bool[64]."""
    g = ssrc(ins, op, 2)
    return lambda w, x: int_to_mask(g(w, x))


def is_off(op: Operand) -> bool:
    return isinstance(op, Special) and op.name == "off"
