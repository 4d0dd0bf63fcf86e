"""Memory semantics: MUBUF buffer loads (V# range checks), FLAT-global loads/stores, the LDS
DMA form global_load_lds_dword{,x4} (M0-addressed), and DS (LDS) reads/writes, the transposing
ds_read_b64_tr_b8 and ds_bpermute_b32.

Sources: CDNA3 ISA reference guide ch. 9 (buffer resource descriptor: base [47:0], stride
[61:48], num_records word 2; "out-of-range" reads return 0, writes are dropped; range checking
of raw (stride 0) buffers is per dword against num_records), ch. 10 (global instructions:
address = VADDR64 + offset, or SADDR64 + VADDR32 + offset), ch. 11 (LDS: DS_BPERMUTE_B32,
out-of-range LDS access); LLVM AMDGPUUsage / SIInstrInfo for the LDS DMA
(LDS address = M0 + lane * bytes); the gfx950 transpose load ds_read_b64_tr_b8: each 16-lane
group reads a 16 x 8-byte block and performs two interleaved 8x8 byte transposes (Mojo
std.gpu.intrinsics.ds_read_tr8_b64 documentation; LLVM llvm.amdgcn.ds.read.tr8.b64): lane i of
the group receives byte j = byte (i % 8) of the 8 bytes addressed by lane 2j + i // 8.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernel.isa.asm import Imm, Instr, Reg
from kernel.isa.consts import K
from kernel.isa.errors import UnknownInstruction, UnsupportedOperands
from kernel.isa.operands import (
    is_off,
    lanes_of,
    report,
    require,
    src32,
    src64,
    ssrc,
    vdst,
    write_v,
    write_vn,
)
from kernel.isa.state import LANE_IDS, LANES, M0, PendingOp, Wave, byte_span, no_lanes

Fn = Callable[[Wave, Any], int | None]
MEM: dict[str, Callable[[Instr, Any], Fn]] = {}
U32 = np.uint32


def op(*names: str):
    def deco(f):
        for n in names:
            MEM[n] = f
        return f

    return deco


def _dwords(m: str, prefix: str) -> int:
    s = m[len(prefix) :]
    if s == "":
        return 1
    if s.startswith("x") and s[1:].isdigit():
        return int(s[1:])
    raise UnknownInstruction(f"{m}: unknown width")


CACHE_POLICY = ("sc0", "sc1", "nt", "glc", "slc")  # coherence / temporal hints: no effect on values here


def _offset(ins: Instr, allowed: tuple[str, ...]) -> int:
    extra = [k for k in ins.modifiers if k not in allowed + ("offset",) + (CACHE_POLICY if not ins.mnemonic.startswith("ds_") else ())]
    if extra:
        raise UnknownInstruction(f"`{ins.text}` (#{ins.index}): modifier(s) {extra} not modelled")
    v = ins.modifiers.get("offset", 0)
    return int(v, 0) if isinstance(v, str) else int(v)


def _bytes_to_words(b: np.ndarray, n: int) -> np.ndarray:
    """[lanes, 4n] uint8 -> [n, lanes] uint32."""
    return np.ascontiguousarray(b).view("<u4").reshape(b.shape[0], n).T


def _words_to_bytes(ws: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(np.stack(ws, axis=1).astype("<u4")).view(np.uint8).reshape(LANES, 4 * len(ws))


def _mark_pending(w: Wave, x: Any, dst: int, n: int, lds: np.ndarray | None, pc: int) -> None:
    tok = x.wg.next_token()
    if dst >= 0:
        w.vpend[dst : dst + n] = [tok] * n
    w.vm.append(PendingOp(tok, lds, (dst, n) if dst >= 0 else None, pc))


def _mark_lgkm(w: Wave, x: Any, dst: int, n: int, pc: int) -> None:
    """An LDS operation counted by lgkmcnt; dst >= 0: its VGPR destinations stay pending."""
    tok = x.wg.next_token()
    if dst >= 0:
        w.vpend[dst : dst + n] = [tok] * n
    w.lgkm.append(PendingOp(tok, None, (dst, n) if dst >= 0 else None, pc))


def _oob(x: Any, w: Wave, bad: np.ndarray, what: str) -> None:
    if bad is not no_lanes(bad.shape[0]) and bad.any():
        report(x, w, "out_of_bounds", lanes_of(bad), what)


# ------------------------------------------------------------------ MUBUF


def _raw_buffer(ins: Instr, rsrc: Any, soff: Any, w: Wave, x: Any) -> tuple[int, int]:
    """(base address, num_records) of a raw (stride 0, no swizzle / add_tid) V#; other
    descriptors and a non-zero SOFFSET raise UnsupportedOperands (their range check is not
    modelled)."""
    desc = rsrc(w, x)
    w0, w1, w2, w3 = [(desc >> (32 * i)) & 0xFFFFFFFF for i in range(4)]
    base = w0 | ((w1 & 0xFFFF) << 32)
    stride = (w1 >> 16) & 0x3FFF
    if stride or (w1 >> 30) & 3 or (w3 >> 23) & 1:
        raise UnsupportedOperands(
            f"`{ins.text}`: buffer with stride {stride} / swizzle / add_tid not modelled (word1 {w1:#x}, word3 {w3:#x})"
        )
    so = soff(w, x)
    if so:
        raise UnsupportedOperands(f"`{ins.text}`: a non-zero SOFFSET ({so}) is not modelled (its role in the range check)")
    return base, w2


def _mubuf_operands(ins: Instr, vaddr_pos: int) -> tuple[Any, Any, Any, int]:
    """(vaddr getter or None, V# getter, SOFFSET getter, instruction offset) of a MUBUF form."""
    inst_off = _offset(ins, ("offen", "lds"))
    offen = bool(ins.modifiers.get("offen"))
    vaddr = src32(ins, ins.operands[vaddr_pos]) if offen else None
    rs = ins.operands[vaddr_pos + 1]
    require(isinstance(rs, Reg) and rs.file == "s" and rs.count == 4, ins, "resource descriptor")
    return vaddr, ssrc(ins, rs, 4), ssrc(ins, ins.operands[vaddr_pos + 2], 1), inst_off


@op("buffer_load_dword", "buffer_load_dwordx2", "buffer_load_dwordx3", "buffer_load_dwordx4")
def _buffer_load(ins: Instr, d: Any) -> Fn:
    n = _dwords(ins.mnemonic, "buffer_load_dword")
    if ins.modifiers.get("lds"):
        return _buffer_load_lds(ins, n)
    vaddr, rsrc, soff, inst_off = _mubuf_operands(ins, 1)
    dst = vdst(ins, ins.operands[0], n)

    def run(w: Wave, x: Any) -> None:
        base, nrec = _raw_buffer(ins, rsrc, soff, w, x)
        off = (vaddr(w, x).astype(np.int64) if vaddr else np.zeros(LANES, np.int64)) + inst_off
        addr0 = np.uint64(base) + off.astype(np.uint64)
        if w.exec_all and nrec >= 4 * n and not np.count_nonzero(off > K(nrec - 4 * n, np.int64)):
            b = x.mem.read_all(addr0, 4 * n)  # every dword of every lane in range, one buffer
            if b is not None:
                write_vn(w, dst, b.view(U32).reshape(LANES, n).T)
                _mark_pending(w, x, dst, n, None, w.pc)
                return
        act = w.exec
        words = []
        for i in range(n):
            inr = act & (off + 4 * i + 4 <= nrec)
            b, bad = x.mem.read(addr0 + np.uint64(4 * i), 4, inr)
            _oob(x, w, bad, f"buffer load dword {i} inside the descriptor range (num_records {nrec}) but outside every registered buffer")
            words.append(np.ascontiguousarray(b).view("<u4").reshape(LANES))
        for i in range(n):
            write_v(w, dst + i, words[i])
        _mark_pending(w, x, dst, n, None, w.pc)

    return run


def _buffer_load_lds(ins: Instr, n: int) -> Fn:
    """MUBUF LDS DMA (`buffer_load_dword{,x4} vaddr, s[..], soffset offen offset:k lds`, CDNA4
    ISA section 9.1.9 "Memory Buffer Load to LDS": LDS_ADDR = LDSbase + M0 + inst_offset +
    TIDinWave * 4, * 16 for the 4-dword form; the memory address adds the same inst_offset):
    lane l's dwords (range-checked as a load: 0 when out of range) land at LDS M0 + offset +
    4n l, counted by vmcnt like global_load_lds_dword."""
    require(n in (1, 4), ins, "width of the LDS form (dword or dwordx4)")
    vaddr, rsrc, soff, inst_off = _mubuf_operands(ins, 0)
    m0 = ssrc(ins, Reg("s", M0, 1), 1)
    size = 4 * n

    def run(w: Wave, x: Any) -> None:
        base, nrec = _raw_buffer(ins, rsrc, soff, w, x)
        off = (vaddr(w, x).astype(np.int64) if vaddr else np.zeros(LANES, np.int64)) + inst_off
        addr0 = np.uint64(base) + off.astype(np.uint64)
        if w.exec_all and nrec >= size and not np.count_nonzero(off > K(nrec - size, np.int64)):
            fast = x.mem.read_all(addr0, size)  # every dword of every lane in range, one buffer
            if fast is not None:
                _dma_to_lds(x, w, fast, size, m0(w, x) + inst_off)
                return
        b = np.zeros((LANES, size), dtype=np.uint8)
        for i in range(n):
            inr = w.exec & (off + 4 * i + 4 <= nrec)
            bi, bad = x.mem.read(addr0 + np.uint64(4 * i), 4, inr)
            _oob(x, w, bad, f"buffer LDS DMA source inside the descriptor range (num_records {nrec}) but outside every registered buffer")
            b[:, 4 * i : 4 * i + 4] = bi
        _dma_to_lds(x, w, b, size, m0(w, x) + inst_off)

    return run


@op("buffer_store_short", "buffer_store_byte")
def _buffer_store_sub(ins: Instr, d: Any) -> Fn:
    """MEM16 / MEM8[V#.base + VADDR + offset] = the low 16 / 8 bits of DATA when offset + size
    <= num_records, else dropped (CDNA3 ISA ch. 9 BUFFER_STORE_SHORT / BYTE)."""
    size = 2 if ins.mnemonic.endswith("short") else 1
    vaddr, rsrc, soff, inst_off = _mubuf_operands(ins, 1)
    data = src32(ins, ins.operands[0], need=(1 << size) - 1)

    def run(w: Wave, x: Any) -> None:
        base, nrec = _raw_buffer(ins, rsrc, soff, w, x)
        off = (vaddr(w, x).astype(np.int64) if vaddr else np.zeros(LANES, np.int64)) + inst_off
        inr = w.exec & (off + size <= nrec)
        b = _words_to_bytes([data(w, x)])[:, :size]
        bad = x.mem.write(np.uint64(base) + off.astype(np.uint64), np.ascontiguousarray(b), inr)
        _oob(
            x, w, bad, f"buffer store of {size} bytes inside the descriptor range (num_records {nrec}) but outside every registered buffer"
        )
        _mark_pending(w, x, -1, 0, None, w.pc)

    return run


@op("buffer_store_dword", "buffer_store_dwordx2", "buffer_store_dwordx3", "buffer_store_dwordx4")
def _buffer_store(ins: Instr, d: Any) -> Fn:
    """MEM32[V#.base + VADDR + offset + 4 i] = DATA[i] for each dword in range
    (offset + 4 (i + 1) <= num_records); out-of-range dwords are dropped (CDNA3 ISA ch. 9)."""
    n = _dwords(ins.mnemonic, "buffer_store_dword")
    vaddr, rsrc, soff, inst_off = _mubuf_operands(ins, 1)
    dop = ins.operands[0]
    require(isinstance(dop, Reg) and dop.file == "v" and dop.count == n, ins, "store data")
    data = [src32(ins, Reg("v", dop.index + i)) for i in range(n)]

    def run(w: Wave, x: Any) -> None:
        base, nrec = _raw_buffer(ins, rsrc, soff, w, x)
        off = (vaddr(w, x).astype(np.int64) if vaddr else np.zeros(LANES, np.int64)) + inst_off
        addr0 = np.uint64(base) + off.astype(np.uint64)
        vals = [g(w, x) for g in data]
        for i in range(n):
            inr = w.exec & (off + 4 * i + 4 <= nrec)
            b = _words_to_bytes([vals[i]])
            bad = x.mem.write(addr0 + np.uint64(4 * i), b, inr)
            _oob(x, w, bad, f"buffer store dword {i} inside the descriptor range (num_records {nrec}) but outside every registered buffer")
        _mark_pending(w, x, -1, 0, None, w.pc)

    return run


# ------------------------------------------------------------------ global


def _global_addr(ins: Instr, vop, sop):
    """(getter of per-lane 64-bit address, description) for `vaddr, saddr|off`."""
    if is_off(sop):
        va = src64(ins, vop)
        return lambda w, x: va(w, x)
    v32 = src32(ins, vop)
    s64 = ssrc(ins, sop, 2)
    return lambda w, x: np.uint64(s64(w, x)) + v32(w, x).astype(np.uint64)


@op("global_load_dword", "global_load_dwordx2", "global_load_dwordx3", "global_load_dwordx4")
def _global_load(ins: Instr, d: Any) -> Fn:
    n = _dwords(ins.mnemonic, "global_load_dword")
    inst_off = _offset(ins, ())
    dst = vdst(ins, ins.operands[0], n)
    ga = _global_addr(ins, ins.operands[1], ins.operands[2])

    def run(w: Wave, x: Any) -> None:
        addr = ga(w, x) + np.uint64(inst_off & 0xFFFFFFFFFFFFFFFF) if inst_off >= 0 else ga(w, x) - np.uint64(-inst_off)
        b, bad = x.mem.read(addr, 4 * n, w.exec)
        _oob(x, w, bad, f"global load of {4 * n} bytes outside every registered tensor")
        ws = _bytes_to_words(b, n)
        for i in range(n):
            write_v(w, dst + i, ws[i])
        _mark_pending(w, x, dst, n, None, w.pc)

    return run


@op("global_store_dword", "global_store_dwordx2", "global_store_dwordx3", "global_store_dwordx4")
def _global_store(ins: Instr, d: Any) -> Fn:
    n = _dwords(ins.mnemonic, "global_store_dword")
    inst_off = _offset(ins, ())
    ga = _global_addr(ins, ins.operands[0], ins.operands[2])
    dop = ins.operands[1]
    require(isinstance(dop, Reg) and dop.file == "v" and dop.count == n, ins, "store data")
    data = [src32(ins, Reg("v", dop.index + i)) for i in range(n)]

    def run(w: Wave, x: Any) -> None:
        addr = ga(w, x) + np.uint64(inst_off) if inst_off >= 0 else ga(w, x) - np.uint64(-inst_off)
        b = _words_to_bytes([g(w, x) for g in data])
        bad = x.mem.write(addr, b, w.exec)
        _oob(x, w, bad, f"global store of {4 * n} bytes outside every registered tensor")
        _mark_pending(w, x, -1, 0, None, w.pc)

    return run


def _dma_to_lds(x: Any, w: Wave, b: np.ndarray, size: int, base: int) -> None:
    """Land active lane l's `size` bytes (b[l]) at LDS base + size * l as an outstanding DMA
    (vmcnt); destination bytes outside the allocation are reported and skipped."""
    g = x.wg
    g.dma_inflight += 1
    g.note_write(w.wid)
    if w.exec_all and base >= 0 and base + LANES * size <= g.lds.size:  # one contiguous block
        sl = slice(base, base + LANES * size)
        g.lds[sl] = b.reshape(-1)
        tok = g.next_token()
        g.lds_pending[sl] = tok
        g.lds_writer[sl] = w.wid
        g.lds_epoch[sl] = g.epoch
        w.vm.append(PendingOp(tok, sl, None, w.pc))
        return
    span = np.arange(size, dtype=np.int64)
    lanes = np.nonzero(w.exec)[0]
    idx = (base + size * lanes.astype(np.int64))[:, None] + span
    inside = (idx >= 0).all(axis=1) & (idx < g.lds.size).all(axis=1)
    if not inside.all():
        report(
            x,
            w,
            "out_of_bounds",
            [int(v) for v in lanes[~inside]],
            f"LDS DMA destination outside the {g.lds.size}-byte allocation (M0 {base:#x})",
        )
    lanes, idx = lanes[inside], idx[inside]
    g.lds[idx] = b[lanes]
    flat = idx.reshape(-1)
    tok = g.next_token()
    g.lds_pending[flat] = tok
    g.lds_writer[flat] = w.wid
    g.lds_epoch[flat] = g.epoch
    w.vm.append(PendingOp(tok, flat, None, w.pc))


@op("global_load_lds_dword", "global_load_lds_dwordx4")
def _global_load_lds(ins: Instr, d: Any) -> Fn:
    """LDS DMA: lane l's 4n bytes from its global address land at LDS M0 + 4n * l."""
    n = _dwords(ins.mnemonic, "global_load_lds_dword")
    inst_off = _offset(ins, ())
    if inst_off:
        raise UnknownInstruction(f"`{ins.text}`: an instruction offset on the LDS DMA form is not modelled")
    ga = _global_addr(ins, ins.operands[0], ins.operands[1])
    m0 = ssrc(ins, Reg("s", M0, 1), 1)
    size = 4 * n

    def run(w: Wave, x: Any) -> None:
        addr = ga(w, x)
        b, bad = x.mem.read(addr, size, w.exec)
        _oob(x, w, bad, f"LDS DMA source ({size} bytes) outside every registered tensor")
        _dma_to_lds(x, w, b, size, m0(w, x))

    return run


# ------------------------------------------------------------------ DS


def _lds_index(ins: Instr, w: Wave, x: Any, addr: np.ndarray, size: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(active lanes inside the allocation, their byte indices [k, size]); reports the rest."""
    a = addr.astype(np.int64, copy=False)
    if w.exec_all and a.min() >= 0 and a.max() + size <= x.wg.lds.size:
        return LANE_IDS, a[:, None] + byte_span(size)
    act = w.exec
    inside = act & (a >= 0) & (a + size <= x.wg.lds.size)
    bad = act & ~inside
    if bad.any():
        report(x, w, "out_of_bounds", lanes_of(bad), f"LDS {what} of {size} bytes outside the {x.wg.lds.size}-byte allocation")
    lanes = np.nonzero(inside)[0]
    return lanes, a[lanes][:, None] + np.arange(size, dtype=np.int64)


def _gather(x: Any, lanes: np.ndarray, idx: np.ndarray, size: int) -> np.ndarray:
    """[LANES, size] LDS bytes at idx for `lanes` (from _lds_index), 0 for the other lanes."""
    if lanes is LANE_IDS:
        return x.wg.lds[idx]
    b = np.zeros((LANES, size), dtype=np.uint8)
    b[lanes] = x.wg.lds[idx]
    return b


def check_lds_read(ins: Instr, w: Wave, x: Any, lanes: np.ndarray, idx: np.ndarray) -> None:
    g = x.wg
    if not g.dma_inflight and not g.others_wrote(w.wid):
        return  # no byte is pending and no other wave wrote in this epoch: nothing to find
    pend = g.lds_pending[idx]
    if pend.any():
        bad = lanes[(pend != 0).any(axis=1)]
        report(
            x,
            w,
            "dma_before_wait",
            [int(v) for v in bad],
            "reads LDS bytes an LDS DMA (global_load_lds) wrote before the s_waitcnt vmcnt that covers it",
        )
    wr = g.lds_writer[idx]
    race = (wr >= 0) & (wr != w.wid) & (g.lds_epoch[idx] == g.epoch)
    if race.any():
        rows = race.any(axis=1)
        first = np.argwhere(race)[0]
        report(
            x,
            w,
            "lds_race",
            [int(v) for v in lanes[rows]],
            f"reads LDS byte {int(idx[first[0], first[1]])} written by wave {int(wr[first[0], first[1]])} with no barrier in between",
        )


def _lds_write(x: Any, w: Wave, idx: np.ndarray, data: np.ndarray) -> None:
    g = x.wg
    g.note_write(w.wid)
    g.lds[idx] = data
    g.lds_writer[idx] = w.wid
    g.lds_epoch[idx] = g.epoch
    g.lds_pending[idx] = 0


@op("ds_read_u16", "ds_read_i16", "ds_read_u8", "ds_read_i8")
def _ds_read_sub(ins: Instr, d: Any) -> Fn:
    """D = zero- (u) or sign- (i) extended LDS16 / LDS8 at ADDR + offset (CDNA3 ISA ch. 11
    DS_READ_U16 / I16 / U8 / I8); the whole dword of D is written."""
    size = 2 if "16" in ins.mnemonic else 1
    signed = "_i" in ins.mnemonic
    off = _offset(ins, ())
    dst = vdst(ins, ins.operands[0])
    va = src32(ins, ins.operands[1])

    def run(w: Wave, x: Any) -> None:
        lanes, idx = _lds_index(ins, w, x, va(w, x).astype(np.int64) + off, size, "read")
        if x.chk:
            check_lds_read(ins, w, x, lanes, idx)
        b = np.zeros((LANES, 4), dtype=np.uint8)
        b[lanes, :size] = x.wg.lds[idx]
        if signed:
            b[lanes, size:] = np.where(b[lanes, size - 1 : size] & 0x80, 0xFF, 0).astype(np.uint8)
        write_v(w, dst, _bytes_to_words(b, 1)[0])
        _mark_lgkm(w, x, dst, 1, w.pc)

    return run


@op("ds_read_b32", "ds_read_b64", "ds_read_b128")
def _ds_read(ins: Instr, d: Any) -> Fn:
    n = {"ds_read_b32": 1, "ds_read_b64": 2, "ds_read_b128": 4}[ins.mnemonic]
    off = _offset(ins, ())
    dst = vdst(ins, ins.operands[0], n)
    va = src32(ins, ins.operands[1])

    def run(w: Wave, x: Any) -> None:
        a32 = va(w, x)
        g = x.wg
        rows = g.lds_rows(a32, off, 4 * n) if w.exec_all else None  # aligned and inside: one gather
        if rows is not None:
            if x.chk and (g.dma_inflight or g.others_wrote(w.wid)):
                check_lds_read(ins, w, x, LANE_IDS, (a32.astype(np.int64) + off)[:, None] + byte_span(4 * n))
            write_vn(w, dst, rows.T)
        else:
            a = a32.astype(np.int64) + off
            lanes, idx = _lds_index(ins, w, x, a, 4 * n, "read")
            if x.chk:
                check_lds_read(ins, w, x, lanes, idx)
            write_vn(w, dst, _bytes_to_words(_gather(x, lanes, idx, 4 * n), n))
        _mark_lgkm(w, x, dst, n, w.pc)

    return run


@op("ds_write_b32", "ds_write_b64", "ds_write_b128")
def _ds_write(ins: Instr, d: Any) -> Fn:
    n = {"ds_write_b32": 1, "ds_write_b64": 2, "ds_write_b128": 4}[ins.mnemonic]
    off = _offset(ins, ())
    va = src32(ins, ins.operands[0])
    dop = ins.operands[1]
    require(isinstance(dop, Reg) and dop.file == "v" and dop.count == n, ins, "store data")
    data = [src32(ins, Reg("v", dop.index + i)) for i in range(n)]

    def run(w: Wave, x: Any) -> None:
        lanes, idx = _lds_index(ins, w, x, va(w, x).astype(np.int64) + off, 4 * n, "write")
        b = _words_to_bytes([g(w, x) for g in data])
        # lanes in order: a later lane's bytes win where addresses coincide
        _lds_write(x, w, idx.reshape(-1), b[lanes].reshape(-1))
        _mark_lgkm(w, x, -1, 0, w.pc)

    return run


def _tr8_source() -> np.ndarray:
    """ds_read_b64_tr_b8: byte j of lane l's result is byte l % 8 of the 8 bytes lane
    16 (l // 16) + 2 j + (l % 16) // 8 read, as an index into the flattened [lane, 8] rows."""
    i = np.arange(LANES)
    src_lane = ((i // 16) * 16)[:, None] + 2 * np.arange(8)[None, :] + ((i % 16) // 8)[:, None]  # [lane, j]
    return (8 * src_lane + (i % 8)[:, None]).astype(np.intp)


TR8_SOURCE = _tr8_source()


@op("ds_read_b64_tr_b8")
def _ds_read_tr8(ins: Instr, d: Any) -> Fn:
    off = _offset(ins, ())
    dst = vdst(ins, ins.operands[0], 2)
    va = src32(ins, ins.operands[1])
    flat_src = TR8_SOURCE

    def run(w: Wave, x: Any) -> None:
        if not w.exec_all:
            raise UnsupportedOperands(f"`{ins.text}`: partial EXEC not modelled for the transpose load")
        a32 = va(w, x)
        g = x.wg
        rows = g.lds_rows(a32, off, 8)
        if rows is not None:
            if x.chk and (g.dma_inflight or g.others_wrote(w.wid)):
                check_lds_read(ins, w, x, LANE_IDS, (a32.astype(np.int64) + off)[:, None] + byte_span(8))
            data = rows.view(np.uint8)
        else:
            lanes, idx = _lds_index(ins, w, x, a32.astype(np.int64) + off, 8, "transpose read")
            if x.chk:
                check_lds_read(ins, w, x, lanes, idx)
            data = _gather(x, lanes, idx, 8)
        out = np.ascontiguousarray(data).reshape(-1)[flat_src]  # [lane, j]
        write_vn(w, dst, out.view(U32).T)
        _mark_lgkm(w, x, dst, 2, w.pc)

    return run


@op("ds_bpermute_b32")
def _ds_bpermute(ins: Instr, d: Any) -> Fn:
    """D[l] = DATA[((ADDR[l] + offset) / 4) % 64]; 0 when that source lane is inactive."""
    off = _offset(ins, ())
    dst = vdst(ins, ins.operands[0])
    va = src32(ins, ins.operands[1])
    dop = ins.operands[2]
    require(isinstance(dop, Reg) and dop.file == "v" and dop.count == 1, ins, "data operand")
    didx = dop.index

    def run(w: Wave, x: Any) -> None:
        src = ((va(w, x).astype(np.int64) + off) >> 2) & 63
        if x.chk:
            from kernel.isa.operands import check_vgpr

            used = np.zeros(LANES, dtype=bool)
            used[src[w.exec]] = True
            check_vgpr(w, x, didx, lanes=used & w.exec)
        data = w.v[didx]
        val = np.where(w.exec[src], data[src], U32(0))
        write_v(w, dst, val)
        _mark_lgkm(w, x, dst, 1, w.pc)

    return run


def _offsets2(ins: Instr) -> tuple[int, int]:
    extra = [k for k in ins.modifiers if k not in ("offset0", "offset1")]
    if extra:
        raise UnknownInstruction(f"`{ins.text}` (#{ins.index}): modifier(s) {extra} not modelled")
    return tuple(int(str(ins.modifiers.get(k, 0)), 0) for k in ("offset0", "offset1"))  # type: ignore[return-value]


@op("ds_read2_b32", "ds_read2_b64", "ds_read2st64_b32", "ds_read2st64_b64")
def _ds_read2(ins: Instr, d: Any) -> Fn:
    """Two LDS reads: element e (4 or 8 bytes) at ADDR + offset_e * e (* 64 for the st64 forms),
    e = 0, 1 (CDNA3 ISA ch. 11 DS_READ2_B32 / B64, DS_READ2ST64_*; offsets are 8-bit)."""
    wide = ins.mnemonic.endswith("b64")
    esz = 8 if wide else 4
    scale = esz * (64 if "st64" in ins.mnemonic else 1)
    o0, o1 = _offsets2(ins)
    k = esz // 4
    dst = vdst(ins, ins.operands[0], 2 * k)
    va = src32(ins, ins.operands[1])

    def run(w: Wave, x: Any) -> None:
        a = va(w, x).astype(np.int64)
        for e, o in enumerate((o0, o1)):
            lanes, idx = _lds_index(ins, w, x, a + o * scale, esz, "read")
            if x.chk:
                check_lds_read(ins, w, x, lanes, idx)
            write_vn(w, dst + e * k, _bytes_to_words(_gather(x, lanes, idx, esz), k))
        _mark_lgkm(w, x, dst, 2 * k, w.pc)

    return run


@op("ds_write2_b32", "ds_write2_b64", "ds_write2st64_b32", "ds_write2st64_b64")
def _ds_write2(ins: Instr, d: Any) -> Fn:
    """Two LDS writes: DATA0 at ADDR + offset0 * e, then DATA1 at ADDR + offset1 * e (e = 4 or 8
    bytes, * 64 for st64) (CDNA3 ISA ch. 11 DS_WRITE2_*)."""
    wide = ins.mnemonic.endswith("b64")
    esz = 8 if wide else 4
    scale = esz * (64 if "st64" in ins.mnemonic else 1)
    o0, o1 = _offsets2(ins)
    k = esz // 4
    va = src32(ins, ins.operands[0])
    datas = []
    for dop in ins.operands[1:3]:
        require(isinstance(dop, Reg) and dop.file == "v" and dop.count == k, ins, "store data")
        datas.append([src32(ins, Reg("v", dop.index + i)) for i in range(k)])

    def run(w: Wave, x: Any) -> None:
        a = va(w, x).astype(np.int64)
        for o, data in zip((o0, o1), datas):
            lanes, idx = _lds_index(ins, w, x, a + o * scale, esz, "write")
            b = _words_to_bytes([g(w, x) for g in data])
            _lds_write(x, w, idx.reshape(-1), b[lanes].reshape(-1))
        _mark_lgkm(w, x, -1, 0, w.pc)

    return run


def swizzle_source_lanes(offset: int) -> np.ndarray:
    """Source lane of each lane for DS_SWIZZLE_B32's 16-bit offset (CDNA3 ISA DS_SWIZZLE_B32):
    offset[15] = 1: quad permute, lane 4q + i reads lane 4q + offset[2i+1:2i]; else bit-masked,
    within each 32-lane half: ((lane & and_mask) | or_mask) ^ xor_mask with and_mask =
    offset[4:0], or_mask = offset[9:5], xor_mask = offset[14:10]."""
    lane = np.arange(LANES)
    if offset & 0x8000:
        return (lane & ~3) + ((offset >> (2 * (lane & 3))) & 3)
    and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    return (lane & 0x20) | ((((lane & 0x1F) & and_m) | or_m) ^ xor_m)


def swizzle_offset(text: str) -> int:
    """LLVM's `swizzle(...)` macros -> the 16-bit offset (AMDGPUAsmParser::parseSwizzleOffset):
    QUAD_PERM a,b,c,d; BITMASK_PERM "5 chars of 0/1/p/i, bit 4 first"; BROADCAST size, lane;
    SWAP size; REVERSE size. A plain integer is taken as is."""
    t = text.strip()
    if not t.startswith("swizzle("):
        return int(t, 0)
    args = [a.strip() for a in t[len("swizzle(") : -1].split(",")]
    mode, vals = args[0], args[1:]
    if mode == "QUAD_PERM" and len(vals) == 4:
        return 0x8000 | sum((int(v) & 3) << (2 * i) for i, v in enumerate(vals))
    if mode == "BITMASK_PERM" and len(vals) == 1:
        ctl = vals[0].strip('"')
        if len(ctl) != 5 or set(ctl) - set("01pi"):
            raise UnknownInstruction(f"swizzle BITMASK_PERM control {ctl!r} is not 5 chars of 0 1 p i")
        and_m = or_m = xor_m = 0
        for i, ch in enumerate(ctl):
            bit = 1 << (4 - i)
            if ch == "1":
                or_m |= bit
            elif ch == "p":
                and_m |= bit
            elif ch == "i":
                and_m |= bit
                xor_m |= bit
        return and_m | (or_m << 5) | (xor_m << 10)
    if mode in ("SWAP", "REVERSE") and len(vals) == 1:
        size = int(vals[0])
        return 0x1F | ((size if mode == "SWAP" else size - 1) << 10)
    if mode == "BROADCAST" and len(vals) == 2:
        size, lane = int(vals[0]), int(vals[1])
        return (0x1F & ~(size - 1)) | (lane << 5)
    raise UnknownInstruction(f"swizzle mode {t!r} not modelled")


@op("ds_swizzle_b32")
def _ds_swizzle(ins: Instr, d: Any) -> Fn:
    """D[l] = DATA[src(l)] with src from the offset (swizzle_source_lanes); no LDS access,
    counted by lgkmcnt. A source lane that is inactive is not modelled (UnsupportedOperands)."""
    extra = [k for k in ins.modifiers if k != "offset"]
    if extra:
        raise UnknownInstruction(f"`{ins.text}` (#{ins.index}): modifier(s) {extra} not modelled")
    src = swizzle_source_lanes(swizzle_offset(str(ins.modifiers.get("offset", "0"))))
    dst = vdst(ins, ins.operands[0])
    dop = ins.operands[1]
    require(isinstance(dop, Reg) and dop.file == "v" and dop.count == 1, ins, "data operand")
    didx = dop.index

    def run(w: Wave, x: Any) -> None:
        act = w.exec
        if not act[src[act]].all():
            raise UnsupportedOperands(f"`{ins.text}`: reads an inactive lane (the ISA's value for it is not modelled)")
        if x.chk:
            from kernel.isa.operands import check_vgpr

            used = np.zeros(LANES, dtype=bool)
            used[src[act]] = True
            check_vgpr(w, x, didx, lanes=used)
        write_v(w, dst, w.v[didx][src])
        _mark_lgkm(w, x, dst, 1, w.pc)

    return run


_ = (Imm, LANE_IDS)
