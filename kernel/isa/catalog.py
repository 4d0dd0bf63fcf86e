"""Catalogue of the opcodes the interpreter implements: a one-line semantics summary and its
source, per opcode as the assembler spells it. docs/reference/isa-opcodes.md's table is rendered from it
(`python -m kernel.isa.catalog` prints it) and a test keeps the two identical.

Source keys (full references in docs/reference/isa-opcodes.md):
  ISA3   AMD Instinct MI300 (CDNA3) ISA reference guide, opcode descriptions (ch. 12) and
         memory chapters (9 buffer, 10 flat/global, 11 LDS); CDNA4 keeps these opcodes
  LLVM   LLVM AMDGPU: SIInstructions.td / VOP*Instructions.td / SOPInstructions.td and
         llvm/test/MC/AMDGPU/gfx950_*.s (gfx950 forms, operand syntax)
  IREE   IREE compiler/.../IREEGPUAttrs.cpp getSingleSubgroupLayout (MFMA lane layouts)
  MOJO   Modular MAX/Mojo docs: std.gpu.intrinsics.ds_read_tr8_b64; CDNA4 block-scaled MFMA
  TRITON Triton lib/Dialect/TritonGPU/IR/LinearLayoutConversions.cpp (scaled MFMA layouts)
  ISA4   AMD Instinct CDNA4 ISA reference guide (MI355X), e.g. 9.1.9 Memory Buffer Load to LDS
  OCP    OCP 8-bit floating point v1.0 / Microscaling v1.0 (E4M3, E8M0)
"""

from __future__ import annotations

OPCODES: dict[str, tuple[str, str]] = {
    # ---------------- SMEM / SOPP / SALU
    "s_load_dword": ("SDST = MEM32[SBASE + offset]", "ISA3 SMEM"),
    "s_load_dwordx2": ("SDST[0:1] = MEM[SBASE + offset], 2 dwords", "ISA3 SMEM"),
    "s_load_dwordx4": ("SDST[0:3] = MEM[SBASE + offset], 4 dwords", "ISA3 SMEM"),
    "s_load_dwordx8": ("SDST[0:7] = MEM[SBASE + offset], 8 dwords", "ISA3 SMEM"),
    "s_waitcnt": (
        "wait until at most vmcnt VMEM ops (in order) / lgkmcnt LDS+SMEM ops are outstanding",
        "ISA3 SOPP; LLVM AMDGPUBaseInfo (gfx9 fields)",
    ),
    "s_barrier": ("wait until every live wave of the workgroup reaches the barrier", "ISA3 SOPP"),
    "s_nop": ("no operation (hazard padding)", "ISA3 SOPP"),
    "s_endpgm": ("end of the wave", "ISA3 SOPP"),
    "s_branch": ("PC = label", "ISA3 SOPP"),
    "s_cbranch_scc0": ("branch if SCC == 0", "ISA3 SOPP"),
    "s_cbranch_scc1": ("branch if SCC == 1", "ISA3 SOPP"),
    "s_cbranch_execz": ("branch if EXEC == 0", "ISA3 SOPP"),
    "s_cbranch_execnz": ("branch if EXEC != 0", "ISA3 SOPP"),
    "s_cbranch_vccz": ("branch if VCC == 0", "ISA3 SOPP"),
    "s_cbranch_vccnz": ("branch if VCC != 0", "ISA3 SOPP"),
    "s_mov_b32": ("D = S0", "ISA3 SOP1"),
    "s_mov_b64": ("D64 = S0 (32-bit literal zero-extended, inline int sign-extended)", "ISA3 SOP1; LLVM operand rules"),
    "s_movk_i32": ("D = sext(SIMM16)", "ISA3 SOPK"),
    "s_addk_i32": ("D = D + sext(SIMM16); SCC = signed overflow", "ISA3 SOPK"),
    "s_not_b32": ("D = ~S0; SCC = D != 0", "ISA3 SOP1"),
    "s_and_saveexec_b64": ("D = EXEC; EXEC = S0 & EXEC; SCC = EXEC != 0", "ISA3 SOP1"),
    "s_add_i32": ("D = S0 + S1; SCC = signed overflow", "ISA3 SOP2"),
    "s_add_u32": ("D = S0 + S1; SCC = carry out", "ISA3 SOP2"),
    "s_addc_u32": ("D = S0 + S1 + SCC; SCC = carry out", "ISA3 SOP2"),
    "s_sub_i32": ("D = S0 - S1; SCC = signed overflow", "ISA3 SOP2"),
    "s_sub_u32": ("D = S0 - S1; SCC = borrow", "ISA3 SOP2"),
    "s_subb_u32": ("D = S0 - S1 - SCC; SCC = borrow", "ISA3 SOP2"),
    "s_and_b32": ("D = S0 & S1; SCC = D != 0", "ISA3 SOP2"),
    "s_and_b64": ("D64 = S0 & S1; SCC = D != 0", "ISA3 SOP2"),
    "s_or_b32": ("D = S0 | S1; SCC = D != 0", "ISA3 SOP2"),
    "s_or_b64": ("D64 = S0 | S1; SCC = D != 0", "ISA3 SOP2"),
    "s_lshl_b32": ("D = S0 << S1[4:0]; SCC = D != 0", "ISA3 SOP2"),
    "s_lshl_b64": ("D64 = S0 << S1[5:0]; SCC = D != 0", "ISA3 SOP2"),
    "s_lshr_b32": ("D = S0 >> S1[4:0] (logical); SCC = D != 0", "ISA3 SOP2"),
    "s_lshr_b64": ("D64 = S0 >> S1[5:0] (logical); SCC = D != 0", "ISA3 SOP2"),
    "s_lshl2_add_u32": ("D = (S0 << 2) + S1; SCC = carry out", "LLVM SOPInstructions.td (gfx9 S_LSHL2_ADD_U32)"),
    "s_mul_i32": ("D = low 32 bits of S0 * S1", "ISA3 SOP2"),
    "s_mul_hi_u32": ("D = high 32 bits of S0 * S1 (unsigned)", "ISA3 SOP2"),
    "s_max_i32": ("D = max(S0, S1) signed; SCC = S0 > S1", "ISA3 SOP2"),
    "s_min_i32": ("D = min(S0, S1) signed; SCC = S0 < S1", "ISA3 SOP2"),
    "s_cselect_b32": ("D = SCC ? S0 : S1", "ISA3 SOP2"),
    "s_cselect_b64": ("D64 = SCC ? S0 : S1", "ISA3 SOP2"),
    "s_cmp_eq_u32": ("SCC = S0 == S1", "ISA3 SOPC"),
    "s_cmp_lg_u32": ("SCC = S0 != S1", "ISA3 SOPC"),
    "s_cmp_ge_i32": ("SCC = S0 >= S1 signed", "ISA3 SOPC"),
    "s_cmp_ge_u32": ("SCC = S0 >= S1 unsigned", "ISA3 SOPC"),
    "s_cmp_lt_i32": ("SCC = S0 < S1 signed", "ISA3 SOPC"),
    "s_cmp_lt_u32": ("SCC = S0 < S1 unsigned", "ISA3 SOPC"),
    "s_cmp_gt_i32": ("SCC = S0 > S1 signed", "ISA3 SOPC"),
    "s_cmp_gt_u32": ("SCC = S0 > S1 unsigned", "ISA3 SOPC"),
    "s_cmp_le_i32": ("SCC = S0 <= S1 signed", "ISA3 SOPC"),
    "s_cmp_le_u32": ("SCC = S0 <= S1 unsigned", "ISA3 SOPC"),
    "s_cmp_eq_i32": ("SCC = S0 == S1", "ISA3 SOPC"),
    "s_cmp_lg_i32": ("SCC = S0 != S1", "ISA3 SOPC"),
    # ---------------- VALU integer
    "v_mov_b32_e32": ("D = S0", "ISA3 VOP1"),
    "v_mov_b64_e32": ("D64 = S0 (gfx940+)", "ISA3 VOP1; LLVM VOP1Instructions.td"),
    "v_readfirstlane_b32": ("SDST = S0 of the first active lane (lane 0 if EXEC = 0)", "ISA3 VOP1"),
    "v_add_u32_e32": ("D = S0 + S1 (mod 2^32)", "ISA3 VOP2"),
    "v_sub_u32_e32": ("D = S0 - S1", "ISA3 VOP2"),
    "v_subrev_u32_e32": ("D = S1 - S0", "ISA3 VOP2"),
    "v_addc_co_u32_e32": ("D = S0 + S1 + VCC[lane]; VCC[lane] = carry out", "ISA3 VOP2"),
    "v_addc_co_u32_e64": ("D = S0 + S1 + S2[lane]; SDST[lane] = carry out", "ISA3 VOP3b"),
    "v_and_b32_e32": ("D = S0 & S1", "ISA3 VOP2"),
    "v_or_b32_e32": ("D = S0 | S1", "ISA3 VOP2"),
    "v_xor_b32_e32": ("D = S0 ^ S1", "ISA3 VOP2"),
    "v_lshlrev_b32_e32": ("D = S1 << S0[4:0]", "ISA3 VOP2"),
    "v_lshrrev_b32_e32": ("D = S1 >> S0[4:0] (logical)", "ISA3 VOP2"),
    "v_ashrrev_i32_e32": ("D = S1 >> S0[4:0] (arithmetic)", "ISA3 VOP2"),
    "v_max_i32_e32": ("D = max(S0, S1) signed", "ISA3 VOP2"),
    "v_max_u32_e32": ("D = max(S0, S1) unsigned", "ISA3 VOP2"),
    "v_cndmask_b32_e32": ("D = VCC[lane] ? S1 : S0", "ISA3 VOP2"),
    "v_cndmask_b32_e64": ("D = S2[lane] ? S1 : S0", "ISA3 VOP3"),
    "v_mul_lo_u32": ("D = low 32 bits of S0 * S1", "ISA3 VOP3"),
    "v_mad_u32_u24": ("D = S0[23:0] * S1[23:0] + S2", "ISA3 VOP3"),
    "v_mad_u64_u32": ("{D1, D0} = S0 * S1 + S2_64 (u32 x u32 + u64); SDST[lane] = carry", "ISA3 VOP3b"),
    "v_lshl_add_u64": ("D64 = (S0_64 << S1[2:0]) + S2_64 (shift 0..4)", "LLVM VOP3Instructions.td (gfx940 V_LSHL_ADD_U64)"),
    "v_lshlrev_b64": ("D64 = S1_64 << S0[5:0]", "ISA3 VOP3"),
    "v_add3_u32": ("D = S0 + S1 + S2", "ISA3 VOP3"),
    "v_add_lshl_u32": ("D = (S0 + S1) << S2[4:0]", "ISA3 VOP3"),
    "v_lshl_add_u32": ("D = (S0 << S1[4:0]) + S2", "ISA3 VOP3"),
    "v_lshl_or_b32": ("D = (S0 << S1[4:0]) | S2", "ISA3 VOP3"),
    "v_and_or_b32": ("D = (S0 & S1) | S2", "ISA3 VOP3"),
    "v_or3_b32": ("D = S0 | S1 | S2", "ISA3 VOP3"),
    "v_xad_u32": ("D = (S0 ^ S1) + S2", "ISA3 VOP3"),
    "v_bitop3_b32": (
        "bit i of D = TTBL[(S0[i] << 2) | (S1[i] << 1) | S2[i]], TTBL = bitop3:imm8",
        "LLVM VOP3Instructions.td / SIISelLowering getBitOp3 (gfx950)",
    ),
    "v_bfe_u32": ("D = (S0 >> S1[4:0]) & ((1 << S2[4:0]) - 1)", "ISA3 VOP3"),
    "v_max3_i32": ("D = max(S0, S1, S2) signed", "ISA3 VOP3"),
    "v_max3_u32": ("D = max(S0, S1, S2) unsigned", "ISA3 VOP3"),
    "v_med3_i32": ("D = median(S0, S1, S2) signed", "ISA3 VOP3"),
    # ---------------- VOPC
    "v_cmp_eq_u32_e32": ("VCC[lane] = S0 == S1 (0 on inactive lanes)", "ISA3 VOPC"),
    "v_cmp_eq_u32_e64": ("SDST[lane] = S0 == S1 (0 on inactive lanes)", "ISA3 VOPC (VOP3 encoding)"),
    "v_cmp_ne_u32_e32": ("VCC[lane] = S0 != S1", "ISA3 VOPC"),
    "v_cmp_ne_u32_e64": ("SDST[lane] = S0 != S1", "ISA3 VOPC"),
    "v_cmp_gt_i32_e32": ("VCC[lane] = S0 > S1 signed", "ISA3 VOPC"),
    "v_cmp_gt_i32_e64": ("SDST[lane] = S0 > S1 signed", "ISA3 VOPC"),
    "v_cmp_gt_u32_e32": ("VCC[lane] = S0 > S1 unsigned", "ISA3 VOPC"),
    "v_cmp_gt_u32_e64": ("SDST[lane] = S0 > S1 unsigned", "ISA3 VOPC"),
    "v_cmp_lt_i32_e32": ("VCC[lane] = S0 < S1 signed", "ISA3 VOPC"),
    "v_cmp_lt_i32_e64": ("SDST[lane] = S0 < S1 signed", "ISA3 VOPC"),
    "v_cmp_lt_f32_e32": ("VCC[lane] = S0 < S1 (f32, false on NaN)", "ISA3 VOPC"),
    "v_cmp_lt_f32_e64": ("SDST[lane] = S0 < S1 (f32, false on NaN)", "ISA3 VOPC"),
    "v_cmp_lt_u64_e32": ("VCC[lane] = S0_64 < S1_64 unsigned", "ISA3 VOPC"),
    "v_cmp_lt_u64_e64": ("SDST[lane] = S0_64 < S1_64 unsigned", "ISA3 VOPC"),
    # ---------------- VALU f32 (IEEE mode on, denormals kept, RNE: kernel descriptor)
    "v_add_f32_e32": ("D = S0 + S1, RNE", "ISA3 VOP2"),
    "v_sub_f32_e32": ("D = S0 - S1, RNE", "ISA3 VOP2"),
    "v_mul_f32_e32": ("D = S0 * S1, RNE", "ISA3 VOP2"),
    "v_mul_f32_e64": ("D = S0 * S1 with neg/abs source modifiers, RNE", "ISA3 VOP3"),
    "v_max_f32_e32": ("D = max(S0, S1); IEEE mode: a NaN operand yields the other; -0 < +0", "ISA3 VOP2"),
    "v_max3_f32": ("D = max(S0, S1, S2) (IEEE-mode max twice)", "ISA3 VOP3"),
    "v_fma_f32": ("D = S0 * S1 + S2, one rounding", "ISA3 VOP3"),
    "v_fmac_f32_e32": ("D = S0 * S1 + D, one rounding", "ISA3 VOP2"),
    "v_exp_f32_e32": ("D = 2^S0; model: correctly rounded (hardware: 1 ulp documented)", "ISA3 VOP1"),
    "v_log_f32_e32": ("D = log2(S0); model: correctly rounded (hardware: 1 ulp documented)", "ISA3 VOP1"),
    "v_rcp_f32_e32": ("D = 1 / S0; model: correctly rounded (hardware: 1 ulp documented)", "ISA3 VOP1"),
    "v_div_scale_f32": ("division pre-scale: D = S0 or S0 * 2^+-64, VCC per the ISA pseudocode", "ISA3 VOP3b V_DIV_SCALE_F32"),
    "v_div_fmas_f32": ("D = fma(S0, S1, S2), times 2^32 where VCC", "ISA3 VOP3 V_DIV_FMAS_F32"),
    "v_div_fixup_f32": ("division special cases (NaN, 0, inf, under/overflow), else |S0| signed", "ISA3 VOP3 V_DIV_FIXUP_F32"),
    "v_pk_mul_f32": (
        "2 x f32 multiply; op_sel / op_sel_hi pick each element's dwords, neg_lo/hi negate",
        "LLVM VOP3PInstructions.td (gfx90a+ V_PK_MUL_F32)",
    ),
    "v_pk_add_f32": (
        "2 x f32 add; op_sel / op_sel_hi / neg_lo / neg_hi as v_pk_mul_f32",
        "LLVM VOP3PInstructions.td (gfx90a+ V_PK_ADD_F32)",
    ),
    # ---------------- conversions
    "v_cvt_pk_fp8_f32": (
        "D.word[op_sel[2]] = {e4m3(S1), e4m3(S0)}, RNE, no saturation (NaN on overflow); other word kept",
        "LLVM VOP3Instructions.td V_CVT_PK_FP8_F32 (gfx950: OCP E4M3); OCP",
    ),
    "v_cvt_pk_f32_fp8_e32": ("{D1, D0} = f32(e4m3 bytes 1, 0 of S0), exact", "LLVM VOP1Instructions.td V_CVT_PK_F32_FP8; OCP"),
    "v_cvt_pk_f32_fp8_sdwa": ("as _e32 on the word src0_sel picks (WORD_1 = bytes 2, 3)", "LLVM VOP1Instructions.td (SDWA form); OCP"),
    "v_cvt_scalef32_pk_f16_fp8": (
        "D = {f16(e4m3(b1) * S1), f16(e4m3(b0) * S1)}, word op_sel[0] of S0, one RNE",
        "LLVM VOP3Instructions.td (gfx950 V_CVT_SCALEF32_PK_F16_FP8); OCP",
    ),
    "v_cvt_pk_f16_f32": ("D = {f16(S1), f16(S0)}, RNE", "ISA3 VOP3"),
    "v_cvt_pk_bf16_f32": ("D = {bf16(S1), bf16(S0)}, RNE, NaN quieted", "LLVM VOP3Instructions.td (gfx950 V_CVT_PK_BF16_F32)"),
    # ---------------- cross-lane
    "v_permlane16_swap_b32_e32": (
        "swap odd 16-lane rows of VDST with even rows of VSRC",
        "LLVM VOP1Instructions.td (gfx950 V_PERMLANE16_SWAP_B32)",
    ),
    "v_permlane32_swap_b32_e32": (
        "swap lanes 32-63 of VDST with lanes 0-31 of VSRC",
        "LLVM VOP1Instructions.td (gfx950 V_PERMLANE32_SWAP_B32)",
    ),
    "ds_bpermute_b32": ("D[l] = DATA[((ADDR[l] + offset) / 4) % 64]; 0 from an inactive lane", "ISA3 LDS (DS_BPERMUTE_B32)"),
    # ---------------- memory
    "buffer_load_dword": (
        "D = MEM32[V#.base + VADDR + offset] when offset + 4 <= num_records, else 0; the `lds` form (also x4) DMAs lane l's dwords to "
        "LDS M0 + offset + 4n l (vmcnt)",
        "ISA3 ch. 9 (buffer descriptor, range checking); ISA4 9.1.9 (Memory Buffer Load to LDS)",
    ),
    "buffer_load_dwordx4": ("4 dwords, each range-checked against num_records (0 when out of range)", "ISA3 ch. 9"),
    "global_load_dwordx4": ("D[0:3] = MEM[VADDR64 + offset] (sc0/sc1 cache bits: no effect on values)", "ISA3 ch. 10"),
    "global_store_dword": ("MEM32[SADDR64 + VADDR32 + offset] = DATA", "ISA3 ch. 10"),
    "global_store_dwordx2": ("MEM64[VADDR64 + offset] = DATA[0:1]", "ISA3 ch. 10"),
    "global_load_lds_dword": (
        "LDS DMA: lane l's dword from VADDR64 lands at LDS M0 + 4 l (vmcnt)",
        "LLVM AMDGPUUsage / SIInstrInfo (LDS DMA)",
    ),
    "global_load_lds_dwordx4": (
        "LDS DMA: lane l's 16 bytes land at LDS M0 + 16 l (gfx950; vmcnt)",
        "LLVM gfx950 global_load_lds_dwordx4; MC tests",
    ),
    "ds_read_b32": ("D = LDS32[ADDR + offset]", "ISA3 ch. 11"),
    "ds_read_b128": ("D[0:3] = LDS128[ADDR + offset]", "ISA3 ch. 11"),
    "ds_write_b32": ("LDS32[ADDR + offset] = DATA", "ISA3 ch. 11"),
    "ds_write_b128": ("LDS128[ADDR + offset] = DATA[0:3]", "ISA3 ch. 11"),
    "ds_read_b64_tr_b8": (
        "per 16 lanes: lane i gets byte j = byte (i % 8) of the 8 bytes lane 2j + i // 8 addresses",
        "MOJO ds_read_tr8_b64; LLVM llvm.amdgcn.ds.read.tr8.b64 (gfx950)",
    ),
    # ---------------- MFMA
    "v_mfma_f32_16x16x32_f16": (
        "D = A B + C; A[t][8g+j], B[8g+j][t], D[4g+r][t]; exact sum, one f32 rounding",
        "IREE MFMA_F32_16x16x32_F16 layout; profile model",
    ),
    "v_mfma_f32_16x16x32_bf16": ("as the f16 form with bf16 inputs", "IREE MFMA_F32_16x16x32_BF16 layout; profile model"),
    "v_mfma_scale_f32_16x16x128_f8f6f4": (
        (
            "D = sum A 2^(sa-127) B 2^(sb-127) + C; E4M3; byte j of lane (t, g): K = 16g+j (j<16) / 64+16g+j-16; "
            "scale of (row, K block kb) in lane row + 16 kb; exact sum, one rounding"
        ),
        "TRITON chooseScaledMfmaScaleLayout (fp8: two 16-element K blocks per lane); IREE / MOJO disagree (F1); OCP MX",
    ),
    # ---------------- foreign FlyDSL kernels (aiter sparse MLA prefill / decode, MLA reduce)
    "ds_swizzle_b32": (
        "D[l] = DATA[src(l)]: offset[15] quad permute, else ((l & and) | or) ^ xor per 32-lane half; swizzle() macros",
        "ISA3 LDS (DS_SWIZZLE_B32); LLVM AMDGPUAsmParser (swizzle macros)",
    ),
    "ds_read2_b32": ("2 dwords at ADDR + 4 offset0, ADDR + 4 offset1", "ISA3 ch. 11 (DS_READ2_B32)"),
    "ds_read2_b64": ("2 x 8 bytes at ADDR + 8 offset0, ADDR + 8 offset1", "ISA3 ch. 11 (DS_READ2_B64)"),
    "ds_read2st64_b32": ("as ds_read2_b32 with offsets in units of 256 bytes", "ISA3 ch. 11 (DS_READ2ST64_B32)"),
    "ds_write2_b32": ("DATA0 at ADDR + 4 offset0, DATA1 at ADDR + 4 offset1", "ISA3 ch. 11 (DS_WRITE2_B32)"),
    "buffer_store_dword": ("MEM32[V#.base + VADDR + offset] = DATA when offset + 4 <= num_records, else dropped", "ISA3 ch. 9"),
    "buffer_store_dwordx2": ("2 dwords, each range-checked (dropped when out of range)", "ISA3 ch. 9"),
    "buffer_store_dwordx4": ("4 dwords, each range-checked (dropped when out of range)", "ISA3 ch. 9"),
    "v_mad_i64_i32": ("{SDST[lane], D64} = 65-bit sext(S0) * sext(S1) + sext(S2_64)", "ISA3 VOP3b (V_MAD_I64_I32)"),
    "v_subbrev_co_u32_e32": ("D = S1 - S0 - VCC[lane]; VCC[lane] = borrow", "ISA3 VOP2"),
    "v_subbrev_co_u32_e64": ("D = S1 - S0 - S2[lane]; SDST[lane] = borrow", "ISA3 VOP3b"),
    "v_cmp_neq_f32_e32": ("VCC[lane] = !(S0 == S1) (true on NaN)", "ISA3 VOPC"),
    "v_cmp_neq_f32_e64": ("SDST[lane] = !(S0 == S1) (true on NaN)", "ISA3 VOPC"),
    "v_cmp_nlt_f32_e32": ("VCC[lane] = !(S0 < S1) (true on NaN); also nle ngt nge nlg o u", "ISA3 VOPC"),
    "v_ldexp_f32": ("D = S0 * 2^S1 (S1 signed), one RNE rounding, denormals kept", "ISA3 VOP2/VOP3 (V_LDEXP_F32)"),
    "v_perm_b32": (
        "byte i of D = BYTE_PERMUTE({S0, S1}, S2.byte[i]): 0-7 a byte, 8-11 a sign, 12 0x00, 13+ 0xFF",
        "ISA3 VOP3 (V_PERM_B32)",
    ),
    "v_maximum3_f32": (
        "D = maximum(S0, S1, S2), IEEE 754-2019: NaN propagates, -0 < +0",
        "LLVM VOP3Instructions.td (gfx950 V_MAXIMUM3_F32)",
    ),
    "v_pk_mov_b32": ("D.lo = S0 dword op_sel[0], D.hi = S1 dword op_sel[1]", "LLVM VOP3PInstructions.td (gfx90a+ V_PK_MOV_B32)"),
    "s_cmpk_lt_i32": ("SCC = S0 < sext(SIMM16) signed (all s_cmpk_<op>_i32 likewise)", "ISA3 SOPK"),
    "s_cmpk_lt_u32": ("SCC = S0 < zext(SIMM16) unsigned (all s_cmpk_<op>_u32 likewise)", "ISA3 SOPK"),
    "s_bitcmp0_b32": ("SCC = bit S1[4:0] of S0 == 0", "ISA3 SOPC"),
    "s_bitcmp1_b32": ("SCC = bit S1[4:0] of S0 == 1", "ISA3 SOPC"),
    "ds_read_u16": ("D = zext(LDS16[ADDR + offset]) (i16: sign-extended; u8 / i8 likewise)", "ISA3 ch. 11 (DS_READ_U16)"),
    "buffer_store_short": ("MEM16[V#.base + VADDR + offset] = DATA[15:0] when offset + 2 <= num_records, else dropped", "ISA3 ch. 9"),
    "v_mfma_f32_16x16x16_bf16": (
        "D = A B + C, bf16; A[t][4g+j], B[4g+j][t] (4 per lane, 2 VGPRs), D[4g+r][t]; exact sum, one f32 rounding",
        "AMD matrix instruction calculator (16x16x16bf16_1k); IREE MFMA_F32_16x16x16_BF16; profile model",
    ),
    "v_mfma_f32_32x32x8_bf16": (
        "D = A B + C, bf16; t = l % 32, g = l // 32: A[t][4g+j], B[4g+j][t]; D[8(r//4) + 4g + r%4][t] in dword r (16)",
        "AMD matrix instruction calculator (32x32x8bf16_1k); IREE MFMA_F32_32x32x8_BF16; profile model",
    ),
    "v_mfma_f32_16x16x32_fp8_fp8": (
        "D = A B + C, OCP E4M3 inputs; A[t][8g+j], B[8g+j][t] (8 bytes per lane); exact sum, one f32 rounding",
        "LLVM gfx950 fp8 (OCP) MFMA; IREE MFMA_F32_16x16x32_F8E4M3FN layout; profile model",
    ),
}


def render_table(opcodes: list[str] | None = None) -> str:
    """The markdown table of docs/reference/isa-opcodes.md (all catalogue entries, sorted)."""
    names = sorted(OPCODES) if opcodes is None else sorted(opcodes)
    lines = ["| opcode | semantics (as modelled) | source |", "|---|---|---|"]
    for n in names:
        sem, src = OPCODES[n]
        lines.append(f"| `{n}` | {sem.replace('|', '&#124;')} | {src} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_table())
