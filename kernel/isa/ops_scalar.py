"""SALU, SOPP (branches, barrier, waitcnt) and SMEM semantics.

Source: CDNA3 ISA reference guide, ch. 12.1-12.4 (SOP2, SOPK, SOP1, SOPC, SOPP opcodes: result
and SCC definitions) and ch. 12.6 (SMEM); s_waitcnt counter fields per LLVM AMDGPU
(AMDGPUBaseInfo: gfx9 vmcnt 6 bits, lgkmcnt 4 bits). Control returns: None = next instruction,
an int >= 0 = branch target index, BARRIER / ENDPGM = scheduler events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernel.isa.asm import Imm, Instr, Label, Reg
from kernel.isa.errors import Finding, UnknownInstruction
from kernel.isa.operands import report, require, sdst, ssrc, write_s
from kernel.isa.state import PendingOp, Wave, int_to_mask

BARRIER = -1
ENDPGM = -2
Fn = Callable[[Wave, Any], int | None]
SALU: dict[str, Callable[[Instr, Any], Fn]] = {}
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def op(*names: str):
    def deco(f):
        for n in names:
            SALU[n] = f
        return f

    return deco


def _s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v & 0x80000000 else v


def _no_mods(ins: Instr) -> None:
    if ins.modifiers:
        raise UnknownInstruction(f"`{ins.text}`: modifiers {ins.modifiers} not modelled")


def _scc_of(w: Wave, x: Any) -> int:
    if x.chk and not w.scc_def:
        report(x, w, "uninitialized_read", [], "SCC read before any write")
    return w.scc


# (result, scc) for SOP2 ops on Python ints of the operand width
def _sop2_table(name: str, width: int) -> Callable[[int, int, Wave, Any], tuple[int, int | None]]:
    mask = M32 if width == 32 else M64
    t = {
        "s_and": lambda a, b, w, x: (a & b, int((a & b) != 0)),
        "s_or": lambda a, b, w, x: (a | b, int((a | b) != 0)),
        "s_xor": lambda a, b, w, x: (a ^ b, int((a ^ b) != 0)),
        "s_andn2": lambda a, b, w, x: (a & ~b & mask, int((a & ~b & mask) != 0)),
        "s_orn2": lambda a, b, w, x: ((a | ~b) & mask, int(((a | ~b) & mask) != 0)),
        "s_nand": lambda a, b, w, x: (~(a & b) & mask, int((~(a & b) & mask) != 0)),
        "s_nor": lambda a, b, w, x: (~(a | b) & mask, int((~(a | b) & mask) != 0)),
        "s_lshl": lambda a, b, w, x: ((a << (b & (width - 1))) & mask, int(((a << (b & (width - 1))) & mask) != 0)),
        "s_lshr": lambda a, b, w, x: (a >> (b & (width - 1)), int((a >> (b & (width - 1))) != 0)),
        "s_ashr": lambda a, b, w, x: (
            ((a - (1 << width) if a >> (width - 1) else a) >> (b & (width - 1))) & mask,
            int((((a - (1 << width) if a >> (width - 1) else a) >> (b & (width - 1))) & mask) != 0),
        ),
    }
    base = name.rsplit("_", 1)[0]
    if base in t:
        return t[base]
    if width != 32:
        raise KeyError(name)
    if name == "s_add_u32":
        return lambda a, b, w, x: ((a + b) & M32, int(a + b > M32))
    if name == "s_sub_u32":
        return lambda a, b, w, x: ((a - b) & M32, int(b > a))
    if name == "s_addc_u32":
        return lambda a, b, w, x: ((a + b + _scc_of(w, x)) & M32, int(a + b + w.scc > M32))
    if name == "s_subb_u32":
        return lambda a, b, w, x: ((a - b - _scc_of(w, x)) & M32, int(b + w.scc > a))
    if name == "s_add_i32":
        return lambda a, b, w, x: ((a + b) & M32, int(not -(1 << 31) <= _s32(a) + _s32(b) < (1 << 31)))
    if name == "s_sub_i32":
        return lambda a, b, w, x: ((a - b) & M32, int(not -(1 << 31) <= _s32(a) - _s32(b) < (1 << 31)))
    if name == "s_mul_i32":
        return lambda a, b, w, x: ((_s32(a) * _s32(b)) & M32, None)
    if name == "s_mul_hi_u32":
        return lambda a, b, w, x: (((a * b) >> 32) & M32, None)
    if name == "s_mul_hi_i32":
        return lambda a, b, w, x: (((_s32(a) * _s32(b)) >> 32) & M32, None)
    if name == "s_max_i32":
        return lambda a, b, w, x: ((a if _s32(a) > _s32(b) else b), int(_s32(a) > _s32(b)))
    if name == "s_min_i32":
        return lambda a, b, w, x: ((a if _s32(a) < _s32(b) else b), int(_s32(a) < _s32(b)))
    if name == "s_max_u32":
        return lambda a, b, w, x: ((max(b, a)), int(a > b))
    if name == "s_min_u32":
        return lambda a, b, w, x: ((min(b, a)), int(a < b))
    if name in ("s_lshl1_add_u32", "s_lshl2_add_u32", "s_lshl3_add_u32", "s_lshl4_add_u32"):
        k = int(name[6])
        return lambda a, b, w, x: ((((a << k) & M32) + b) & M32, int(((a << k) & M32) + b > M32))
    if name == "s_bfe_u32":
        return lambda a, b, w, x: (
            (a >> (b & 31)) & ((1 << ((b >> 16) & 0x7F)) - 1) & M32,
            int(((a >> (b & 31)) & ((1 << ((b >> 16) & 0x7F)) - 1)) != 0),
        )
    raise KeyError(name)


_SOP2 = [f"{p}_b32" for p in ("s_and", "s_or", "s_xor", "s_andn2", "s_orn2", "s_nand", "s_nor", "s_lshl", "s_lshr")]
_SOP2 += [f"{p}_b64" for p in ("s_and", "s_or", "s_xor", "s_andn2", "s_orn2", "s_nand", "s_nor", "s_lshl", "s_lshr")]
_SOP2 += [
    "s_ashr_i32",
    "s_ashr_i64",
    "s_add_u32",
    "s_sub_u32",
    "s_addc_u32",
    "s_subb_u32",
    "s_add_i32",
    "s_sub_i32",
    "s_mul_i32",
    "s_mul_hi_u32",
    "s_mul_hi_i32",
    "s_max_i32",
    "s_min_i32",
    "s_max_u32",
    "s_min_u32",
    "s_bfe_u32",
    "s_lshl1_add_u32",
    "s_lshl2_add_u32",
    "s_lshl3_add_u32",
    "s_lshl4_add_u32",
]


def _sop2_factory(ins: Instr, d: Any) -> Fn:
    _no_mods(ins)
    name = ins.mnemonic
    width = 64 if name.endswith("64") else 32
    fn = _sop2_table(name, width)
    n = width // 32
    dst = sdst(ins, ins.operands[0], n)
    a = ssrc(ins, ins.operands[1], n)
    # shift amounts are 32-bit operands even in the 64-bit forms
    b = ssrc(ins, ins.operands[2], 1 if name.startswith(("s_lshl_b64", "s_lshr_b64", "s_ashr_i64")) else n)

    def run(w: Wave, x: Any) -> None:
        r, scc = fn(a(w, x), b(w, x), w, x)
        write_s(w, dst, r, n)
        if scc is not None:
            w.scc, w.scc_def = scc, True

    return run


for _n in _SOP2:
    SALU[_n] = _sop2_factory


@op("s_mov_b32", "s_mov_b64", "s_not_b32", "s_not_b64", "s_movk_i32", "s_brev_b32")
def _sop1(ins: Instr, d: Any) -> Fn:
    _no_mods(ins)
    name = ins.mnemonic
    n = 2 if name.endswith("64") else 1
    dst = sdst(ins, ins.operands[0], n)
    if name == "s_movk_i32":
        o = ins.operands[1]
        require(isinstance(o, Imm), ins, "SIMM16 operand")
        v = o.value & 0xFFFF
        v = (v - 0x10000 if v & 0x8000 else v) & M32
        return lambda w, x: write_s(w, dst, v)
    a = ssrc(ins, ins.operands[1], n)
    mask = M32 if n == 1 else M64
    if name.startswith("s_not"):

        def run_not(w: Wave, x: Any) -> None:
            r = ~a(w, x) & mask
            write_s(w, dst, r, n)
            w.scc, w.scc_def = int(r != 0), True

        return run_not
    if name == "s_brev_b32":
        return lambda w, x: write_s(w, dst, int(f"{a(w, x):032b}"[::-1], 2))
    return lambda w, x: write_s(w, dst, a(w, x), n)


@op("s_addk_i32", "s_mulk_i32")
def _sopk(ins: Instr, d: Any) -> Fn:
    """D = D + SIMM16 (sign-extended), SCC = signed overflow (s_addk_i32); D = D * SIMM16 (s_mulk_i32)."""
    _no_mods(ins)
    dst = sdst(ins, ins.operands[0])
    o = ins.operands[1]
    require(isinstance(o, Imm), ins, "SIMM16 operand")
    k = o.value & 0xFFFF
    k = k - 0x10000 if k & 0x8000 else k
    cur = ssrc(ins, ins.operands[0], 1)
    mul = ins.mnemonic == "s_mulk_i32"

    def run(w: Wave, x: Any) -> None:
        a = _s32(cur(w, x))
        r = a * k if mul else a + k
        write_s(w, dst, r & M32)
        if not mul:
            w.scc, w.scc_def = int(not -(1 << 31) <= r < (1 << 31)), True

    return run


@op("s_cselect_b32", "s_cselect_b64")
def _cselect(ins: Instr, d: Any) -> Fn:
    _no_mods(ins)
    n = 2 if ins.mnemonic.endswith("64") else 1
    dst = sdst(ins, ins.operands[0], n)
    a = ssrc(ins, ins.operands[1], n)
    b = ssrc(ins, ins.operands[2], n)
    return lambda w, x: write_s(w, dst, a(w, x) if _scc_of(w, x) else b(w, x), n)


_CMPS = {
    "eq": lambda a, b: a == b,
    "lg": lambda a, b: a != b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
}


def _scmp_factory(ins: Instr, d: Any) -> Fn:
    _no_mods(ins)
    _, _, cop, ty = ins.mnemonic.split("_")
    n = 2 if ty == "u64" else 1
    a = ssrc(ins, ins.operands[0], n)
    b = ssrc(ins, ins.operands[1], n)
    f = _CMPS[cop]
    conv = _s32 if ty == "i32" else (lambda v: v)

    def run(w: Wave, x: Any) -> None:
        w.scc, w.scc_def = int(f(conv(a(w, x)), conv(b(w, x)))), True

    return run


for _c in _CMPS:
    for _t in ("i32", "u32"):
        SALU[f"s_cmp_{_c}_{_t}"] = _scmp_factory
SALU["s_cmp_eq_u64"] = _scmp_factory
SALU["s_cmp_lg_u64"] = _scmp_factory


def _scmpk_factory(ins: Instr, d: Any) -> Fn:
    """SOPK compares s_cmpk_<op>_{i32,u32} S0, SIMM16: SCC = S0 <op> SIMM16, the constant
    sign-extended for i32 and zero-extended for u32 (CDNA3 ISA SOPK S_CMPK_*)."""
    _no_mods(ins)
    _, _, cop, ty = ins.mnemonic.split("_")
    a = ssrc(ins, ins.operands[0], 1)
    o = ins.operands[1]
    require(isinstance(o, Imm), ins, "SIMM16 operand")
    k = o.value & 0xFFFF
    if ty == "i32" and k & 0x8000:
        k -= 0x10000
    f = _CMPS[cop]
    conv = _s32 if ty == "i32" else (lambda v: v)

    def run(w: Wave, x: Any) -> None:
        w.scc, w.scc_def = int(f(conv(a(w, x)), k)), True

    return run


for _c in _CMPS:
    for _t in ("i32", "u32"):
        SALU[f"s_cmpk_{_c}_{_t}"] = _scmpk_factory


@op("s_bitcmp0_b32", "s_bitcmp1_b32")
def _bitcmp(ins: Instr, d: Any) -> Fn:
    """SCC = (S0 >> S1[4:0]) & 1 == 0 (bitcmp0) or == 1 (bitcmp1) (CDNA3 ISA SOPC S_BITCMP*_B32)."""
    _no_mods(ins)
    a = ssrc(ins, ins.operands[0], 1)
    b = ssrc(ins, ins.operands[1], 1)
    want = 1 if ins.mnemonic == "s_bitcmp1_b32" else 0

    def run(w: Wave, x: Any) -> None:
        w.scc, w.scc_def = int(((a(w, x) >> (b(w, x) & 31)) & 1) == want), True

    return run


@op("s_and_saveexec_b64", "s_or_saveexec_b64", "s_andn2_saveexec_b64")
def _saveexec(ins: Instr, d: Any) -> Fn:
    """SDST = EXEC; EXEC = S0 op EXEC; SCC = (EXEC != 0)."""
    _no_mods(ins)
    dst = sdst(ins, ins.operands[0], 2)
    a = ssrc(ins, ins.operands[1], 2)
    kind = ins.mnemonic.split("_")[1]

    def run(w: Wave, x: Any) -> None:
        old = w.exec_value()
        s = a(w, x)
        new = {"and": s & old, "or": s | old, "andn2": s & ~old & M64}[kind]
        write_s(w, dst, old, 2)
        write_s(w, 126, new, 2)
        w.scc, w.scc_def = int(new != 0), True

    return run


# ------------------------------------------------------------------ control


def _target(ins: Instr, d: Any) -> int:
    lab = ins.operands[0] if ins.operands else None
    require(isinstance(lab, Label), ins, "branch target")
    if lab.name not in d.labels:
        raise UnknownInstruction(f"`{ins.text}`: label {lab.name} not found")
    return d.labels[lab.name]


@op("s_branch")
def _branch(ins: Instr, d: Any) -> Fn:
    t = _target(ins, d)
    return lambda w, x: t


@op("s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_execz", "s_cbranch_execnz", "s_cbranch_vccz", "s_cbranch_vccnz")
def _cbranch(ins: Instr, d: Any) -> Fn:
    t = _target(ins, d)
    cond = ins.mnemonic[len("s_cbranch_") :]
    if cond == "scc0":
        return lambda w, x: None if _scc_of(w, x) else t
    if cond == "scc1":
        return lambda w, x: t if _scc_of(w, x) else None
    if cond == "execz":
        return lambda w, x: None if w.exec.any() else t
    if cond == "execnz":
        return lambda w, x: t if w.exec.any() else None
    vcc = ssrc(ins, Reg("s", 106, 2), 2)
    if cond == "vccz":
        return lambda w, x: t if vcc(w, x) == 0 else None
    return lambda w, x: t if vcc(w, x) != 0 else None


@op("s_nop", "s_sleep", "s_setprio", "s_sched_barrier", "sched_barrier")
def _nop(ins: Instr, d: Any) -> Fn:
    """No architectural effect (scheduling / hazard padding)."""
    return lambda w, x: None


@op("s_barrier")
def _barrier(ins: Instr, d: Any) -> Fn:
    return lambda w, x: BARRIER


@op("s_endpgm")
def _endpgm(ins: Instr, d: Any) -> Fn:
    return lambda w, x: ENDPGM


@op("s_waitcnt")
def _waitcnt(ins: Instr, d: Any) -> Fn:
    """vmcnt(n): retire the oldest VMEM operations until at most n remain (in order, gfx9).
    lgkmcnt(n): LDS operations return in order, SMEM ones in any order, so after the wait the
    LDS operations except the newest n are sure to be done, and SMEM ones only when n = 0.
    (Values land at issue in this model; the counters drive the checkers.)"""
    vm = ins.modifiers.get("vmcnt")
    lg = ins.modifiers.get("lgkmcnt")
    nv = None if vm is None else int(vm)
    nl = None if lg is None else int(lg)

    def run(w: Wave, x: Any) -> None:
        if nv is not None:
            while len(w.vm) > nv:
                x.retire(w, w.vm.popleft())
        if nl is not None and w.lgkm:
            if nl == 0:
                while w.lgkm:
                    x.retire(w, w.lgkm.popleft())
            elif len(w.lgkm) <= nl:
                pass  # at most nl operations of any kind outstanding: none is sure to be done
            elif not any(op.smem for op in w.lgkm):  # LDS only: in order, the oldest are done
                while len(w.lgkm) > nl:
                    x.retire(w, w.lgkm.popleft())
            else:
                ds = [op for op in w.lgkm if not op.smem]
                done = ds[: max(0, len(ds) - nl)]
                for op in done:
                    x.retire(w, op)
                ids = {id(op) for op in done}
                w.lgkm = type(w.lgkm)(op for op in w.lgkm if id(op) not in ids)

    return run


# ------------------------------------------------------------------ SMEM


@op("s_load_dword", "s_load_dwordx2", "s_load_dwordx4", "s_load_dwordx8", "s_load_dwordx16")
def _s_load(ins: Instr, d: Any) -> Fn:
    """SDST[0..n) = MEM[SBASE + offset] (offset: 21-bit signed immediate or SGPR), dwords."""
    _no_mods(ins)
    suffix = ins.mnemonic[len("s_load_dword") :]
    n = int(suffix[1:]) if suffix else 1
    dst = sdst(ins, ins.operands[0], n)
    base = ssrc(ins, ins.operands[1], 2)
    off_op = ins.operands[2]
    if isinstance(off_op, Imm):
        off_v = off_op.value

        def off(w: Wave, x: Any) -> Any:
            return off_v

    else:
        off = ssrc(ins, off_op, 1)

    def run(w: Wave, x: Any) -> None:
        addr = (base(w, x) + off(w, x)) & M64
        data = x.mem.read_scalar(addr & ~3, 4 * n)
        if data is None:
            x.checks.report(
                Finding(
                    "out_of_bounds",
                    x.wg.wgid,
                    w.wid,
                    w.pc,
                    ins.text,
                    [],
                    f"scalar load of {4 * n} bytes at {addr:#x} is outside every registered buffer",
                )
            )
            data = bytes(4 * n)
        vals = int.from_bytes(data, "little")
        write_s(w, dst, vals, n)
        tok = x.wg.next_token()
        for i in range(n):
            w.spend[dst + i] = tok
        w.lgkm.append(PendingOp(tok, None, None, w.pc, sgprs=(dst, n), smem=True))

    return run


_ = int_to_mask
