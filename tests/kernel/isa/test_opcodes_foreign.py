"""Per-opcode tests of the instructions foreign FlyDSL kernels use: aiter's sparse MLA
prefill / decode and MLA reduce, and FlyDSL's shuffle_xor (ds_swizzle_b32).

Every expectation is worked out by hand from the instruction's definition (CDNA3/CDNA4 ISA
guide, LLVM's AMDGPU definitions; kernel/isa/catalog.py names the source per opcode).
"""

from __future__ import annotations

import numpy as np
import pytest

from kernel.isa.asm import parse_instruction
from kernel.isa.errors import UnknownInstruction, UnsupportedOperands
from kernel.isa.ops_memory import swizzle_offset
from kernel.isa.state import GlobalMemory
from tests.kernel.isa.harness import f32b, run_asm, sset, vset

LANE = np.arange(64)
ALL = 0xFFFFFFFF


def _run(asm: str, v: dict[int, object] | None = None, s: dict[int, int] | None = None, **kw):
    def setup(w):
        for i, val in (v or {}).items():
            vset(w, i, val)
        for i, val in (s or {}).items():
            sset(w, i, val)

    return run_asm(asm, setup=setup, **kw).waves[0]


# ---------------------------------------------------------------- ds_swizzle_b32


def test_swizzle_syntax_parses_as_one_modifier() -> None:
    ins = parse_instruction("ds_swizzle_b32 v3, v2 offset:swizzle(SWAP,1)")
    assert len(ins.operands) == 2 and ins.modifiers == {"offset": "swizzle(SWAP,1)"}


@pytest.mark.parametrize(
    "mode, expect",
    [
        ("swizzle(SWAP,16)", 0x401F),  # xor 16, and 0x1f
        ("swizzle(REVERSE,8)", 0x1C1F),  # xor 7
        ("swizzle(BROADCAST,8,2)", 0x0058),  # and 0x18, or 2
        ("swizzle(QUAD_PERM,3,2,1,0)", 0x801B),
        ('swizzle(BITMASK_PERM,"01pi0")', 0x0906),  # and 0b00110, or 0b01000, xor 0b00010
        ("0x8000", 0x8000),
    ],
)
def test_swizzle_offsets(mode: str, expect: int) -> None:
    assert swizzle_offset(mode) == expect


@pytest.mark.parametrize(
    "mode, lane, src",
    [
        ("swizzle(SWAP,1)", 0, 1),
        ("swizzle(SWAP,1)", 1, 0),
        ("swizzle(SWAP,1)", 32, 33),
        ("swizzle(SWAP,16)", 3, 19),
        ("swizzle(SWAP,16)", 40, 56),  # within the upper 32-lane half
        ("swizzle(QUAD_PERM,3,2,1,0)", 0, 3),
        ("swizzle(QUAD_PERM,3,2,1,0)", 5, 6),
        ("swizzle(BROADCAST,8,2)", 13, 10),
        ("swizzle(REVERSE,4)", 1, 2),
        ('swizzle(BITMASK_PERM,"00p00")', 13, 4),
    ],
)
def test_ds_swizzle_b32(mode: str, lane: int, src: int) -> None:
    w = _run(f"ds_swizzle_b32 v2, v10 offset:{mode}\ns_waitcnt lgkmcnt(0)", v={10: 100 + LANE})
    assert int(w.v[2][lane]) == 100 + src


def test_ds_swizzle_from_an_inactive_lane_is_refused() -> None:
    def setup(w):
        vset(w, 10, LANE)
        sset(w, 126, 0xFFFFFFFE)  # lane 0 inactive; lane 1 reads it under SWAP,1
        sset(w, 127, ALL)
        w.set_exec_from_sgprs()

    with pytest.raises(UnsupportedOperands):
        run_asm("ds_swizzle_b32 v2, v10 offset:swizzle(SWAP,1)", setup=setup)


# ---------------------------------------------------------------- integer


def test_v_mad_i64_i32() -> None:
    w = _run("v_mad_i64_i32 v[2:3], s[20:21], v10, v11, v[12:13]", v={10: 0xFFFFFFFD, 11: 5, 12: 7, 13: 0})
    assert (int(w.v[2][0]), int(w.v[3][0])) == (0xFFFFFFF8, 0xFFFFFFFF)  # -3 * 5 + 7 = -8
    assert (w.s[20], w.s[21]) == (ALL, ALL)  # bit 64 of the 65-bit sum: negative
    w = _run("v_mad_i64_i32 v[2:3], s[20:21], v10, v11, v[12:13]", v={10: 2, 11: 3, 12: ALL, 13: ALL})
    assert (int(w.v[2][0]), int(w.v[3][0]), w.s[20]) == (5, 0, 0)  # 6 + (-1) = 5
    w = _run("v_mad_i64_i32 v[2:3], s[20:21], v10, v11, v[12:13]", v={10: 1, 11: 1, 12: ALL, 13: 0x7FFFFFFF})
    assert (int(w.v[2][0]), int(w.v[3][0]), w.s[20]) == (0, 0x80000000, 0)  # 2^63 exactly: positive in 65 bits


def test_v_subbrev_co_u32_e32_e64() -> None:
    w = _run("v_subbrev_co_u32_e32 v2, vcc, v10, v11, vcc", v={10: 5, 11: 3}, s={106: ALL, 107: ALL})
    assert int(w.v[2][0]) == 0xFFFFFFFD and (w.s[106], w.s[107]) == (ALL, ALL)  # 3 - 5 - 1, borrow
    w = _run("v_subbrev_co_u32_e64 v2, s[20:21], v10, v11, s[22:23]", v={10: 3, 11: 5}, s={22: 0, 23: 0})
    assert int(w.v[2][0]) == 2 and w.s[20] == 0


def test_v_perm_b32() -> None:
    v = {10: 0x80706050, 11: 0x04030201}
    w = _run("v_perm_b32 v2, v10, v11, v12", v={**v, 12: 0x0C070400})
    assert int(w.v[2][0]) == 0x00805001  # bytes: S1.b0, S0.b0, S0.b3, zero
    w = _run("v_perm_b32 v2, v10, v11, v12", v={**v, 12: 0x0D0B0908})
    assert int(w.v[2][0]) == 0xFFFF0000  # sign of bit 15 (0), bit 31 (0), bit 63 (1), 0xFF
    w = _run("v_perm_b32 v2, v10, v11, 0x0a0a0a0a", v=v)
    assert int(w.v[2][0]) == 0  # bit 47 (0x60's top bit) is 0


# ---------------------------------------------------------------- float


@pytest.mark.parametrize(
    "op, a, b, expect",
    [
        ("neq", 0x7FC00000, f32b(1.0), True),
        ("neq", f32b(1.0), f32b(1.0), False),
        ("nlt", 0x7FC00000, f32b(1.0), True),
        ("nlt", f32b(1.0), f32b(2.0), False),
        ("nlt", f32b(2.0), f32b(1.0), True),
        ("nge", f32b(1.0), f32b(2.0), True),
        ("ngt", f32b(2.0), f32b(1.0), False),
        ("nle", 0x7FC00000, 0x7FC00000, True),
        ("nlg", f32b(1.0), f32b(1.0), True),
        ("o", f32b(1.0), 0x7FC00000, False),
        ("u", f32b(1.0), 0x7FC00000, True),
    ],
)
def test_v_cmp_negated_f32(op: str, a: int, b: int, expect: bool) -> None:
    """The forms v_cmp_neq_f32_e32 / v_cmp_neq_f32_e64, v_cmp_nlt_f32_e32 / _e64 and siblings."""
    for form, dst in (("e32", "vcc"), ("e64", "s[20:21]")):
        w = _run(f"v_cmp_{op}_f32_{form} {dst}, v10, v11", v={10: a, 11: b})
        idx = 106 if form == "e32" else 20
        assert (w.s[idx], w.s[idx + 1]) == ((ALL, ALL) if expect else (0, 0)), (op, form)


@pytest.mark.parametrize(
    "x, e, expect",
    [
        (1.5, 3, f32b(12.0)),
        (1.0, -149, 0x00000001),  # smallest denormal
        (1.0, -150, 0x00000000),  # half of it: ties to even (0)
        (1.5, -150, 0x00000001),  # 0.75 of it rounds up
        (1.0, 128, 0x7F800000),  # overflow
        (-0.0, 5, 0x80000000),
        (1.0, 0x7FFFFFFF, 0x7F800000),  # huge exponent operand
        (3.0, -0x80000000, 0x00000000),
    ],
)
def test_v_ldexp_f32(x: float, e: int, expect: int) -> None:
    w = _run("v_ldexp_f32 v2, v10, v11", v={10: f32b(x), 11: e & ALL})
    assert int(w.v[2][0]) == expect


def test_v_maximum3_f32() -> None:
    w = _run("v_maximum3_f32 v2, v10, v11, v12", v={10: f32b(1.0), 11: 0x7FC00000, 12: f32b(3.0)})
    assert np.isnan(w.v[2][:1].view(np.float32)[0])  # IEEE 754-2019 maximum: NaN propagates
    w = _run("v_maximum3_f32 v2, v10, v11, v12", v={10: 0x80000000, 11: 0, 12: f32b(-1.0)})
    assert int(w.v[2][0]) == 0  # +0 > -0
    w = _run("v_maximum3_f32 v2, v10, v11, v12", v={10: f32b(1.0), 11: f32b(2.5), 12: f32b(-3.0)})
    assert int(w.v[2][0]) == f32b(2.5)


def test_v_pk_add_f32_inline_constant() -> None:
    w = _run("v_pk_add_f32 v[2:3], v[10:11], 1.0 op_sel_hi:[1,0]", v={10: f32b(2.0), 11: f32b(3.0)})
    assert (int(w.v[2][0]), int(w.v[3][0])) == (f32b(3.0), f32b(4.0))
    with pytest.raises(UnknownInstruction):  # the high dword of a constant: undocumented, refused
        run_asm("v_pk_add_f32 v[2:3], v[10:11], 1.0")


def test_v_pk_mov_b32() -> None:
    w = _run("v_pk_mov_b32 v[2:3], v[10:11], v[12:13] op_sel:[1,0]", v={10: 1, 11: 2, 12: 3, 13: 4})
    assert (int(w.v[2][0]), int(w.v[3][0])) == (2, 3)


def test_v_mfma_f32_16x16x32_fp8_fp8() -> None:
    """A[m][10] = 1.0 (lane (m, g=1) byte 2), B[10][3] = 2.0 (lane (t=3, g=1) byte 2), all else
    0: D[m][3] = 2.0 for every m, i.e. all 4 dwords of lanes 3, 19, 35, 51 (D[4g + r][t])."""

    def setup(w):
        a = np.zeros((64, 8), dtype=np.uint8)
        a[16:32, 2] = 0x38  # OCP E4M3 1.0
        b = np.zeros((64, 8), dtype=np.uint8)
        b[16 + 3, 2] = 0x40  # OCP E4M3 2.0
        for base, arr in ((10, a), (12, b)):
            words = arr.view("<u4")
            vset(w, base, words[:, 0])
            vset(w, base + 1, words[:, 1])

    w = run_asm("v_mfma_f32_16x16x32_fp8_fp8 v[2:5], v[10:11], v[12:13], 0\ns_nop 7", setup=setup).waves[0]
    d = w.v[2:6].view(np.float32)  # [r, lane]
    hot = np.isin(LANE, [3, 19, 35, 51])
    assert (d[:, hot] == 2.0).all() and (d[:, ~hot] == 0.0).all()


# ---------------------------------------------------------------- memory


def _buffer(words: int = 64) -> tuple[GlobalMemory, np.ndarray]:
    arr = (0x1000 + np.arange(words)).astype(np.uint32)
    mem = GlobalMemory()
    mem.add_array(arr.ctypes.data, arr.view(np.uint8), "buf")
    return mem, arr


def _rsrc(w, addr: int, num_records: int) -> None:
    sset(w, 4, addr & ALL)
    sset(w, 5, (addr >> 32) & 0xFFFF)  # stride 0
    sset(w, 6, num_records)
    sset(w, 7, 0x27000)


def test_buffer_store_dword_x2_x4_range_checked() -> None:
    mem, arr = _buffer()

    def setup(w):
        _rsrc(w, arr.ctypes.data, 24)
        vset(w, 10, LANE * 8)
        for i in range(4):
            vset(w, 20 + i, 0xA0 + 16 * i + LANE)

    run_asm("buffer_store_dwordx2 v[20:21], v10, s[4:7], 0 offen\ns_waitcnt vmcnt(0)", mem=mem, setup=setup)
    # lane l writes dwords 2l, 2l + 1; num_records 24 bytes: lanes 0-2 land, the rest are dropped
    assert arr[:6].tolist() == [0xA0, 0xB0, 0xA1, 0xB1, 0xA2, 0xB2]
    assert arr[6:].tolist() == (0x1000 + np.arange(6, 64)).tolist()
    mem, arr = _buffer()

    def setup1(w):
        _rsrc(w, arr.ctypes.data, 18)
        vset(w, 10, LANE * 16)
        for i in range(4):
            vset(w, 20 + i, 0xA0 + 16 * i + LANE)

    run_asm("buffer_store_dwordx4 v[20:23], v10, s[4:7], 0 offen offset:4", mem=mem, setup=setup1)
    # lane 0: bytes 4..19 -> dwords 1..4, range 18 bytes: dwords 1-3 (ends 8, 12, 16 <= 18) land, dword 4 not
    assert arr[:6].tolist() == [0x1000, 0xA0, 0xB0, 0xC0, 0x1004, 0x1005]
    mem, arr = _buffer()

    def setup2(w):
        _rsrc(w, arr.ctypes.data, 256)
        vset(w, 10, LANE * 4)
        vset(w, 20, 0x5000 + LANE)

    run_asm("buffer_store_dword v20, v10, s[4:7], 0 offen", mem=mem, setup=setup2)
    assert arr.tolist() == (0x5000 + np.arange(64)).tolist()


def test_buffer_load_dword_lds_with_offset() -> None:
    """LDS_ADDR = M0 + inst_offset + 4 lane; memory address VADDR + inst_offset (CDNA4 9.1.9)."""
    mem, arr = _buffer(128)

    def setup(w):
        _rsrc(w, arr.ctypes.data, 4 * 100)
        vset(w, 10, LANE * 4)
        sset(w, 124, 256)

    res = run_asm("buffer_load_dword v10, s[4:7], 0 offen offset:64 lds\ns_waitcnt vmcnt(0)", mem=mem, setup=setup, lds=1024)
    lds = res.workgroup.lds[256 + 64 : 256 + 64 + 256].view("<u4")
    # lane l reads dword 16 + l (in range while 4 (16 + l) + 4 <= 400, i.e. l <= 83: all lanes)
    assert lds.tolist() == (0x1000 + 16 + np.arange(64)).tolist()


def test_buffer_load_lds_before_wait_is_found() -> None:
    mem, arr = _buffer(128)

    def setup(w):
        _rsrc(w, arr.ctypes.data, 512)
        vset(w, 10, LANE * 4)
        vset(w, 11, LANE * 4)
        sset(w, 124, 0)

    res = run_asm("buffer_load_dword v10, s[4:7], 0 offen lds\nds_read_b32 v2, v11", mem=mem, setup=setup, checks="collect")
    assert [f.kind for f in res.workgroup.checks.findings] == ["dma_before_wait"]


def test_ds_read2_b64_and_write2_b32() -> None:
    lds = np.arange(256, dtype=np.uint32)

    def setup(w):
        vset(w, 10, 0)

    w = run_asm("ds_read2_b64 v[2:5], v10 offset0:1 offset1:4\ns_waitcnt lgkmcnt(0)", setup=setup, lds_init=lds.view(np.uint8)).waves[0]
    # element 0 at byte 8 (dwords 2, 3), element 1 at byte 32 (dwords 8, 9)
    assert [int(w.v[i][0]) for i in range(2, 6)] == [2, 3, 8, 9]

    def setup2(w):
        vset(w, 10, LANE * 4)
        vset(w, 20, 0x100 + LANE)
        vset(w, 21, 0x200 + LANE)

    res = run_asm("ds_write2_b32 v10, v20, v21 offset1:64\ns_waitcnt lgkmcnt(0)", setup=setup2, lds=1024)
    words = res.workgroup.lds[:512].view("<u4")
    assert words[:64].tolist() == (0x100 + LANE).tolist() and words[64:128].tolist() == (0x200 + LANE).tolist()
    w = run_asm("ds_read2st64_b32 v[2:3], v10 offset1:1\ns_waitcnt lgkmcnt(0)", setup=setup, lds_init=lds.view(np.uint8)).waves[0]
    assert (int(w.v[2][0]), int(w.v[3][0])) == (0, 64)  # second element 64 * 4 bytes further
    w = run_asm("ds_read2_b32 v[2:3], v10 offset0:3 offset1:7\ns_waitcnt lgkmcnt(0)", setup=setup, lds_init=lds.view(np.uint8)).waves[0]
    assert (int(w.v[2][0]), int(w.v[3][0])) == (3, 7)


def _bf16_operand(w, base: int, entries: dict[tuple[int, int], float]) -> None:
    """v[base], v[base + 1] hold 4 bf16 per lane; entries (lane, element) -> value, else 0."""
    a = np.zeros((64, 4), dtype=np.uint16)
    for (lane, j), val in entries.items():
        a[lane, j] = f32b(val) >> 16  # exact bf16 values
    words = a.view("<u4")
    vset(w, base, words[:, 0])
    vset(w, base + 1, words[:, 1])


def test_v_mfma_f32_16x16x16_bf16() -> None:
    """A[3][9] = 2 (k 9: lane 3 + 16 * 2, element 1), B[9][7] = 0.5 (lane 7 + 32, element 1):
    D[3][7] = 1 only, i.e. lane 7 (g 0), dword 3 (m = 4g + r)."""

    def setup(w):
        _bf16_operand(w, 10, {(35, 1): 2.0})
        _bf16_operand(w, 12, {(39, 1): 0.5})

    w = run_asm("v_mfma_f32_16x16x16_bf16 v[2:5], v[10:11], v[12:13], 0\ns_nop 7", setup=setup).waves[0]
    d = w.v[2:6].view(np.float32)  # [r, lane]
    assert d[3, 7] == 1.0 and np.count_nonzero(d) == 1


def test_v_mfma_f32_32x32x8_bf16() -> None:
    """A[5][6] = 1 (lane 5 + 32, element 2), B[6][20] = 3 (lane 20 + 32, element 2), C = 1:
    D = 1 everywhere but D[5][20] = 4, at lane 20 + 32 (g 1), dword 1 (m = 8 (r // 4) + 4g + r % 4)."""

    def setup(w):
        _bf16_operand(w, 30, {(37, 2): 1.0})
        _bf16_operand(w, 32, {(52, 2): 3.0})
        for i in range(16):
            vset(w, 40 + i, f32b(1.0))

    w = run_asm("v_mfma_f32_32x32x8_bf16 v[2:17], v[30:31], v[32:33], v[40:55]\ns_nop 7", setup=setup).waves[0]
    d = w.v[2:18].view(np.float32)  # [r, lane]
    assert d[1, 52] == 4.0
    d = d.copy()
    d[1, 52] = 1.0
    assert (d == 1.0).all()


def test_ds_read_u16_and_i16() -> None:
    lds = np.zeros(64, dtype=np.uint8)
    lds[6:8] = [0x34, 0x92]

    def setup(w):
        vset(w, 10, 2)

    w = run_asm("ds_read_u16 v2, v10 offset:4\nds_read_i16 v3, v10 offset:4\ns_waitcnt lgkmcnt(0)", setup=setup, lds_init=lds).waves[0]
    assert int(w.v[2][0]) == 0x9234 and int(w.v[3][0]) == 0xFFFF9234


def test_buffer_store_short_range_checked() -> None:
    mem, arr = _buffer()

    def setup(w):
        _rsrc(w, arr.ctypes.data, 6)
        vset(w, 10, LANE * 2)
        vset(w, 20, 0xABCD0000 + LANE)

    run_asm("buffer_store_short v20, v10, s[4:7], 0 offen", mem=mem, setup=setup)
    # lanes 0-2 write halfwords 0-2 (bytes 0..5 <= 6), the rest are dropped; only the low 16 bits
    # halfwords 0-2 written; halfword 3 (high half of dword 1 = 0x1001) and dword 2 keep their values
    assert arr.view("<u2")[:5].tolist() == [0x0000, 0x0001, 0x0002, 0x0000, 0x1002]


@pytest.mark.parametrize(
    "asm, s, scc",
    [
        ("s_cmpk_lt_i32 s2, 0x41", {2: 0xFFFFFFFF}, 1),  # -1 < 65
        ("s_cmpk_lt_i32 s2, 0xffff", {2: 0}, 0),  # 0 < -1 (sign-extended): false
        ("s_cmpk_lt_u32 s2, 0xc0", {2: 0xFFFFFFFF}, 0),  # 2^32 - 1 < 192: false
        ("s_cmpk_lt_u32 s2, 0xffff", {2: 0x1000}, 1),  # 4096 < 65535 (zero-extended)
        ("s_bitcmp0_b32 s2, 0", {2: 6}, 1),  # bit 0 of 6 is 0
        ("s_bitcmp0_b32 s2, 1", {2: 6}, 0),
        ("s_bitcmp1_b32 s2, 34", {2: 4}, 1),  # S1[4:0] = 2
    ],
)
def test_sopk_compares_and_bitcmp(asm: str, s: dict[int, int], scc: int) -> None:
    w = _run(asm, s=s)
    assert (w.scc, w.scc_def) == (scc, True)
