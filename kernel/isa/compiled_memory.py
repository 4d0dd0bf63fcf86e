"""Batched forms of the commonest memory instructions (LDS reads and writes, the transpose read,
ds_bpermute, global loads, stores and LDS DMA, raw-buffer loads) for a lockstep group of waves.

Each takes its fast path where every wave's EXEC is all ones and, for LDS reads, every lane's
row is aligned and inside the allocation (where the per-wave closure takes its own), or, for
global reads, every lane's bytes lie inside some registered buffer (the bytes the per-wave
read gives, with nothing to report), doing the data movement for all waves at once (one
gather over the stacked LDS of the group's workgroups, one per buffer) and the bookkeeping
(checks, outstanding-load tokens, DMA shadow) wave by wave in the per-wave code. Otherwise it
runs the per-wave closure on each wave (the decision reads register values only, no checks,
so nothing is reported twice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernel.isa import ops_memory as om
from kernel.isa.asm import Imm, Instr, Operand, Reg
from kernel.isa.batched_regs import BFn, _check_v, _vreg, bwrite_v, bwrite_vn
from kernel.isa.consts import K
from kernel.isa.errors import UnknownInstruction
from kernel.isa.lockstep import Batch
from kernel.isa.operands import check_sgpr, check_vgpr, is_off
from kernel.isa.state import LANE_IDS, LANES, M0, Wave, byte_span

U32 = np.uint32
U64 = np.uint64
PerWave = Callable[[Wave, Any], Any]


def _per_wave(b: Batch, f: PerWave) -> None:
    b.ok.clear()
    for w in b.waves:
        f(b.at(w), w.x)


def _offset(ins: Instr) -> int | None:
    try:
        return om._offset(ins, ())
    except UnknownInstruction:
        return None


def _lds_rows_index(b: Batch, raw: np.ndarray, off: int, size: int) -> np.ndarray | None:
    """Row indices into the stacked LDS rows of `size` bytes of each lane's raw + off, when
    every lane of every wave is aligned and inside (as Workgroup.lds_rows), else None."""
    st = b.stack
    if st is None or off % size or st.rows(size) is None:
        return None
    lim = st.size - size - off
    if lim < 0 or np.count_nonzero(raw & K(size - 1, U32, b.shape)) or np.count_nonzero(raw > K(lim, U32, b.shape)):
        return None
    r = (raw >> K(size.bit_length() - 1, U32, b.shape)).astype(np.intp)
    return r + ((off // size) + b.slots * (st.size // size))[:, None]


def _check_lds(ins: Instr, b: Batch, raw: np.ndarray, off: int, size: int) -> None:
    """om.check_lds_read on each wave whose workgroup has a DMA in flight or another writer."""
    for i, w in enumerate(b.waves):
        g = w.x.wg
        if g.dma_inflight or g.others_wrote(w.wid):
            om.check_lds_read(ins, b.at(w), w.x, LANE_IDS, (raw[i].astype(np.int64) + off)[:, None] + byte_span(size))


def _lgkm(b: Batch, dst: int, n: int) -> None:
    for w in b.waves:
        om._mark_lgkm(w, w.x, dst, n, b.pc)
    for i in range(dst, dst + n):
        b.ok.discard(i)


def _ds_read(ins: Instr, f: PerWave) -> BFn | None:
    n = {"ds_read_b32": 1, "ds_read_b64": 2, "ds_read_b128": 4}[ins.mnemonic]
    off = _offset(ins)
    dst, ai = _vreg(ins.operands[0], n), _vreg(ins.operands[1])
    if off is None or dst is None or ai is None:
        return None
    size = 4 * n

    def run(b: Batch) -> None:
        raw = b.V[:, ai]
        ridx = _lds_rows_index(b, raw, off, size) if b.exec_mask() is None else None
        if ridx is None:
            _per_wave(b, f)
            return
        if b.chk:
            if ai not in b.ok:
                _check_v(b, ai)
            _check_lds(ins, b, raw, off, size)
        bwrite_vn(b, dst, b.stack.rows(size)[ridx].transpose(0, 2, 1))
        _lgkm(b, dst, n)

    return run


def _ds_write(ins: Instr, f: PerWave) -> BFn | None:
    """ds_write_b32 / b64 / b128 where every lane of every wave writes an aligned row inside
    the allocation and no two lanes (of any wave) write the same row: one scatter into the
    stacked LDS and its shadow (writer wave, epoch, no DMA pending) gives the bytes the writes
    in wave and lane order give; the tokens and notes wave by wave as ops_memory's."""
    n = {"ds_write_b32": 1, "ds_write_b64": 2, "ds_write_b128": 4}[ins.mnemonic]
    off = _offset(ins)
    ai, di = _vreg(ins.operands[0]), _vreg(ins.operands[1], n)
    if off is None or ai is None or di is None or len(ins.operands) != 2:
        return None
    size = 4 * n
    span = np.arange(size, dtype=np.intp)

    def run(b: Batch) -> None:
        raw = b.V[:, ai]
        ridx = _lds_rows_index(b, raw, off, size) if b.exec_mask() is None else None
        if ridx is None or np.unique(ridx).size != ridx.size:
            _per_wave(b, f)
            return
        if b.chk:
            if ai not in b.ok:
                _check_v(b, ai)
            for i in range(di, di + n):
                if i not in b.ok:
                    _check_v(b, i)
        st = b.stack
        st.rows(size)[ridx] = b.V[:, di : di + n].transpose(0, 2, 1)
        flat = (ridx[:, :, None] * size + span).reshape(b.k, -1)  # [k, 64 * size] byte indices
        ws = b.waves
        st.writer.reshape(-1)[flat] = np.array([w.wid for w in ws], dtype=st.writer.dtype)[:, None]
        st.epoch.reshape(-1)[flat] = np.array([w.x.wg.epoch for w in ws], dtype=st.epoch.dtype)[:, None]
        st.pending.reshape(-1)[flat] = 0
        for w in ws:
            w.x.wg.note_write(w.wid)
            om._mark_lgkm(w, w.x, -1, 0, b.pc)

    return run


def _ds_read_tr8(ins: Instr, f: PerWave) -> BFn | None:
    off = _offset(ins)
    dst, ai = _vreg(ins.operands[0], 2), _vreg(ins.operands[1])
    if off is None or dst is None or ai is None:
        return None

    def run(b: Batch) -> None:
        raw = b.V[:, ai]
        ridx = _lds_rows_index(b, raw, off, 8) if b.exec_mask() is None else None
        if ridx is None:
            _per_wave(b, f)  # (a partial EXEC raises there, as per wave)
            return
        if b.chk:
            if ai not in b.ok:
                _check_v(b, ai)
            _check_lds(ins, b, raw, off, 8)
        data = b.stack.rows(8)[ridx].view(np.uint8).reshape(b.k, LANES * 8)
        out = np.ascontiguousarray(data[:, om.TR8_SOURCE])  # [k, lane, j]
        bwrite_vn(b, dst, out.view(U32).transpose(0, 2, 1))
        _lgkm(b, dst, 2)

    return run


def _ds_bpermute(ins: Instr, f: PerWave) -> BFn | None:
    off = _offset(ins)
    dst, ai, di = _vreg(ins.operands[0]), _vreg(ins.operands[1]), _vreg(ins.operands[2])
    if off is None or dst is None or ai is None or di is None:
        return None

    def run(b: Batch) -> None:
        if b.exec_mask() is not None:
            _per_wave(b, f)
            return
        if b.chk and ai not in b.ok:
            _check_v(b, ai)
        src = ((b.V[:, ai].astype(np.int64) + off) >> 2) & 63
        if b.chk and di not in b.ok:
            for i, w in enumerate(b.waves):
                used = np.zeros(LANES, dtype=bool)
                used[src[i]] = True
                check_vgpr(b.at(w), w.x, di, lanes=used)
        bwrite_v(b, dst, np.take_along_axis(b.V[:, di], src, axis=1))
        _lgkm(b, dst, 1)

    return run


def _global_address(ins: Instr, vop: Operand, sop: Operand) -> tuple[Callable[[Batch], np.ndarray], Callable[[Batch], None]] | None:
    """(raw per-lane 64-bit addresses [k, 64], unchecked; the checks of their registers) of
    `vaddr, saddr|off`, as ops_memory._global_addr."""
    if is_off(sop):
        vi = _vreg(vop, 2)
        if vi is None:
            return None

        def raw64(b: Batch) -> np.ndarray:
            return np.ascontiguousarray(b.V[:, vi : vi + 2].transpose(0, 2, 1)).view(U64).reshape(b.k, LANES)

        def chk64(b: Batch) -> None:
            if not (vi in b.ok and vi + 1 in b.ok):
                _check_v(b, vi)
                _check_v(b, vi + 1)

        return raw64, chk64
    vi = _vreg(vop)
    if vi is None or not (isinstance(sop, Reg) and sop.file == "s" and sop.count == 2):
        return None
    si = sop.index

    def raw(b: Batch) -> np.ndarray:
        base = np.array([w.s[si] | (w.s[si + 1] << 32) for w in b.waves], dtype=U64)[:, None]
        return base + b.V[:, vi].astype(U64)

    def chk(b: Batch) -> None:
        for w in b.waves:
            if not (w.sdef[si] and w.sdef[si + 1]) or w.spend[si] or w.spend[si + 1]:
                check_sgpr(b.at(w), w.x, si, 2)
        if vi not in b.ok:
            _check_v(b, vi)

    return raw, chk


def _read_all(b: Batch, addr: np.ndarray, size: int) -> np.ndarray | None:
    """Bytes [k * 64, size] when every wave's EXEC is all ones and every lane's bytes lie in a
    registered buffer (GlobalMemory.read_lanes over all waves), else None."""
    if b.exec_mask() is not None:
        return None
    return b.waves[0].x.mem.read_lanes(addr.reshape(-1), size)


def _loaded(b: Batch, dst: int, n: int, data: np.ndarray) -> None:
    """A VMEM load's result (bytes [k * 64, 4 n]) into v[dst .. dst + n) of every wave, each
    wave's load outstanding in its vmcnt queue (as ops_memory's loads)."""
    bwrite_vn(b, dst, data.view(U32).reshape(b.k, LANES, n).transpose(0, 2, 1))
    for w in b.waves:
        om._mark_pending(w, w.x, dst, n, None, b.pc)
    for i in range(dst, dst + n):
        b.ok.discard(i)


def _global_load(ins: Instr, f: PerWave) -> BFn | None:
    n = om._dwords(ins.mnemonic, "global_load_dword")
    off = _offset(ins)
    dst = _vreg(ins.operands[0], n)
    ga = _global_address(ins, ins.operands[1], ins.operands[2])
    if off is None or dst is None or ga is None:
        return None
    raw, chk = ga
    delta = U64(off & 0xFFFFFFFFFFFFFFFF)  # adding it wraps as the per-wave closure's +/- does

    def run(b: Batch) -> None:
        data = _read_all(b, raw(b) + delta, 4 * n)
        if data is None:
            _per_wave(b, f)
            return
        if b.chk:
            chk(b)
        _loaded(b, dst, n, data)

    return run


def _global_load_lds(ins: Instr, f: PerWave) -> BFn | None:
    n = om._dwords(ins.mnemonic, "global_load_lds_dword")
    if _offset(ins) != 0:
        return None
    ga = _global_address(ins, ins.operands[0], ins.operands[1])
    if ga is None:
        return None
    raw, chk = ga
    size = 4 * n

    def run(b: Batch) -> None:
        data = _read_all(b, raw(b), size)
        if data is None:
            _per_wave(b, f)
            return
        if b.chk:
            chk(b)
        for i, w in enumerate(b.waves):
            if b.chk and (not w.sdef[M0] or w.spend[M0]):
                check_sgpr(b.at(w), w.x, M0, 1)
            om._dma_to_lds(w.x, b.at(w), data[LANES * i : LANES * (i + 1)], size, w.s[M0])

    return run


def _global_store(ins: Instr, f: PerWave) -> BFn | None:
    """Where every lane of every wave writes into one buffer and no two lanes (of any wave)
    share a byte, one scatter: the per-wave writes in wave order give the same bytes."""
    n = om._dwords(ins.mnemonic, "global_store_dword")
    off = _offset(ins)
    di = _vreg(ins.operands[1], n)
    ga = _global_address(ins, ins.operands[0], ins.operands[2])
    if off is None or di is None or ga is None:
        return None
    raw, chk = ga
    delta = U64(off & 0xFFFFFFFFFFFFFFFF)

    def run(b: Batch) -> None:
        if b.exec_mask() is not None:
            _per_wave(b, f)
            return
        mem = b.waves[0].x.mem
        plan = mem.plan_write((raw(b) + delta).reshape(-1), 4 * n)
        if plan is None:
            _per_wave(b, f)
            return
        if b.chk:
            chk(b)
            for i in range(di, di + n):
                if i not in b.ok:
                    _check_v(b, i)
        region, idx = plan
        region.data[idx] = np.ascontiguousarray(b.V[:, di : di + n].transpose(0, 2, 1)).view(np.uint8).reshape(-1)
        for w in b.waves:
            om._mark_pending(w, w.x, -1, 0, None, b.pc)

    return run


def _buffer_load(ins: Instr, f: PerWave) -> BFn | None:
    """MUBUF loads (not the LDS form) where every wave's V# is a raw buffer, SOFFSET is 0 and
    every dword of every lane is in range and inside a registered buffer (the per-wave fast
    path's condition, with the bytes from any buffer)."""
    n = om._dwords(ins.mnemonic, "buffer_load_dword")
    if ins.modifiers.get("lds"):
        return None
    try:
        off = om._offset(ins, ("offen",))
    except UnknownInstruction:
        return None
    offen = bool(ins.modifiers.get("offen"))
    dst = _vreg(ins.operands[0], n)
    vi = _vreg(ins.operands[1]) if offen else None
    rs, so = ins.operands[2], ins.operands[3]  # vdata, vaddr (or off), srsrc, soffset
    if dst is None or (offen and vi is None) or not (isinstance(rs, Reg) and rs.file == "s" and rs.count == 4):
        return None
    ri = rs.index
    if isinstance(so, Imm):
        so_reg = None
        if so.bits & 0xFFFFFFFF:
            return None
    elif isinstance(so, Reg) and so.file == "s" and so.count == 1 and not so.neg and not so.abs:
        so_reg = so.index
    else:
        return None
    size = 4 * n

    def run(b: Batch) -> None:
        if b.exec_mask() is not None:
            _per_wave(b, f)
            return
        bases, nrecs = [], []
        for w in b.waves:
            s = w.s
            w1, w3 = s[ri + 1], s[ri + 3]
            if (w1 >> 16) & 0x3FFF or (w1 >> 30) & 3 or (w3 >> 23) & 1 or (so_reg is not None and s[so_reg]) or s[ri + 2] < size:
                _per_wave(b, f)  # a strided / swizzled V#, a SOFFSET or a tiny buffer: as per wave
                return
            bases.append(s[ri] | ((w1 & 0xFFFF) << 32))
            nrecs.append(s[ri + 2])
        o = (b.V[:, vi].astype(np.int64) if vi is not None else np.zeros(b.shape, np.int64)) + off
        if np.count_nonzero(o > (np.array(nrecs, dtype=np.int64) - size)[:, None]):
            _per_wave(b, f)
            return
        data = b.waves[0].x.mem.read_lanes((np.array(bases, dtype=U64)[:, None] + o.astype(U64)).reshape(-1), size)
        if data is None:
            _per_wave(b, f)
            return
        if b.chk:
            for w in b.waves:
                if not all(w.sdef[ri : ri + 4]) or any(w.spend[ri : ri + 4]):
                    check_sgpr(b.at(w), w.x, ri, 4)
                if so_reg is not None and (not w.sdef[so_reg] or w.spend[so_reg]):
                    check_sgpr(b.at(w), w.x, so_reg, 1)
            if vi is not None and vi not in b.ok:
                _check_v(b, vi)
        _loaded(b, dst, n, data)

    return run


BMEM: dict[str, Callable[[Instr, PerWave], BFn | None]] = {
    "global_store_dword": _global_store,
    "global_store_dwordx2": _global_store,
    "global_store_dwordx4": _global_store,
    "buffer_load_dword": _buffer_load,
    "buffer_load_dwordx2": _buffer_load,
    "buffer_load_dwordx4": _buffer_load,
    "ds_read_b32": _ds_read,
    "ds_read_b64": _ds_read,
    "ds_read_b128": _ds_read,
    "ds_read_b64_tr_b8": _ds_read_tr8,
    "ds_write_b32": _ds_write,
    "ds_write_b64": _ds_write,
    "ds_write_b128": _ds_write,
    "ds_bpermute_b32": _ds_bpermute,
    "global_load_dword": _global_load,
    "global_load_dwordx2": _global_load,
    "global_load_dwordx4": _global_load,
    "global_load_lds_dword": _global_load_lds,
    "global_load_lds_dwordx4": _global_load_lds,
}
