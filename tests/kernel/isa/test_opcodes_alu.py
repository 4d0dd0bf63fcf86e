"""Per-opcode tests of the scalar and vector ALU semantics.

Every expectation is a bit pattern worked out by hand from the instruction's definition in the
CDNA3/CDNA4 ISA guide or LLVM's AMDGPU definitions (docs/reference/isa-opcodes.md names the source per opcode),
never from the interpreter's or the kernel's own helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from tests.kernel.isa.harness import f32b, run_asm, sset, vset

ALL = 0xFFFFFFFFFFFFFFFF


@dataclass
class Case:
    asm: str
    v: dict[int, object] = field(default_factory=dict)  # VGPR -> value (broadcast) before
    s: dict[int, int] = field(default_factory=dict)  # SGPR -> value before
    scc: int | None = None
    exec_mask: int = ALL
    ev: dict[int, int] = field(default_factory=dict)  # expected VGPR (lane 0 unless lanes given)
    es: dict[int, int] = field(default_factory=dict)  # expected SGPR
    escc: int | None = None
    lane: int = 0

    @property
    def opcode(self) -> str:
        return self.asm.split()[0]


def _run(c: Case):
    def setup(w):
        for i, val in c.v.items():
            vset(w, i, val)
        for i, val in c.s.items():
            sset(w, i, val)
        if c.scc is not None:
            w.scc, w.scc_def = c.scc, True
        sset(w, 126, c.exec_mask & 0xFFFFFFFF)
        sset(w, 127, c.exec_mask >> 32)
        w.set_exec_from_sgprs()

    return run_asm(c.asm, setup=setup).waves[0]


NEG1 = 0xFFFFFFFF
INT_MIN = 0x80000000

CASES = [
    # ---------------- VALU integer
    Case("v_add_u32_e32 v2, v10, v11", v={10: NEG1, 11: 2}, ev={2: 1}),
    Case("v_add_u32_e32 v2, 0x304, v10", v={10: 0xFFFFFCFC}, ev={2: 0}),
    Case("v_sub_u32_e32 v2, v10, v11", v={10: 1, 11: 2}, ev={2: NEG1}),
    Case("v_subrev_u32_e32 v2, s2, v10", v={10: 5}, s={2: 7}, ev={2: 0xFFFFFFFE}),
    Case("v_and_b32_e32 v2, v10, v11", v={10: 0xF0F0, 11: 0xFF00}, ev={2: 0xF000}),
    Case("v_or_b32_e32 v2, s4, v10", v={10: 0x0F}, s={4: 0xF0}, ev={2: 0xFF}),
    Case("v_xor_b32_e32 v2, 0x80, v10", v={10: 0xFF}, ev={2: 0x7F}),
    Case("v_lshlrev_b32_e32 v2, 4, v10", v={10: 0x0F000001}, ev={2: 0xF0000010}),
    Case("v_lshrrev_b32_e32 v2, 4, v10", v={10: 0x80000010}, ev={2: 0x08000001}),
    Case("v_ashrrev_i32_e32 v2, 31, v10", v={10: INT_MIN}, ev={2: NEG1}),
    Case("v_ashrrev_i32_e32 v2, 4, v10", v={10: 0x7FFFFFF0}, ev={2: 0x07FFFFFF}),
    Case("v_max_i32_e32 v2, v10, v11", v={10: NEG1, 11: 1}, ev={2: 1}),
    Case("v_max_u32_e32 v2, v10, v11", v={10: NEG1, 11: 1}, ev={2: NEG1}),
    Case("v_max_u32_e32 v2, 12, v10", v={10: 7}, ev={2: 12}),
    Case("v_mul_lo_u32 v2, v10, s4", v={10: 0x10001}, s={4: 0x10001}, ev={2: 0x00020001}),
    Case("v_add3_u32 v2, v10, v11, v12", v={10: 1, 11: 2, 12: NEG1}, ev={2: 2}),
    Case("v_add_lshl_u32 v2, s4, v10, 2", v={10: 5}, s={4: 3}, ev={2: 32}),
    Case("v_lshl_add_u32 v2, v10, 14, s4", v={10: 1}, s={4: 5}, ev={2: 16389}),
    Case("v_lshl_or_b32 v2, v10, 10, v11", v={10: 3, 11: 1}, ev={2: 3073}),
    Case("v_and_or_b32 v2, v10, 3, v11", v={10: 0xF, 11: 0x10}, ev={2: 0x13}),
    Case("v_or3_b32 v2, v10, v11, v12", v={10: 1, 11: 2, 12: 4}, ev={2: 7}),
    Case("v_bfe_u32 v2, v10, 4, 2", v={10: 0xE3}, ev={2: 2}),
    Case("v_max3_i32 v2, v10, v11, v12", v={10: 0xFFFFFFFB, 11: 3, 12: NEG1}, ev={2: 3}),
    Case("v_max3_u32 v2, v10, v11, v12", v={10: 5, 11: 0xFFFFFFFE, 12: 7}, ev={2: 0xFFFFFFFE}),
    Case("v_med3_i32 v2, v10, 1, v11", v={10: 0xFFFFFFFD, 11: 0x43000000}, ev={2: 1}),
    Case("v_med3_i32 v2, v10, 1, v11", v={10: 50, 11: 0x43000000}, ev={2: 50}),
    Case("v_mad_u32_u24 v2, v10, s4, v11", v={10: 0x1000001, 11: 4}, s={4: 3}, ev={2: 7}),
    Case("v_xad_u32 v2, v10, v11, s4", v={10: 0xF0, 11: 0xFF}, s={4: 1}, ev={2: 0x10}),
    # bitop3: LLVM's convention S0 = 0xF0, S1 = 0xCC, S2 = 0xAA reproduces the truth table itself
    Case("v_bitop3_b32 v2, v10, v11, v12 bitop3:0x6c", v={10: 0xF0, 11: 0xCC, 12: 0xAA}, ev={2: 0x6C}),
    Case("v_bitop3_b32 v2, v10, v11, v12 bitop3:0x6c", v={10: 0x3C, 11: 0x5A, 12: 0x96}, ev={2: 0x4E}),
    Case("v_mov_b32_e32 v2, 0x12a00", ev={2: 0x12A00}),
    Case("v_mov_b32_e32 v2, -1", ev={2: NEG1}),
    Case("v_mov_b32_e32 v2, s5", s={5: 0xABCD}, ev={2: 0xABCD}),
    Case("v_mov_b64_e32 v[2:3], 0xffffffff", ev={2: NEG1, 3: 0}),  # 32-bit literal zero-extends
    Case("v_mov_b64_e32 v[2:3], -1", ev={2: NEG1, 3: NEG1}),  # inline integer sign-extends
    Case("v_mov_b64_e32 v[2:3], s[4:5]", s={4: 7, 5: 9}, ev={2: 7, 3: 9}),
    Case("v_cndmask_b32_e32 v2, 0, v10, vcc", v={10: 77}, s={106: 0x1, 107: 0}, ev={2: 77}),
    Case("v_cndmask_b32_e32 v2, 0, v10, vcc", v={10: 77}, s={106: 0x2, 107: 0}, ev={2: 0}),
    Case("v_cndmask_b32_e64 v2, v10, v11, s[4:5]", v={10: 1, 11: 2}, s={4: 0, 5: 0}, ev={2: 1}),
    Case("v_readfirstlane_b32 s4, v0", exec_mask=0b1100, es={4: 2}),
    Case("v_addc_co_u32_e32 v2, vcc, 0, v10, vcc", v={10: NEG1}, s={106: 1, 107: 0}, exec_mask=1, ev={2: 0}, es={106: 1, 107: 0}),
    Case("v_addc_co_u32_e64 v2, s[6:7], v10, v11, s[4:5]", v={10: 5, 11: 6}, s={4: 0, 5: 0}, exec_mask=1, ev={2: 11}, es={6: 0, 7: 0}),
    Case(
        "v_mad_u64_u32 v[2:3], s[4:5], s6, v10, v[12:13]",
        v={10: NEG1, 12: 1, 13: 0},
        s={6: NEG1},
        exec_mask=1,
        ev={2: 2, 3: 0xFFFFFFFE},
        es={4: 0, 5: 0},
    ),
    Case(
        "v_mad_u64_u32 v[2:3], s[4:5], s6, v10, v[12:13]",
        v={10: NEG1, 12: NEG1, 13: NEG1},
        s={6: NEG1},
        exec_mask=1,
        ev={2: 0, 3: 0xFFFFFFFE},
        es={4: 1, 5: 0},
    ),
    Case("v_lshl_add_u64 v[2:3], v[10:11], 1, v[12:13]", v={10: 1, 11: 0x80000000, 12: 0x10, 13: 0}, ev={2: 0x12, 3: 0}),
    Case("v_lshl_add_u64 v[2:3], v[10:11], 0, s[4:5]", v={10: NEG1, 11: 0}, s={4: 1, 5: 0}, ev={2: 0, 3: 1}),
    Case("v_lshlrev_b64 v[2:3], 7, v[10:11]", v={10: 0x02000000, 11: 0}, ev={2: 0, 3: 1}),
    # ---------------- VOPC (inactive lanes write 0)
    Case("v_cmp_lt_i32_e32 vcc, -1, v10", v={10: 0}, exec_mask=0b11, es={106: 0b11, 107: 0}),
    Case("v_cmp_lt_i32_e32 vcc, -1, v10", v={10: NEG1}, es={106: 0, 107: 0}),
    Case("v_cmp_lt_i32_e64 s[4:5], -1, v10", v={10: INT_MIN}, es={4: 0, 5: 0}),
    Case("v_cmp_gt_i32_e32 vcc, s5, v10", v={10: NEG1}, s={5: 0}, es={106: NEG1, 107: NEG1}),
    Case("v_cmp_gt_i32_e64 s[4:5], s6, v10", v={10: 3}, s={6: 3}, es={4: 0, 5: 0}),
    Case("v_cmp_gt_u32_e32 vcc, 32, v10", v={10: NEG1}, es={106: 0, 107: 0}),
    Case("v_cmp_gt_u32_e64 s[4:5], 32, v10", v={10: 31}, exec_mask=0xF0, es={4: 0xF0, 5: 0}),
    Case("v_cmp_lt_f32_e32 vcc, 0, v10", v={10: f32b(-0.0)}, es={106: 0, 107: 0}),
    Case("v_cmp_lt_f32_e64 s[4:5], 0, v10", v={10: 1}, es={4: NEG1, 5: NEG1}),  # inline 0 = +0.0; v10 = 2^-149
    Case("v_cmp_eq_u32_e32 vcc, 0, v10", v={10: 0}, exec_mask=1 << 40, es={106: 0, 107: 1 << 8}),
    Case("v_cmp_eq_u32_e64 s[4:5], 0, v10", v={10: 1}, es={4: 0, 5: 0}),
    Case("v_cmp_ne_u32_e32 vcc, 0, v10", v={10: 1}, exec_mask=0b101, es={106: 0b101, 107: 0}),
    Case("v_cmp_ne_u32_e64 s[4:5], 0, v10", v={10: 0}, es={4: 0, 5: 0}),
    Case("v_cmp_lt_u64_e32 vcc, s[4:5], v[10:11]", v={10: 0, 11: 1}, s={4: NEG1, 5: 0}, exec_mask=1, es={106: 1, 107: 0}),
    Case("v_cmp_lt_u64_e64 s[6:7], s[4:5], v[10:11]", v={10: NEG1, 11: 0}, s={4: NEG1, 5: 0}, exec_mask=1, es={6: 0, 7: 0}),
    # ---------------- VALU f32
    Case("v_add_f32_e32 v2, v10, v11", v={10: f32b(1.5), 11: f32b(2.25)}, ev={2: 0x40700000}),
    Case("v_add_f32_e32 v2, 0xc1000000, v10", v={10: f32b(10.0)}, ev={2: 0x40000000}),
    Case("v_sub_f32_e32 v2, v10, v11", v={10: f32b(1.0), 11: f32b(0.25)}, ev={2: 0x3F400000}),
    Case("v_mul_f32_e32 v2, 0x3f317218, v10", v={10: f32b(2.0)}, ev={2: 0x3FB17218}),
    Case("v_mul_f32_e64 v2, -v10, |v11|", v={10: f32b(2.0), 11: f32b(-3.0)}, ev={2: 0xC0C00000}),
    Case("v_max_f32_e32 v2, 0xe0ad78ec, v10", v={10: 0x7FC00000}, ev={2: 0xE0AD78EC}),  # IEEE mode: NaN loses
    Case("v_max_f32_e32 v2, v10, v11", v={10: 0x80000000, 11: 0}, ev={2: 0}),  # -0 < +0
    Case("v_max3_f32 v2, v10, s4, v11", v={10: f32b(1.0), 11: f32b(3.0)}, s={4: f32b(-2.0)}, ev={2: f32b(3.0)}),
    Case("v_fma_f32 v2, -v10, v11, 1.0", v={10: f32b(3.0), 11: f32b(0.5)}, ev={2: 0xBF000000}),
    # fused: (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly (an unfused product would round to 1 + 2^-11)
    Case("v_fma_f32 v2, v10, v10, v11", v={10: 0x3F800800, 11: f32b(-1.0)}, ev={2: 0x3A000400}),
    Case("v_fmac_f32_e32 v2, v10, v11", v={2: f32b(1.0), 10: f32b(2.0), 11: f32b(3.0)}, ev={2: 0x40E00000}),
    Case("v_exp_f32_e32 v2, v10", v={10: f32b(3.0)}, ev={2: 0x41000000}),
    Case("v_exp_f32_e32 v2, v10", v={10: f32b(-1.5)}, ev={2: 0x3EB504F3}),  # 2^-1.5 = 0.35355339...
    Case("v_exp_f32_e32 v2, v10", v={10: f32b(-149.0)}, ev={2: 0x00000001}),  # denormal kept
    Case("v_exp_f32_e32 v2, v10", v={10: 0xFF800000}, ev={2: 0}),
    Case("v_log_f32_e32 v2, v10", v={10: f32b(8.0)}, ev={2: 0x40400000}),
    Case("v_log_f32_e32 v2, v10", v={10: 0}, ev={2: 0xFF800000}),
    Case("v_rcp_f32_e32 v2, v10", v={10: f32b(3.0)}, ev={2: 0x3EAAAAAB}),
    Case("v_div_scale_f32 v2, s[4:5], v10, v10, 1.0", v={10: f32b(3.0)}, ev={2: f32b(3.0)}, es={4: 0, 5: 0}),
    Case("v_div_scale_f32 v2, vcc, 1.0, v10, 1.0", v={10: f32b(3.0)}, ev={2: f32b(1.0)}, es={106: 0, 107: 0}),
    Case("v_div_scale_f32 v2, s[4:5], v10, v10, 1.0", v={10: 0}, ev={2: 0x7FC00000}, es={4: 0, 5: 0}),  # zero denominator -> NaN
    Case(
        "v_div_scale_f32 v2, vcc, v10, v11, v10", v={10: f32b(2.0**-120), 11: f32b(2.0**-10)}, ev={2: f32b(2.0**-56)}, es={106: 0, 107: 0}
    ),  # tiny numerator: x 2^64
    Case(
        "v_div_scale_f32 v2, vcc, v10, v11, v10", v={10: f32b(2.0**-130), 11: f32b(3.0)}, ev={2: f32b(2.0**-66)}, es={106: NEG1, 107: NEG1}
    ),  # denormal quotient: VCC
    Case("v_div_fmas_f32 v2, v10, v11, v12", v={10: f32b(2.0), 11: f32b(3.0), 12: f32b(1.0)}, s={106: 0, 107: 0}, ev={2: f32b(7.0)}),
    Case("v_div_fixup_f32 v2, v10, v11, 1.0", v={10: 0x3EAAAAAB, 11: f32b(-3.0)}, ev={2: 0xBEAAAAAB}),
    Case("v_div_fixup_f32 v2, v10, v11, 1.0", v={10: 0x7FC00000, 11: 0}, ev={2: 0x7F800000}),  # 1 / +0 = +inf even for a NaN quotient
    Case("v_div_fixup_f32 v2, v10, v11, v12", v={10: f32b(1.0), 11: 0x80000000, 12: 0}, ev={2: 0x7FC00000}),  # 0 / -0 = NaN
    # ---------------- conversions
    Case("v_cvt_pk_bf16_f32 v2, v10, v11", v={10: f32b(1.0), 11: 0x3F818000}, ev={2: 0x3F823F80}),  # tie -> even
    Case("v_cvt_pk_bf16_f32 v2, v10, v11", v={10: 0x3F808000, 11: 0x7F800001}, ev={2: 0x7FC03F80}),  # tie -> even; sNaN -> qNaN
    Case("v_cvt_pk_f16_f32 v2, v10, v11", v={10: f32b(1.0), 11: f32b(65520.0)}, ev={2: 0x7C003C00}),  # 65520 ties to inf
    Case("v_cvt_pk_fp8_f32 v2, v10, v11", v={2: 0x12345678, 10: f32b(1.0), 11: f32b(-0.5)}, ev={2: 0x1234B038}),
    Case("v_cvt_pk_fp8_f32 v2, v10, v11 op_sel:[0,0,1]", v={2: 0x12345678, 10: f32b(448.0), 11: f32b(464.0)}, ev={2: 0x7E7E5678}),
    Case("v_cvt_pk_fp8_f32 v2, v10, v11", v={2: 0, 10: f32b(465.0), 11: f32b(-1e30)}, ev={2: 0xFF7F}),  # no saturation: NaN
    Case("v_cvt_pk_fp8_f32 v2, v10, v11", v={2: 0, 10: f32b(2.0**-10), 11: f32b(3 * 2.0**-10)}, ev={2: 0x0200}),  # subnormal ties
    Case("v_cvt_pk_f32_fp8_e32 v[2:3], v10", v={10: 0xFFFFB038}, ev={2: f32b(1.0), 3: f32b(-0.5)}),
    Case("v_cvt_pk_f32_fp8_sdwa v[2:3], v10 src0_sel:WORD_1", v={10: 0x7E010000}, ev={2: f32b(2.0**-9), 3: f32b(448.0)}),
    Case("v_cvt_scalef32_pk_f16_fp8 v2, v10, 1.0", v={10: 0x0000B038}, ev={2: 0xB8003C00}),
    Case("v_cvt_scalef32_pk_f16_fp8 v2, v10, 1.0 op_sel:[1,0,0]", v={10: 0x7E010000}, ev={2: 0x5F001800}),
    Case("v_cvt_scalef32_pk_f16_fp8 v2, v10, 2.0", v={10: 0x00000038}, ev={2: 0x00004000}),
    # ---------------- packed f32
    Case(
        "v_pk_mul_f32 v[2:3], v[10:11], v[12:13]",
        v={10: f32b(2.0), 11: f32b(3.0), 12: f32b(5.0), 13: f32b(7.0)},
        ev={2: f32b(10.0), 3: f32b(21.0)},
    ),
    Case(
        "v_pk_mul_f32 v[2:3], v[10:11], v[12:13] op_sel_hi:[1,0]",
        v={10: f32b(2.0), 11: f32b(3.0), 12: f32b(5.0), 13: f32b(7.0)},
        ev={2: f32b(10.0), 3: f32b(15.0)},
    ),
    Case(
        "v_pk_mul_f32 v[2:3], s[4:5], v[10:11]",
        v={10: f32b(2.0), 11: f32b(3.0)},
        s={4: f32b(0.5), 5: f32b(4.0)},
        ev={2: f32b(1.0), 3: f32b(12.0)},
    ),
    Case(
        "v_pk_add_f32 v[2:3], v[10:11], v[12:13] neg_lo:[0,1] neg_hi:[0,1]",
        v={10: f32b(2.0), 11: f32b(3.0), 12: f32b(5.0), 13: f32b(7.0)},
        ev={2: f32b(-3.0), 3: f32b(-4.0)},
    ),
    Case(
        "v_pk_add_f32 v[2:3], v[10:11], v[12:13] op_sel_hi:[1,0] neg_lo:[0,1] neg_hi:[0,1]",
        v={10: f32b(2.0), 11: f32b(3.0), 12: f32b(5.0), 13: f32b(7.0)},
        ev={2: f32b(-3.0), 3: f32b(-2.0)},
    ),
    # ---------------- SALU (SCC per the ISA's definition of each opcode)
    Case("s_add_i32 s2, s3, s4", s={3: 0x7FFFFFFF, 4: 1}, es={2: INT_MIN}, escc=1),
    Case("s_add_i32 s2, s3, -1", s={3: 5}, es={2: 4}, escc=0),
    Case("s_add_u32 s2, s3, s4", s={3: NEG1, 4: 1}, es={2: 0}, escc=1),
    Case("s_addc_u32 s2, s3, s4", s={3: 1, 4: 2}, scc=1, es={2: 4}, escc=0),
    Case("s_sub_u32 s2, s3, s4", s={3: 1, 4: 2}, es={2: NEG1}, escc=1),
    Case("s_subb_u32 s2, s3, s4", s={3: 5, 4: 2}, scc=1, es={2: 2}, escc=0),
    Case("s_sub_i32 s2, 0, s3", s={3: 5}, es={2: 0xFFFFFFFB}, escc=0),
    Case("s_and_b32 s2, s3, 0xffff", s={3: 0x12345678}, es={2: 0x5678}, escc=1),
    Case("s_and_b64 s[2:3], vcc, exec", s={106: 3, 107: 1}, es={2: 3, 3: 1}, escc=1),
    Case("s_and_b64 s[2:3], s[4:5], exec", s={4: 3, 5: 1}, exec_mask=0, es={2: 0, 3: 0}, escc=0),
    Case("s_or_b64 s[2:3], s[4:5], s[6:7]", s={4: 1, 5: 0, 6: 0, 7: 2}, es={2: 1, 3: 2}, escc=1),
    Case("s_and_saveexec_b64 s[2:3], s[4:5]", s={4: 0xF, 5: 0}, es={2: NEG1, 3: NEG1, 126: 0xF, 127: 0}, escc=1),
    Case("s_cmp_eq_u32 s2, s3", s={2: 3, 3: 3}, escc=1),
    Case("s_cmp_lg_u32 s2, 0", s={2: 0}, escc=0),
    Case("s_cmp_ge_i32 s2, s3", s={2: NEG1, 3: 0}, escc=0),
    Case("s_cmp_ge_u32 s2, s3", s={2: NEG1, 3: 0}, escc=1),
    Case("s_cmp_lt_i32 s2, 1", s={2: NEG1}, escc=1),
    Case("s_cselect_b32 s2, s3, -1", s={3: 9}, scc=0, es={2: NEG1}),
    Case("s_cselect_b32 s2, s3, -1", s={3: 9}, scc=1, es={2: 9}),
    Case("s_lshl_b32 s2, s3, 6", s={3: 3}, es={2: 192}, escc=1),
    Case("s_lshl_b64 s[2:3], s[4:5], 2", s={4: 1, 5: 0x40000000}, es={2: 4, 3: 0}, escc=1),
    Case("s_lshr_b32 s2, s3, 6", s={3: 0x3F}, es={2: 0}, escc=0),
    Case("s_lshr_b64 s[2:3], s[4:5], 2", s={4: 0, 5: 1}, es={2: 0x40000000, 3: 0}, escc=1),
    Case("s_max_i32 s2, s3, 0", s={3: 0xFFFFFFFB}, es={2: 0}, escc=0),
    Case("s_min_i32 s2, s3, s4", s={3: 0xFFFFFFFB, 4: 3}, es={2: 0xFFFFFFFB}, escc=1),
    Case("s_or_b32 m0, s3, 0xc00", s={3: 0x10}, es={124: 0xC10}, escc=1),
    Case("s_cselect_b64 s[2:3], s[4:5], 0", s={4: 1, 5: 2}, scc=1, es={2: 1, 3: 2}),
    Case("s_cselect_b64 s[2:3], s[4:5], 0", s={4: 1, 5: 2}, scc=0, es={2: 0, 3: 0}),
    Case("s_cmp_lt_u32 s2, s3", s={2: 1, 3: NEG1}, escc=1),
    Case("s_cmp_gt_i32 s2, s3", s={2: 1, 3: NEG1}, escc=1),
    Case("s_cmp_gt_u32 s2, s3", s={2: 1, 3: NEG1}, escc=0),
    Case("s_cmp_le_i32 s2, s3", s={2: NEG1, 3: NEG1}, escc=1),
    Case("s_cmp_le_u32 s2, 0", s={2: 1}, escc=0),
    Case("s_cmp_eq_i32 s2, -1", s={2: NEG1}, escc=1),
    Case("s_cmp_lg_i32 s2, s3", s={2: 4, 3: 4}, escc=0),
    Case("s_mov_b32 m0, s3", s={3: 0x4000}, es={124: 0x4000}),
    Case("s_mov_b64 s[2:3], 0x50", es={2: 0x50, 3: 0}),
    Case("s_mov_b64 s[2:3], -1", es={2: NEG1, 3: NEG1}),
    Case("s_movk_i32 s2, 0x8000", es={2: 0xFFFF8000}),
    Case("s_movk_i32 s2, 0x290", es={2: 0x290}),
    Case("s_mul_hi_u32 s2, s3, s4", s={3: NEG1, 4: NEG1}, es={2: 0xFFFFFFFE}),
    Case("s_mul_i32 s2, s3, s4", s={3: 0x10001, 4: 0x10001}, es={2: 0x00020001}),
    Case("s_not_b32 s2, s3", s={3: 0}, es={2: NEG1}, escc=1),
    Case("s_lshl2_add_u32 s2, s3, 0x200", s={3: 5}, es={2: 0x214}, escc=0),
    Case("s_addk_i32 s2, 0x3c00", s={2: 1}, es={2: 0x3C01}, escc=0),
    Case("s_addk_i32 s2, 0x8000", s={2: INT_MIN}, es={2: 0x7FFF8000}, escc=1),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}:{c.asm}" for i, c in enumerate(CASES)])
def test_alu_opcode(case: Case) -> None:
    w = _run(case)
    for i, val in case.ev.items():
        assert int(w.v[i][case.lane]) == val, f"v{i} = {int(w.v[i][case.lane]):#x}, expected {val:#x}"
    for i, val in case.es.items():
        assert w.s[i] == val, f"s{i} = {w.s[i]:#x}, expected {val:#x}"
    if case.escc is not None:
        assert w.scc == case.escc


def test_exec_masks_vector_writes() -> None:
    c = Case("v_mov_b32_e32 v2, 5", v={2: 9}, exec_mask=0b10)
    w = _run(c)
    assert int(w.v[2][0]) == 9 and int(w.v[2][1]) == 5 and int(w.v[2][2]) == 9


def test_permlane_swaps() -> None:
    def setup(w):
        vset(w, 2, np.arange(64))
        vset(w, 3, 100 + np.arange(64))

    w = run_asm("v_permlane16_swap_b32_e32 v2, v3", setup=setup).waves[0]
    assert w.v[2][16:32].tolist() == list(range(100, 116)) and w.v[2][:16].tolist() == list(range(16))
    assert w.v[3][:16].tolist() == list(range(16, 32)) and w.v[3][16:32].tolist() == list(range(116, 132))
    assert w.v[2][48:64].tolist() == list(range(132, 148)) and w.v[3][32:48].tolist() == list(range(48, 64))
    w = run_asm("v_permlane32_swap_b32_e32 v2, v3", setup=setup).waves[0]
    assert w.v[2][32:].tolist() == list(range(100, 132)) and w.v[3][:32].tolist() == list(range(32, 64))
    assert w.v[2][:32].tolist() == list(range(32)) and w.v[3][32:].tolist() == list(range(132, 164))


def test_branches() -> None:
    body = """
    s_cmp_lg_u32 s2, 0
    s_cbranch_scc1 .LBB0_1
    s_mov_b32 s3, 1
    .LBB0_1:
    s_cmp_lg_u32 s2, 0
    s_cbranch_scc0 .LBB0_2
    s_mov_b32 s4, 2
    .LBB0_2:
    v_cmp_gt_u32_e32 vcc, 8, v0
    s_and_saveexec_b64 s[6:7], vcc
    s_cbranch_execz .LBB0_3
    s_mov_b32 s5, 3
    .LBB0_3:
    s_mov_b64 exec, 0
    s_cbranch_execnz .LBB0_4
    s_mov_b32 s8, 4
    s_branch .LBB0_4
    s_mov_b32 s8, 5
    .LBB0_4:
    s_mov_b64 vcc, 0
    s_cbranch_vccz .LBB0_5
    s_mov_b32 s9, 6
    .LBB0_5:
    s_cbranch_vccnz .LBB0_6
    s_mov_b32 s10, 7
    .LBB0_6:
    s_nop 1
    """
    # workgroup id 0 -> s2 = 0: scc1 not taken (s3 set), scc0 taken (s4 not set)
    w = run_asm(body, setup=lambda w: [sset(w, i, 0) for i in (3, 4, 5, 8, 9, 10)]).waves[0]
    assert (w.s[3], w.s[4], w.s[5], w.s[8], w.s[9], w.s[10]) == (1, 0, 3, 4, 0, 7)
    assert w.s[6] == 0xFFFFFFFF and w.s[7] == 0xFFFFFFFF


def test_endpgm_stops_the_wave() -> None:
    w = run_asm("s_mov_b32 s3, 1\ns_endpgm\ns_mov_b32 s3, 2").waves[0]
    assert w.s[3] == 1 and w.done
