"""Per-opcode tests of the memory instructions (SMEM, MUBUF, global, LDS DMA, DS).

Expected values follow the instruction definitions (CDNA3 ISA ch. 9-11; gfx950 transpose load
per the ds_read_tr8_b64 description: each 16-lane group reads a 16 x 8-byte block and performs
two interleaved 8x8 byte transposes); see docs/reference/isa-opcodes.md.
"""

from __future__ import annotations

import numpy as np

from kernel.isa.state import GlobalMemory
from tests.kernel.isa.harness import run_asm, sset, vset

LANE = np.arange(64)


def _buffer(words: int = 64) -> tuple[GlobalMemory, np.ndarray]:
    arr = (0x1000 + np.arange(words)).astype(np.uint32)
    mem = GlobalMemory()
    mem.add_array(arr.ctypes.data, arr.view(np.uint8), "buf")
    return mem, arr


def _addr_sgprs(w, base: int, addr: int) -> None:
    sset(w, base, addr & 0xFFFFFFFF)
    sset(w, base + 1, addr >> 32)


def _v64(w, idx: int, addrs) -> None:
    a = np.broadcast_to(np.asarray(addrs, dtype=np.uint64), (64,))
    vset(w, idx, a & np.uint64(0xFFFFFFFF))
    vset(w, idx + 1, a >> np.uint64(32))


def _rsrc(w, addr: int, num_records: int) -> None:
    sset(w, 4, addr & 0xFFFFFFFF)
    sset(w, 5, (addr >> 32) & 0xFFFF)  # stride 0
    sset(w, 6, num_records)
    sset(w, 7, 0x27000)


def test_s_load_dword_x2_x8() -> None:
    mem, arr = _buffer()
    a = arr.ctypes.data
    w = run_asm(
        """
        s_load_dword s10, s[4:5], 0x4
        s_load_dwordx2 s[12:13], s[4:5], 0x8
        s_load_dwordx8 s[16:23], s[4:5], 0x20
        s_load_dwordx4 s[24:27], s[4:5], 0x40
        s_waitcnt lgkmcnt(0)
    """,
        mem=mem,
        setup=lambda w: _addr_sgprs(w, 4, a),
    ).waves[0]
    assert w.s[24:28] == [0x1010 + i for i in range(4)]
    assert w.s[10] == 0x1001 and (w.s[12], w.s[13]) == (0x1002, 0x1003)
    assert w.s[16:24] == [0x1008 + i for i in range(8)]


def test_buffer_load_dword_range_checked() -> None:
    mem, arr = _buffer()
    a = arr.ctypes.data

    def setup(w):
        _rsrc(w, a, 12)
        vset(w, 10, LANE * 4)

    w = run_asm("buffer_load_dword v2, v10, s[4:7], 0 offen\ns_waitcnt vmcnt(0)", mem=mem, setup=setup).waves[0]
    assert w.v[2][:3].tolist() == [0x1000, 0x1001, 0x1002]
    assert (w.v[2][3:] == 0).all()  # offset >= num_records: reads return 0


def test_buffer_load_dwordx4_per_dword_range_check() -> None:
    mem, arr = _buffer()
    a = arr.ctypes.data

    def setup(w):
        _rsrc(w, a, 12)
        vset(w, 10, 0)

    w = run_asm("buffer_load_dwordx4 v[2:5], v10, s[4:7], 0 offen offset:4\ns_waitcnt vmcnt(0)", mem=mem, setup=setup).waves[0]
    assert [int(w.v[i][0]) for i in range(2, 6)] == [0x1001, 0x1002, 0, 0]


def test_global_load_dwordx4_offset() -> None:
    mem, arr = _buffer()
    a = arr.ctypes.data
    w = run_asm(
        "global_load_dwordx4 v[2:5], v[10:11], off offset:16\ns_waitcnt vmcnt(0)", mem=mem, setup=lambda w: _v64(w, 10, a + 16 * (LANE % 4))
    ).waves[0]
    assert [int(w.v[i][1]) for i in range(2, 6)] == [0x1008, 0x1009, 0x100A, 0x100B]


def test_global_store_dword_saddr_and_dwordx2() -> None:
    mem, arr = _buffer()
    a = arr.ctypes.data

    def setup(w):
        _addr_sgprs(w, 4, a)
        vset(w, 10, LANE * 4)
        vset(w, 2, 5000 + LANE)

    run_asm("global_store_dword v10, v2, s[4:5]", mem=mem, setup=setup)
    assert arr.tolist() == [5000 + i for i in range(64)]

    def setup2(w):
        _v64(w, 10, a + 8 * (LANE % 32))
        vset(w, 2, 7000 + LANE)
        vset(w, 3, 9000 + LANE)

    run_asm("s_mov_b64 exec, 0xffffffff\nglobal_store_dwordx2 v[10:11], v[2:3], off", mem=mem, setup=setup2)
    assert arr[:4].tolist() == [7000, 9000, 7001, 9001]


def test_global_load_lds_dwordx4_and_dword() -> None:
    mem, arr = _buffer()
    a = arr.ctypes.data

    def setup(w):
        _v64(w, 10, a + 16 * ((63 - LANE) % 16))
        sset(w, 124, 0x100)

    r = run_asm("global_load_lds_dwordx4 v[10:11], off\ns_waitcnt vmcnt(0)", mem=mem, setup=setup, lds=2048)
    lds = r.workgroup.lds[0x100 : 0x100 + 1024].view(np.uint32).reshape(64, 4)
    assert lds[0].tolist() == [0x103C, 0x103D, 0x103E, 0x103F]  # lane 0 read words 60..63
    assert lds[15].tolist() == [0x1000, 0x1001, 0x1002, 0x1003]

    def setup1(w):
        _v64(w, 10, a + 4 * ((LANE * 3) % 64))
        sset(w, 124, 0)

    r = run_asm("global_load_lds_dword v[10:11], off\ns_waitcnt vmcnt(0)", mem=mem, setup=setup1, lds=512)
    assert r.workgroup.lds[:256].view(np.uint32).tolist() == [0x1000 + (3 * i) % 64 for i in range(64)]


def test_ds_write_read_b32_b128() -> None:
    def setup(w):
        vset(w, 10, LANE * 16)
        for i in range(4):
            vset(w, 2 + i, LANE * 10 + i)
        vset(w, 11, LANE * 4)

    r = run_asm(
        """
        ds_write_b128 v10, v[2:5]
        ds_write_b32 v11, v2 offset:2048
        s_waitcnt lgkmcnt(0)
        ds_read_b128 v[20:23], v10 offset:16
        ds_read_b32 v24, v11 offset:2048
        s_waitcnt lgkmcnt(0)
    """,
        setup=setup,
    ).waves[0]
    assert [int(r.v[20 + i][3]) for i in range(4)] == [40, 41, 42, 43]  # lane 3 reads lane 4's 16 bytes
    assert int(r.v[24][7]) == 70


def test_ds_read_b64_tr_b8() -> None:
    """Lane i of each 16-lane group addresses 8 bytes at 8i (a 16 x 8-byte block); lane t gets
    byte j = byte t % 8 of lane 2j + t // 8's 8 bytes, i.e. column t of the 8 x 16 row-major
    block: LDS[16 j + t] (plus the group's base)."""

    def setup(w):
        vset(w, 10, (LANE // 16) * 128 + 8 * (LANE % 16))

    lds = (np.arange(1024) % 251).astype(np.uint8)
    w = run_asm("ds_read_b64_tr_b8 v[2:3], v10 offset:8\ns_waitcnt lgkmcnt(0)", setup=setup, lds=1024, lds_init=lds, checks="off").waves[0]
    got = np.stack([w.v[2], w.v[3]], axis=1).astype("<u4").view(np.uint8).reshape(64, 8)
    t = LANE % 16
    base = (LANE // 16) * 128 + 8
    want = (base[:, None] + 16 * np.arange(8)[None, :] + t[:, None]) % 251
    assert (got == want).all()


def test_ds_bpermute_b32() -> None:
    def setup(w):
        vset(w, 10, ((LANE + 1) % 64) * 4)
        vset(w, 11, 100 + LANE)
        sset(w, 126, 0xFFFFFFDF)  # lane 5 inactive
        sset(w, 127, 0xFFFFFFFF)
        w.set_exec_from_sgprs()

    w = run_asm("ds_bpermute_b32 v2, v10, v11\ns_waitcnt lgkmcnt(0)", setup=setup).waves[0]
    assert int(w.v[2][0]) == 101 and int(w.v[2][63]) == 100
    assert int(w.v[2][4]) == 0  # source lane 5 is inactive
