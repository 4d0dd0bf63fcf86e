"""The batched closures (kernel.isa.compiled) agree with the per-wave closures.

Each program runs twice on three waves of one workgroup from the same random state (different
per wave, with per-wave SGPR values and EXEC masks, and partly undefined registers): once with
the batched forms, once with every instruction run wave by wave. Register bits, definedness,
SGPRs and the checker findings must be the same; a batched form that computed, wrote or
checked anything else would show here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kernel.isa.asm import parse_program
from kernel.isa.compiled import batched_form
from kernel.isa.interp import decode, run_workgroup
from kernel.isa.state import Checks, GlobalMemory
from tests.isa.harness import TEMPLATE

FULL = 0xFFFF_FFFF_FFFF_FFFF
PARTIAL = 0xF7FF_FFFF_7FFF_FFFE
EXECS = {"full": (FULL, FULL, FULL), "mixed": (FULL, PARTIAL, 0x0000_FFFF_0000_00FF)}

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
    "v_lshl_add_u64 v[2:3], v[40:41], 2, v[14:15]",
    "v_lshl_add_u64 v[2:3], s[20:21], 0, v[14:15]",
    "s_nop 0",
    "v_mfma_f32_16x16x32_f16 v[2:5], v[10:13], v[14:17], v[18:21]",
    "v_mfma_f32_16x16x32_bf16 v[2:5], v[10:13], v[14:17], 0",
    "v_mfma_scale_f32_16x16x128_f8f6f4 v[2:5], v[24:31], v[32:39], v[18:21], v12, v13 op_sel_hi:[0,0,0]",
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
    "v_mfma_f32_16x16x32_f16 v[2:5], v[48:51], v[14:17], v[18:21]",
    "v_mfma_scale_f32_16x16x128_f8f6f4 v[2:5], v[24:31], v[32:39], v[18:21], v50, v13 op_sel_hi:[0,0,0]",
]


def _setup(execs: tuple[int, int, int]):
    def setup(w) -> None:
        rng = np.random.default_rng(11 + w.wid)
        n = w.v.shape[0]
        w.v[1:] = (rng.standard_normal((n - 1, 64)).astype(np.float32) * np.float32(8)).view(np.uint32)
        w.v[12] = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32) & np.uint32(0x7E7E7E7E)
        w.v[13] = (rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32) & np.uint32(0x00030303)) | np.uint32(0x7C7C7C7C)
        w.v[11][::7] = w.v[10][::7]  # some equal pairs for the compares
        w.v[10][3] = np.float32(np.nan).view(np.uint32)
        w.v[10][5] = np.uint32(0x80000000)  # -0
        w.v[11][5] = 0
        w.vdef[1:50] = 0xF
        w.vdef[50] = rng.integers(0, 16, 64, dtype=np.uint8) | np.uint8(0x1)
        w.vdef[50][: 32 + w.wid] = 0xF
        w.v[24:40] = rng.integers(0, 1 << 32, (16, 64), dtype=np.uint64).astype(np.uint32) & np.uint32(0x7E7E7E7E)
        w.vdef[51:] = 0xF
        w.vdef[51] = 0
        for i in range(20, 24):
            w.s[i] = int(rng.integers(0, 1 << 32)) if i % 2 or w.wid else 0x3F800000
            w.sdef[i] = True
        w.s[106], w.s[107] = int(rng.integers(0, 1 << 32)), int(rng.integers(0, 1 << 32))
        w.sdef[106] = w.sdef[107] = True
        w.s[60], w.s[61] = 0x0F0F0F0F, 0xFFFF0000
        w.sdef[60] = w.sdef[61] = w.wid != 1  # s[60:61] undefined on wave 1 only
        w.s[126], w.s[127] = execs[w.wid] & 0xFFFFFFFF, execs[w.wid] >> 32
        w.set_exec_from_sgprs()

    return setup


def _run(body: str, execs: tuple[int, int, int], batched: bool):
    text = TEMPLATE.format(body="\n".join("\t" + ln.strip() for ln in body.strip().splitlines()), lds=1024, vgprs=64)
    dec = decode(parse_program(text))
    n_batched = sum(f is not None for f in dec.bcode[:-1])
    if not batched:
        dec = dataclasses.replace(dec, bcode=[None] * len(dec.code))
    chk = Checks("collect")
    r = run_workgroup(dec, 0, 0, GlobalMemory(), chk, 192, setup=_setup(execs))
    findings = sorted((f.kind, f.wave, f.pc, tuple(f.lanes), f.detail) for f in chk.findings)
    return r, findings, n_batched


def _same(body: str, mode: str) -> list:
    execs = EXECS[mode]
    ra, fa, n = _run(body, execs, True)
    rb, fb, _ = _run(body, execs, False)
    assert n == len(body.strip().splitlines()), "every instruction here has a batched form"
    for wa, wb in zip(ra.waves, rb.waves):
        np.testing.assert_array_equal(wa.v, wb.v)
        np.testing.assert_array_equal(wa.vdef, wb.vdef)
        assert wa.s == wb.s and wa.sdef == wb.sdef and wa.scc == wb.scc
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


def test_sequences_do_report() -> None:
    """The undefined-register sequences report (so their agreement above is not vacuous)."""
    kinds = {f[0] for body in SEQUENCES for f in _same(body, "mixed")}
    assert kinds == {"uninitialized_read"}


def test_forms_outside_the_batched_set_run_per_wave() -> None:
    body = "\tv_readfirstlane_b32 s2, v1\n\tds_read_b32 v1, v2\n\tv_lshl_add_u64 v[2:3], v[4:5], v6, v[8:9]"
    prog = parse_program(TEMPLATE.format(body=body, lds=64, vgprs=16))
    assert [batched_form(i) for i in prog.instrs[:3]] == [None, None, None]
