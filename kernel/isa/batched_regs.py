"""Register access of the batched closures (kernel.isa.compiled, kernel.isa.compiled_memory):
reads, definedness checks and EXEC-masked writes of VGPRs and SGPRs for a lockstep group of k
waves (`kernel.isa.lockstep.Batch`) on [k, 64] lane arrays (dwords as uint32 unless stated).
The same rules as the per-wave operand helpers (kernel.isa.operands), wave by wave."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernel.isa.asm import Operand, Reg
from kernel.isa.consts import K
from kernel.isa.lockstep import Batch
from kernel.isa.operands import check_sgpr, check_vgpr, write_s
from kernel.isa.state import LANES

BFn = Callable[[Batch], None]
BGet = Callable[[Batch], np.ndarray]
U32 = np.uint32
U64 = np.uint64
SIGN32 = U32(0x80000000)
ABS32 = U32(0x7FFFFFFF)


# ------------------------------------------------------------------ checks and writes


def _check_v(b: Batch, idx: int, need: int = 0xF) -> None:
    """check_vgpr on every wave of the group that is not known clean; v[idx] joins b.ok when
    every wave has it fully defined with no load in flight."""
    clean = True
    for w in b.waves:
        if not (w.vfull[idx] and not w.vpend[idx]):
            check_vgpr(b.at(w), w.x, idx, need)
            if not (w.vfull[idx] and not w.vpend[idx]):
                clean = False
    if clean:
        b.ok.add(idx)


def _mark(b: Batch, idx: int, bytemask: int) -> None:
    """Definedness after a full-EXEC write of `bytemask` bytes of v[idx] on every wave."""
    if bytemask != 0xF:
        b.VDEF[:, idx] |= np.uint8(bytemask)
        return
    b.VDEF[:, idx] = 0xF
    clean = True
    for w in b.waves:
        w.vfull[idx] = True
        if w.vpend[idx]:
            clean = False
    if clean:
        b.ok.add(idx)


def bwrite_v(b: Batch, idx: int, val: np.ndarray, bytemask: int = 0xF) -> None:
    """v[idx] = val ([k, 64]) on each wave's EXEC lanes; `bytemask` bytes become defined."""
    m = b.exec_mask()
    if m is None:
        b.V[:, idx] = val
        if idx not in b.ok:
            _mark(b, idx, bytemask)
    else:
        np.copyto(b.V[:, idx], np.broadcast_to(val, b.shape).astype(U32, copy=False), where=m)
        d = b.VDEF[:, idx]
        d[m] |= np.uint8(bytemask)


def bwrite_vn(b: Batch, idx: int, vals: np.ndarray) -> None:
    """v[idx + i] = vals[:, i] (uint32 [k, n, 64]) on EXEC lanes, all bytes defined."""
    n = vals.shape[1]
    if b.exec_mask() is None:
        b.V[:, idx : idx + n] = vals
        for i in range(idx, idx + n):
            if i not in b.ok:
                _mark(b, i, 0xF)
    else:
        for i in range(n):
            bwrite_v(b, idx + i, vals[:, i])


def bwrite_v64(b: Batch, idx: int, val: np.ndarray) -> None:
    """{v[idx + 1], v[idx]} = val (uint64 [k, 64]) on EXEC lanes."""
    bwrite_vn(b, idx, np.ascontiguousarray(val).view(U32).reshape(b.k, LANES, 2).transpose(0, 2, 1))


def bwrite_half(b: Batch, idx: int, hi: int, word: np.ndarray) -> None:
    """Word `hi` of v[idx] = word (uint16 [k, 64]) on EXEC lanes, the other word kept (value and
    definedness), as operands.write_half."""
    if b.exec_mask() is None:
        b.V[:, idx].view(np.uint16)[:, hi::2] = word
        if idx not in b.ok:
            _mark(b, idx, 0xC if hi else 0x3)
        return
    prev = b.V[:, idx]
    word = word.astype(U32)
    val = (prev & U32(0xFFFF)) | (word << U32(16)) if hi else (prev & U32(0xFFFF0000)) | word
    bwrite_v(b, idx, val, 0xC if hi else 0x3)


def lane_ints(r: np.ndarray) -> list[int]:
    """bool [k, 64] -> one 64-bit lane mask per wave (bit i = lane i)."""
    return np.packbits(r, axis=1, bitorder="little").view(U64).reshape(-1).tolist()


def bwrite_mask(b: Batch, idx: int, r: np.ndarray) -> None:
    """SGPR pair idx = the lanes of r ([k, 64] bool) that are in EXEC, per wave."""
    m = b.exec_mask()
    for w, v in zip(b.waves, lane_ints(r if m is None else r & m)):
        write_s(w, idx, v, 2)


# ------------------------------------------------------------------ sources


def _vreg(op: Operand, count: int = 1) -> int | None:
    if isinstance(op, Reg) and op.file == "v" and op.count == count and not op.neg and not op.abs:
        return op.index
    return None


def _sreg(op: Operand, count: int) -> int | None:
    if isinstance(op, Reg) and op.file == "s" and op.count == count and not op.neg and not op.abs:
        return op.index
    return None


def _svals(b: Batch, idx: int, n: int) -> list[int]:
    """The n-dword SGPR value at idx of every wave (checked as operands.ssrc does)."""
    ws = b.waves
    if b.chk:
        for w in ws:
            for i in range(idx, idx + n):
                if not w.sdef[i] or w.spend[i]:
                    check_sgpr(b.at(w), w.x, idx, n)
                    break
    if n == 1:
        return [w.s[idx] for w in ws]
    return [w.s[idx] | (w.s[idx + 1] << 32) for w in ws]


def _lanes_of(b: Batch, vals: list[int], dtype: type) -> np.ndarray:
    """Per-wave scalars as a [k, 64] lane array (the cached constant when all are equal)."""
    v0 = vals[0]
    if vals.count(v0) == len(vals):
        return K(v0, dtype, b.shape)
    return np.repeat(np.array(vals, dtype=dtype)[:, None], LANES, axis=1)
