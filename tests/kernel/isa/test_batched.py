"""The batched closures (kernel.isa.compiled, compiled_memory) agree with the per-wave closures.

Each program runs twice on two workgroups of two waves from the same random state (different
per wave, with per-wave SGPR values and EXEC masks, partly undefined registers, different LDS
per workgroup): once with the batched forms, once with every instruction run wave by wave.
Register bits, definedness, SGPRs, outstanding loads, LDS and its shadow, global memory and
the checker findings must be the same; a batched form that computed, wrote or checked anything
else would show here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kernel.isa.asm import parse_program
from kernel.isa.compiled import batched_form
from kernel.isa.errors import IsaError
from kernel.isa.interp import decode, run_workgroups
from kernel.isa.state import Checks, GlobalMemory
from tests.kernel.isa.harness import TEMPLATE

FULL = 0xFFFF_FFFF_FFFF_FFFF
PARTIAL = 0xF7FF_FFFF_7FFF_FFFE
EXECS = {"full": (FULL,) * 4, "mixed": (FULL, PARTIAL, 0x0000_FFFF_0000_00FF, FULL)}

INSTRUCTIONS = [
    "v_add_u32_e32 v1, v10, v11",
    "v_add_u32_e32 v1, s20, v11",
    "v_sub_u32_e32 v1, s21, v11",
    "v_lshlrev_b32_e32 v1, 2, v10",
    "v_and_b32_e32 v1, 0xff, v10",
    "v_ashrrev_i32_e32 v1, 3, v10",
    "v_max3_u32 v1, v10, v11, s20",
    "v_med3_i32 v1, v10, v11, v12",
    "v_mul_lo_u32 v1, v10, s21",
    "v_perm_b32 v1, v10, v11, v12",
    "v_bfe_u32 v1, v10, 3, 5",
    "v_xad_u32 v1, v10, v11, s20",
    "v_maximum3_f32 v1, v10, v11, v14",
    "v_add_f32_e32 v1, v10, v11",
    "v_mul_f32_e64 v1, -v10, |v11|",
    "v_max_f32_e32 v1, v10, v11",
    "v_max3_f32 v1, v10, v11, v14",
    "v_fma_f32 v1, v10, v11, v14",
    "v_exp_f32_e32 v1, v10",
    "v_rcp_f32_e32 v1, v10",
    "v_sub_f32_e32 v1, s20, v10",
    "v_mov_b32_e32 v1, v10",
    "v_mov_b32_e32 v1, s20",
    "v_mov_b32_e32 v1, 0x3f800000",
    "v_cndmask_b32_e32 v1, v10, v11, vcc",
    "v_cndmask_b32_e64 v1, v10, s20, s[22:23]",
    "v_cmp_lt_i32_e32 vcc, v10, v11",
    "v_cmp_gt_u32_e64 s[22:23], v10, s20",
    "v_cmp_lt_f32_e32 vcc, v10, v11",
    "v_cmp_lg_f32_e64 s[22:23], v10, 0",
    "v_cmp_lt_u64_e32 vcc, v[10:11], v[14:15]",
    "v_cvt_pk_fp8_f32 v1, v10, v11",
    "v_cvt_pk_fp8_f32 v1, v10, v11 op_sel:[0,0,1]",
    "v_cvt_scalef32_pk_f16_fp8 v1, v12, v13",
    "v_cvt_scalef32_pk_f16_fp8 v1, v12, s20 op_sel:[1,0,0]",
    "v_cvt_pk_f32_fp8_e32 v[2:3], v12",
    "v_cvt_pk_f32_fp8_sdwa v[2:3], v12 src0_sel:WORD_1",
    "v_cvt_pk_bf16_f32 v1, v10, v11",
    "v_cvt_pk_f16_f32 v1, v10, s20",
    "v_pk_mul_f32 v[2:3], v[10:11], v[14:15]",
    "v_pk_mul_f32 v[2:3], v[10:11], s[20:21] op_sel_hi:[1,0]",
    "v_pk_mul_f32 v[2:3], v[10:11], 1.0 op_sel_hi:[1,0]",
    "v_pk_add_f32 v[2:3], v[10:11], v[14:15] op_sel:[1,0] op_sel_hi:[0,1] neg_lo:[0,1] neg_hi:[1,0]",
    "v_pk_fma_f32 v[2:3], v[10:11], v[14:15], v[16:17]",
    "v_pk_mul_f32 v[2:3], s[20:21], s[22:23] op_sel_hi:[0,0]",
    "v_pk_fma_f32 v[2:3], v[10:11], s[20:21], 0.5 op_sel_hi:[1,0,0]",
    "v_lshl_add_u64 v[2:3], v[40:41], 2, v[14:15]",
    "v_lshl_add_u64 v[2:3], s[20:21], 0, v[14:15]",
    "s_nop 0",
    "v_fmac_f32_e32 v1, v10, v11",
    "v_div_scale_f32 v1, vcc, v10, v11, v14",
    "v_div_scale_f32 v1, s[22:23], v11, v11, v10",
    "v_div_fmas_f32 v1, v10, v11, v14",
    "v_div_fixup_f32 v1, v10, v11, v14",
    "v_mad_u64_u32 v[2:3], s[22:23], v10, v11, v[14:15]",
    "v_mad_u64_u32 v[2:3], vcc, v10, s20, 0",
    "v_mfma_f32_16x16x32_f16 v[2:5], v[10:13], v[14:17], v[18:21]",
    "v_mfma_f32_16x16x32_bf16 v[2:5], v[10:13], v[14:17], 0",
    "v_mfma_scale_f32_16x16x128_f8f6f4 v[2:5], v[24:31], v[32:39], v[18:21], v12, v13 op_sel_hi:[0,0,0]",
    "ds_read_b128 v[2:5], v42",
    "ds_read_b128 v[2:5], v43",
    "ds_read_b64 v[2:3], v42 offset:8",
    "ds_read_b32 v1, v43 offset:4",
    "ds_bpermute_b32 v1, v45, v10",
    "global_load_dwordx4 v[2:5], v[40:41], off",
    "global_load_dwordx2 v[2:3], v[40:41], off offset:-8",
    "global_load_dword v1, v44, s[24:25] offset:4",
    "global_load_lds_dwordx4 v[40:41], off",
    "global_load_lds_dword v[40:41], off",
    "global_store_dwordx2 v[40:41], v[10:11], off",
    "global_store_dword v44, v10, s[24:25] offset:4",
    "global_store_dwordx4 v[40:41], v[10:13], off offset:16",
    "buffer_load_dword v1, v44, s[28:31], 0 offen",
    "buffer_load_dwordx4 v[2:5], v44, s[28:31], 0 offen offset:16",
    "buffer_load_dwordx2 v[2:3], v44, s[28:31], s32 offen",
    "buffer_load_dword v1, off, s[28:31], 0 offset:8",
]
MEMORY_SEQUENCES = [  # (program, instructions with a batched form)
    ("ds_read_b64_tr_b8 v[2:3], v42", 1),
    ("ds_read_b64_tr_b8 v[2:3], v43 offset:8", 1),
    ("global_load_lds_dwordx4 v[40:41], off\nds_read_b128 v[2:5], v42 offset:1024\ns_waitcnt vmcnt(0)\nds_read_b128 v[6:9], v43", 3),
    ("global_load_dwordx4 v[2:5], v[40:41], off\nv_add_u32_e32 v1, v2, v3\ns_waitcnt vmcnt(0)\nv_add_u32_e32 v6, v2, v3", 3),
    ("ds_write_b128 v42, v[10:13]\nds_read_b128 v[2:5], v42\ns_barrier\nds_read_b128 v[6:9], v42", 3),
    ("ds_read_b128 v[2:5], v42\nv_mov_b32_e32 v6, v2\ns_waitcnt lgkmcnt(0)\nv_mov_b32_e32 v7, v3", 3),
    # LDS writes of disjoint rows per wave (v46 from the work-item id: the batched scatter), read
    # back by other waves before and after a barrier (races), with partly undefined data (v50)
    ("v_lshlrev_b32_e32 v46, 4, v0\nds_write_b128 v46, v[10:13]\nds_read_b128 v[2:5], v42\ns_barrier\nds_read_b128 v[6:9], v42", 4),
    ("v_lshlrev_b32_e32 v46, 2, v0\nds_write_b32 v46, v50 offset:4\nds_read_b32 v1, v43\ns_waitcnt lgkmcnt(0)\nv_mov_b32_e32 v2, v1", 4),
    ("v_lshlrev_b32_e32 v46, 3, v0\nds_write_b64 v46, v[10:11] offset:8\ns_barrier\nds_read_b64 v[2:3], v42 offset:8", 3),
    ("v_lshlrev_b32_e32 v46, 4, v0\nv_add_u32_e32 v46, 0x1ff0, v46\nds_write_b128 v46, v[10:13]", 3),  # partly outside
    ("ds_write_b32 v43, v10\nds_write_b64 v42, v[10:11] offset:4", 2),  # shared rows; unaligned offset
    ("ds_read_b128 v[2:5], v50", 1),
    ("ds_bpermute_b32 v1, v45, v50", 1),
    ("global_load_dwordx4 v[2:5], v[50:51], off", 1),
    ("global_load_lds_dwordx4 v[40:41], off\ns_mov_b32 m0, s62\nglobal_load_lds_dword v[40:41], off", 2),
    ("global_store_dword v[40:41], v10, off\nglobal_store_dword v[40:41], v50, off offset:4", 2),
    ("v_mov_b32_e32 v46, 0\nv_mov_b32_e32 v47, 0\nglobal_store_dwordx2 v[46:47], v[10:11], off", 3),
    ("buffer_load_dwordx4 v[2:5], v50, s[28:31], 0 offen", 1),
    ("buffer_load_dwordx4 v[2:5], v44, s[28:31], s62 offen", 1),
    ("s_mov_b32 s31, 0x800000\nbuffer_load_dword v1, v44, s[28:31], 0 offen", 1),
    ("s_mov_b32 s30, 0x800\nbuffer_load_dwordx4 v[2:5], v44, s[28:31], 0 offen", 1),
]
# sequences: a register written then read (the clean-register cache), partly undefined sources
# and destinations (v50: some bytes of some lanes undefined; v51 never written)
SEQUENCES = [
    "v_add_u32_e32 v1, v10, v11\nv_mul_lo_u32 v2, v1, v1\nv_cvt_pk_fp8_f32 v3, v2, v1",
    "v_add_u32_e32 v1, v50, v10",
    "v_cvt_pk_fp8_f32 v50, v10, v11\nv_add_u32_e32 v1, v50, v10",
    "v_cvt_pk_fp8_f32 v51, v10, v11\nv_mov_b32_e32 v1, v51",
    "v_cvt_scalef32_pk_f16_fp8 v1, v50, v13",
    "v_pk_mul_f32 v[2:3], v[50:51], v[14:15]",
    "v_pk_mul_f32 v[2:3], v[50:51], v[14:15] op_sel_hi:[0,1]",
    "v_cmp_lt_i32_e32 vcc, v51, v11\nv_cndmask_b32_e32 v1, v10, v11, vcc",
    "v_cmp_lt_i32_e64 exec, v10, v11\nv_add_u32_e32 v1, v10, v11\nv_mov_b32_e32 v2, v1",
    "v_cndmask_b32_e64 v1, v10, v11, s[60:61]",
    "v_add_u32_e32 v1, s62, v10",
    "v_mad_u64_u32 v[2:3], s[22:23], v10, v11, v[50:51]",
    "v_mad_u64_u32 v[2:3], s[22:23], v10, v11, v[49:50]\nv_add_u32_e32 v1, v3, v10",
    "v_mfma_f32_16x16x32_f16 v[2:5], v[48:51], v[14:17], v[18:21]",
    "v_mfma_scale_f32_16x16x128_f8f6f4 v[2:5], v[24:31], v[32:39], v[18:21], v50, v13 op_sel_hi:[0,0,0]",
]


LDS = 8192
BUF = np.random.default_rng(7).integers(0, 256, 1 << 16, dtype=np.uint8)
BUF2 = np.random.default_rng(9).integers(0, 256, 1 << 12, dtype=np.uint8)


def _setup(execs: tuple[int, ...]):
    def setup(w) -> None:
        j = 2 * w.x.wg.wgid + w.wid  # waves: workgroup 0 (waves 0, 1), workgroup 1 (waves 2, 3)
        rng = np.random.default_rng(11 + j)
        n = w.v.shape[0]
        w.v[1:] = (rng.standard_normal((n - 1, 64)).astype(np.float32) * np.float32(8)).view(np.uint32)
        w.v[12] = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32) & np.uint32(0x7E7E7E7E)
        w.v[13] = (rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32) & np.uint32(0x00030303)) | np.uint32(0x7C7C7C7C)
        w.v[11][::7] = w.v[10][::7]  # some equal pairs for the compares
        w.v[10][3] = np.float32(np.nan).view(np.uint32)
        w.v[10][5] = np.uint32(0x80000000)  # -0
        w.v[11][5] = 0
        w.v[24:40] = rng.integers(0, 1 << 32, (16, 64), dtype=np.uint64).astype(np.uint32) & np.uint32(0x7E7E7E7E)
        addr = BUF.ctypes.data + 16 * rng.permutation(64).astype(np.uint64) + 256 * (1 + j)
        if j == 3:  # half of this wave's lanes address a second buffer (reads across buffers)
            addr[:32] = BUF2.ctypes.data + 16 + 16 * rng.permutation(32).astype(np.uint64)
        w.v[40] = (addr & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        w.v[41] = (addr >> np.uint64(32)).astype(np.uint32)
        w.v[42] = (16 * rng.permutation(64)).astype(np.uint32)  # 16-byte aligned LDS addresses
        w.v[43] = (4 * rng.integers(0, LDS // 4 - 8, 64)).astype(np.uint32)  # dword aligned only
        w.v[44] = (4 * rng.integers(0, 1024, 64)).astype(np.uint32)
        w.v[45] = rng.integers(0, 256, 64).astype(np.uint32)  # ds_bpermute byte addresses
        w.vdef[1:50] = 0xF
        w.vdef[50] = rng.integers(0, 16, 64, dtype=np.uint8) | np.uint8(0x1)
        w.vdef[50][: 32 + j] = 0xF
        w.vdef[51:] = 0xF
        w.vdef[51] = 0
        for i in range(20, 24):
            w.s[i] = int(rng.integers(0, 1 << 32)) if i % 2 or j else 0x3F800000
            w.sdef[i] = True
        base = BUF.ctypes.data
        sgprs = {24: base & 0xFFFFFFFF, 25: base >> 32, 124: 1024 + 64 * j, 106: int(rng.integers(0, 1 << 32)), 107: 0xA5A5A5A5, 32: 0}
        sgprs.update({28 + i: v for i, v in enumerate((base & 0xFFFFFFFF, base >> 32, 1 << 16, 0x00020000))})  # raw V# over BUF
        for i, val in sgprs.items():
            w.s[i] = val
            w.sdef[i] = True
        w.s[60], w.s[61] = 0x0F0F0F0F, 0xFFFF0000
        w.sdef[60] = w.sdef[61] = j != 1  # s[60:61] undefined on wave 1 only
        w.s[126], w.s[127] = execs[j] & 0xFFFFFFFF, execs[j] >> 32
        w.set_exec_from_sgprs()

    return setup


def _lds_init(wg) -> None:
    wg.lds[:] = np.random.default_rng(100 + wg.wgid).integers(0, 256, wg.lds.size, dtype=np.uint8)


def _run(body: str, execs: tuple[int, ...], batched: bool):
    text = TEMPLATE.format(body="\n".join("\t" + ln.strip() for ln in body.strip().splitlines()), lds=LDS, vgprs=64)
    dec = decode(parse_program(text))
    n_batched = sum(f is not None for f in dec.bcode[:-1])
    if not batched:
        dec = dataclasses.replace(dec, bcode=[None] * len(dec.code))
    chk = Checks("collect")
    buf = BUF.copy()
    mem = GlobalMemory()
    mem.add_array(BUF.ctypes.data, buf, "buf")
    mem.add_array(BUF2.ctypes.data, BUF2.copy(), "buf2")
    res = run_workgroups(dec, [0, 1], 0, mem, chk, 128, setup=_setup(execs), wg_setup=_lds_init)
    findings = sorted((f.kind, f.workgroup, f.wave, f.pc, tuple(f.lanes), f.detail) for f in chk.findings)
    return res, findings, n_batched, buf


def _same(body: str, mode: str, batched_lines: int | None = None) -> list:
    execs = EXECS[mode]
    errs = []
    for batched in (True, False):
        try:
            _run(body, execs, batched)
        except IsaError as err:
            errs.append((type(err).__name__, str(err)))
    if errs:  # refused (UnsupportedOperands): by both paths, with the same message
        assert len(errs) == 2 and errs[0] == errs[1], errs
        return errs[:1]
    ra, fa, n, bufa = _run(body, execs, True)
    rb, fb, _, bufb = _run(body, execs, False)
    want = len(body.strip().splitlines()) if batched_lines is None else batched_lines
    assert n == want, "every instruction here has a batched form"
    for ga, gb in zip(ra, rb):
        for wa, wb in zip(ga.waves, gb.waves):
            np.testing.assert_array_equal(wa.v, wb.v)
            np.testing.assert_array_equal(wa.vdef, wb.vdef)
            assert wa.s == wb.s and wa.sdef == wb.sdef and wa.scc == wb.scc
            assert [(p.vgprs, p.sgprs, p.pc) for p in wa.vm] == [(p.vgprs, p.sgprs, p.pc) for p in wb.vm]
            assert wa.vpend == wb.vpend and wa.executed == wb.executed
        for name in ("lds", "lds_writer", "lds_epoch", "lds_pending"):
            np.testing.assert_array_equal(getattr(ga.workgroup, name), getattr(gb.workgroup, name))
    np.testing.assert_array_equal(bufa, bufb)
    assert fa == fb
    return fa


@pytest.mark.parametrize("mode", sorted(EXECS))
@pytest.mark.parametrize("ins", INSTRUCTIONS)
def test_batched_form_matches_per_wave(ins: str, mode: str) -> None:
    assert _same(ins, mode) == []


@pytest.mark.parametrize("mode", sorted(EXECS))
@pytest.mark.parametrize("body", SEQUENCES)
def test_batched_sequences_match_per_wave(body: str, mode: str) -> None:
    _same(body, mode)


@pytest.mark.parametrize("mode", sorted(EXECS))
@pytest.mark.parametrize(("body", "n"), MEMORY_SEQUENCES)
def test_batched_memory_sequences_match_per_wave(body: str, n: int, mode: str) -> None:
    if "tr_b8" in body and mode == "mixed":
        pytest.skip("the transpose load refuses a partial EXEC (per wave and batched alike)")
    _same(body, mode, n)


def test_lds_writes_of_disjoint_rows_take_the_batched_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batched ds_write runs as one scatter (no wave-by-wave fallback) where rows are disjoint."""
    from kernel.isa import compiled_memory

    fallbacks: list[int] = []
    real = compiled_memory._per_wave
    monkeypatch.setattr(compiled_memory, "_per_wave", lambda b, f: (fallbacks.append(b.pc), real(b, f)))
    body = "v_lshlrev_b32_e32 v46, 4, v0\nds_write_b128 v46, v[10:13]\nv_lshlrev_b32_e32 v47, 2, v0\nds_write_b32 v47, v11 offset:4096"
    assert _same(body, "full", 4) == []
    assert fallbacks == []


def test_sequences_do_report() -> None:
    """The sequences report what they are built to (so their agreement is not vacuous)."""
    kinds = {f[0] for body in SEQUENCES for f in _same(body, "mixed")}
    assert kinds == {"uninitialized_read"}
    kinds = {f[0] for body, n in MEMORY_SEQUENCES if "tr_b8" not in body for f in _same(body, "full", n)}
    assert kinds == {"uninitialized_read", "dma_before_wait", "lds_race", "register_before_wait", "out_of_bounds", "UnsupportedOperands"}


def test_forms_outside_the_batched_set_run_per_wave() -> None:
    body = "\tv_readfirstlane_b32 s2, v1\n\tds_read_b32 v1, v2\n\tv_lshl_add_u64 v[2:3], v[4:5], v6, v[8:9]"
    prog = parse_program(TEMPLATE.format(body=body, lds=64, vgprs=16))
    assert [batched_form(i) for i in prog.instrs[:3]] == [None, None, None]


def test_stacked_matmul_is_the_per_wave_product() -> None:
    """The batched MFMAs form all waves' float64 products with one stacked matmul; the bits
    must be those of one 2-D product per wave (the per-wave closures), also where the sum's
    order would show (terms over 2^120 of exponent range)."""
    rng = np.random.default_rng(5)
    for k, kdim in ((1, 32), (7, 128), (64, 128)):
        a = rng.standard_normal((k, 16, kdim)) * np.exp2(rng.integers(-60, 60, (k, 16, kdim)))
        b = rng.standard_normal((k, kdim, 16)) * np.exp2(rng.integers(-60, 60, (k, kdim, 16)))
        want = np.stack([a[i] @ b[i] for i in range(k)])
        assert np.array_equal(np.matmul(a, b).view(np.uint64), want.view(np.uint64))
