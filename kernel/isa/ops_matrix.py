"""MFMA semantics: v_mfma_f32_16x16x32_{f16,bf16} and v_mfma_scale_f32_16x16x128_f8f6f4 (fp8 E4M3
operands, cbsz = blgp = 0).

Lane layouts (wave64, lane l, t = l % 16, g = l // 16):
- 16x16x32 f16/bf16 (IREE IREEGPUAttrs.cpp getSingleSubgroupLayout, MFMA_F32_16x16x32_F16:
  thread {16, 4} strides {1, 16}, element {1, 8}; AMD matrix instruction calculator):
  A[m = t][k = 8g + j] and B[k = 8g + j][n = t] in half j of the lane's 4 dwords.
- 16x16x128 scaled, fp8 operands (cbsz = blgp = 0): Triton's
  LinearLayoutConversions.cpp (chooseScaledMfmaScaleLayout: "each lane takes 32 elements from
  A/B along K ... for mxfp6/mxfp8, there are 2 16-consecutive elements blocks, so 2 scale
  elements are required"; the 16x16 scale lanes: lane t + 16 kb holds the scale of row/column t
  for K block kb): byte j of lane (t, g) is K = 16g + j for j < 16 and 64 + 16g + (j - 16) for
  j >= 16 (F8_LAYOUT "split", the default; the layout the kernel's source assumes too).
  IREE's getSingleSubgroupLayout(MFMA_SCALE_F32_16x16x128_B32) gives one layout for every
  element type, K = 32g + j (F8_LAYOUT "contiguous"; it is Triton's and Modular's layout for
  fp4, where 32 elements are 16 bytes); the sources disagree for fp8, see docs/explanation/isa-interpreter.md.
  The E8M0 scale of row m (column n) for K block kb = k // 32 is byte 0 of lane m + 16 kb's
  scale VGPR (op_sel = op_sel_hi = 0 picks byte 0).
- D (all): D[m = 4g + r][n = t] in the lane's dword r.

Arithmetic model (the gfx950 profile's conservative model): every product and the sum of all
K products plus C is formed in float64 (exact whenever the terms' binary exponents span fits
53 bits, as on every exact-arithmetic recipe) and rounded to f32 once per result element (RNE).
The hardware's internal order and rounding are not documented; the error bound does not
assume this model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from kernel.isa import numerics as nm
from kernel.isa.asm import Imm, Instr, Reg, modifier_list
from kernel.isa.errors import UnknownInstruction
from kernel.isa.operands import check_vgpr, require, vdst, write_v, write_vn
from kernel.isa.state import LANES, QUIET, Wave

Fn = Callable[[Wave, Any], int | None]
MFMA: dict[str, Callable[[Instr, Any], Fn]] = {}
U32 = np.uint32

F8_LAYOUT = os.environ.get("FLYDSL_ISA_F8_LAYOUT", "split")

E8M0_VALUES = nm.e8m0_to_f64(np.arange(256))  # 2^(e - 127) of every E8M0 byte, NaN for 0xFF

_l = np.arange(LANES)
_T = _l % 16
_G = _l // 16


def _vreg_block(ins: Instr, op: Any, n: int) -> int:
    require(isinstance(op, Reg) and op.file == "v" and op.count == n and not op.neg and not op.abs, ins, f"{n}-VGPR operand")
    return op.index


def _check_block(w: Wave, x: Any, idx: int, n: int) -> None:
    full, pend = w.vfull, w.vpend
    for i in range(idx, idx + n):
        if not full[i] or pend[i]:
            check_vgpr(w, x, i)


def _read_block(w: Wave, x: Any, idx: int, n: int) -> np.ndarray:
    """[LANES, n] uint32 of v[idx .. idx + n)."""
    if x.chk:
        _check_block(w, x, idx, n)
    return np.ascontiguousarray(w.v[idx : idx + n].T)


def _operand_rows(w: Wave, x: Any, idx: int, n: int) -> np.ndarray:
    """The operand bits of a 16x16 MFMA source v[idx .. idx + n) as [t, g, r] uint32
    (lane = 16 g + t, dword r), C-contiguous: viewed as bytes, row t holds lane (g, t)'s
    elements in order for g = 0..3."""
    if x.chk:
        _check_block(w, x, idx, n)
    return np.ascontiguousarray(w.v[idx : idx + n].reshape(n, 4, 16).transpose(2, 1, 0))


def _acc(ins: Instr, op: Any) -> Callable[[Wave, Any], np.ndarray]:
    """C operand as float64 [16, 16] (m, n); an inline 0 is a zero accumulator."""
    if isinstance(op, Imm):
        require(op.bits == 0, ins, "non-zero immediate accumulator")
        z = np.zeros((16, 16))
        z.setflags(write=False)
        return lambda w, x: z
    idx = _vreg_block(ins, op, 4)

    def get(w: Wave, x: Any) -> np.ndarray:
        if x.chk:
            _check_block(w, x, idx, 4)
        # C[4 g + r][t] = dword r of lane 16 g + t
        return w.v[idx : idx + 4].view(np.float32).reshape(4, 4, 16).transpose(1, 0, 2).reshape(16, 16).astype(np.float64)

    return get


def _store_d(w: Wave, dst: int, dmat: np.ndarray) -> None:
    """D[4 g + r][t] (float64, rounded once to f32, RNE) -> dword r of lane 16 g + t."""
    vals = dmat.astype(np.float32).reshape(4, 4, 16).transpose(1, 0, 2).reshape(4, LANES)
    write_vn(w, dst, vals.view(U32))


def _no_mods(ins: Instr, allowed: dict[str, str]) -> None:
    for k, v in ins.modifiers.items():
        if k not in allowed or str(v) != allowed[k]:
            raise UnknownInstruction(f"`{ins.text}` (#{ins.index}): modifier {k}:{v} not modelled")


def _mfma_16x16x32(ins: Instr, d: Any) -> Fn:
    """D = A (16x32) * B (32x16) + C, f16 or bf16 inputs, f32 result."""
    _no_mods(ins, {"cbsz": "0", "abid": "0", "blgp": "0"})
    require(len(ins.operands) == 4, ins, "operand count")
    dst = vdst(ins, ins.operands[0], 4)
    ia = _vreg_block(ins, ins.operands[1], 4)
    ib = _vreg_block(ins, ins.operands[2], 4)
    c = _acc(ins, ins.operands[3])
    bf16 = ins.mnemonic.endswith("bf16")

    def dec(rows: np.ndarray) -> np.ndarray:  # [t, g, r] dwords -> [t, 8 g + j] values
        if bf16:
            return (rows.view(np.uint16).astype(U32) << U32(16)).view(np.float32).reshape(16, 32).astype(np.float64)
        return rows.view(np.float16).reshape(16, 32).astype(np.float64)

    def run(w: Wave, x: Any) -> None:
        A = dec(_operand_rows(w, x, ia, 4))  # A[t][8 g + j]: element j of lane (g, t)
        B = np.ascontiguousarray(dec(_operand_rows(w, x, ib, 4)).T)  # B[8 g + j][t]
        _store_d(w, dst, A @ B + c(w, x))

    return run


def _k_of_f8() -> np.ndarray | None:
    """None for the split layout (K = 16 g + j, j < 16; 64 + 16 g + j - 16 otherwise), the
    K of byte j of lane (g, t) for the contiguous one (K = 32 g + j)."""
    if F8_LAYOUT == "contiguous":
        return 32 * _G[:, None] + np.arange(32)[None, :]
    if F8_LAYOUT == "split":
        return None
    raise ValueError(f"FLYDSL_ISA_F8_LAYOUT must be contiguous or split, not {F8_LAYOUT!r}")


def _mfma_scale(ins: Instr, d: Any) -> Fn:
    """D = sum_k A[m,k] 2^(sa[m,kb]-127) B[k,n] 2^(sb[kb,n]-127) + C, E4M3 x E4M3."""
    ms = dict(ins.modifiers)
    sel = modifier_list(ms.pop("op_sel"), 3) if "op_sel" in ms else [0, 0, 0]
    selhi = modifier_list(ms.pop("op_sel_hi"), 3) if "op_sel_hi" in ms else [0, 0, 0]
    for k in ("cbsz", "blgp"):
        if k in ms and str(ms.pop(k)) == "0":
            pass
    if ms or any(sel) or any(selhi):
        raise UnknownInstruction(
            f"`{ins.text}` (#{ins.index}): modifiers {ins.modifiers} not modelled (only fp8 E4M3 operands and scale byte 0)"
        )
    require(len(ins.operands) == 6, ins, "operand count")
    dst = vdst(ins, ins.operands[0], 4)
    ia = _vreg_block(ins, ins.operands[1], 8)
    ib = _vreg_block(ins, ins.operands[2], 8)
    c = _acc(ins, ins.operands[3])
    sa_op, sb_op = ins.operands[4], ins.operands[5]
    require(isinstance(sa_op, Reg) and sa_op.file == "v" and sa_op.count == 1, ins, "scale A operand")
    require(isinstance(sb_op, Reg) and sb_op.file == "v" and sb_op.count == 1, ins, "scale B operand")
    split = _k_of_f8() is None

    def operand(w: Wave, x: Any, idx: int) -> np.ndarray:  # [t, K] E4M3 values of row / column t
        b = _operand_rows(w, x, idx, 8).view(np.uint8).reshape(16, 4, 32)  # [t, g, j]
        if split:  # j < 16: K = 16 g + j; j >= 16: K = 64 + 16 g + (j - 16)
            b = b.reshape(16, 4, 2, 16).transpose(0, 2, 1, 3)
        return nm.E4M3_VALUES[b.reshape(16, 128)]

    def run(w: Wave, x: Any) -> None:
        A = operand(w, x, ia)
        B = operand(w, x, ib)
        if x.chk:
            check_vgpr(w, x, sa_op.index, need=0x1)
            check_vgpr(w, x, sb_op.index, need=0x1)
        # lane m + 16 kb holds the scale of row / column m for K block kb (K = 32 kb + i)
        sa = E8M0_VALUES[w.v[sa_op.index].view(np.uint8)[::4]].reshape(4, 16)  # [kb, m]
        sb = E8M0_VALUES[w.v[sb_op.index].view(np.uint8)[::4]].reshape(4, 16)  # [kb, n]
        As = (A.reshape(16, 4, 32) * sa.T[:, :, None]).reshape(16, 128)
        Bs = (B.T.reshape(4, 32, 16) * sb[:, None, :]).reshape(128, 16)
        _store_d(w, dst, As @ Bs + c(w, x))

    return run


def _mfma_16x16x32_fp8(ins: Instr, d: Any) -> Fn:
    """D = A (16x32) * B (32x16) + C with E4M3 inputs (gfx950: OCP E4M3, LLVM gfx950 fp8 forms;
    gfx942 read the same bytes as E4M3FNUZ), f32 result. Layout as the f16 form with 8
    one-byte elements per lane in 2 VGPRs: A[t][8g + j], B[8g + j][t] (AMD matrix instruction
    calculator, v_mfma_f32_16x16x32_fp8_fp8; IREE MFMA_F32_16x16x32_F8E4M3FN)."""
    _no_mods(ins, {"cbsz": "0", "abid": "0", "blgp": "0"})
    require(len(ins.operands) == 4, ins, "operand count")
    dst = vdst(ins, ins.operands[0], 4)
    ia = _vreg_block(ins, ins.operands[1], 2)
    ib = _vreg_block(ins, ins.operands[2], 2)
    c = _acc(ins, ins.operands[3])

    def run(w: Wave, x: Any) -> None:
        A = nm.E4M3_VALUES[_operand_rows(w, x, ia, 2).view(np.uint8).reshape(16, 32)]  # A[t][8 g + j]
        B = np.ascontiguousarray(nm.E4M3_VALUES[_operand_rows(w, x, ib, 2).view(np.uint8).reshape(16, 32)].T)
        _store_d(w, dst, A @ B + c(w, x))

    return run


def _mfma_bf16_k4(mn: int):
    """v_mfma_f32_{16x16x16,32x32x8}_bf16 (gfx90a+ "_1k" forms): 4 bf16 per lane in 2 VGPRs.
    Lane l, t = l % mn, g = l // mn: A[t][4g + j], B[4g + j][t] (j = 0..3, K = 64 / mn * 4);
    D[m][t] in dword r with m = (r % 4) + 4 g + (64 / mn) * 4 (r // 4), i.e. 16x16: m = 4g + r,
    32x32: m = 8 (r // 4) + 4 g + r % 4 (AMD matrix instruction calculator; IREE
    getSingleSubgroupLayout MFMA_F32_16x16x16_BF16 / MFMA_F32_32x32x8_BF16). Exact sum, one f32
    rounding per element (the profile model)."""
    groups = LANES // mn
    kdim = 4 * groups
    nreg = mn * mn // LANES
    t = _l % mn
    g = _l // mn
    k_of = 4 * g[:, None] + np.arange(4)[None, :]
    r = np.arange(nreg)[None, :]
    m_of = (r % 4) + 4 * g[:, None] + 4 * groups * (r // 4)  # [lane, r]

    def make(ins: Instr, d: Any) -> Fn:
        _no_mods(ins, {"cbsz": "0", "abid": "0", "blgp": "0"})
        require(len(ins.operands) == 4, ins, "operand count")
        dst = vdst(ins, ins.operands[0], nreg)
        ia = _vreg_block(ins, ins.operands[1], 2)
        ib = _vreg_block(ins, ins.operands[2], 2)
        cop = ins.operands[3]
        if isinstance(cop, Imm):
            require(cop.bits == 0, ins, "non-zero immediate accumulator")
            ic = None
        else:
            ic = _vreg_block(ins, cop, nreg)

        def run(w: Wave, x: Any) -> None:
            av = nm.bf16_bits_to_f64(_read_block(w, x, ia, 2).view(np.uint16))  # [lane, 4]
            bv = nm.bf16_bits_to_f64(_read_block(w, x, ib, 2).view(np.uint16))
            A = np.empty((mn, kdim))
            B = np.empty((kdim, mn))
            A[t[:, None], k_of] = av
            B[k_of, t[:, None]] = bv
            C = np.zeros((mn, mn))
            if ic is not None:
                C[m_of, t[:, None]] = _read_block(w, x, ic, nreg).view(np.float32).astype(np.float64)
            with QUIET:
                vals = nm.round_f64_to_f32(A @ B + C)[m_of, t[:, None]]  # [lane, r]
            for i in range(nreg):
                write_v(w, dst + i, np.ascontiguousarray(vals[:, i]).view(U32))

        return run

    return make


MFMA["v_mfma_f32_16x16x32_fp8_fp8"] = _mfma_16x16x32_fp8
MFMA["v_mfma_f32_16x16x16_bf16"] = _mfma_bf16_k4(16)
MFMA["v_mfma_f32_32x32x8_bf16"] = _mfma_bf16_k4(32)
MFMA["v_mfma_scale_f32_16x16x128_f8f6f4"] = _mfma_scale
MFMA["v_mfma_f32_16x16x32_f16"] = _mfma_16x16x32
MFMA["v_mfma_f32_16x16x32_bf16"] = _mfma_16x16x32
