"""The one assembly reader (kernel/isa/asm.py, kernel/isa/cfg.py): what the interpreter and the
FlyDSL ISA checks both rely on."""

from __future__ import annotations

import pytest

from kernel.flydsl.isa_flow import defs, iteration_paths, uses
from kernel.isa.asm import OFF, Imm, Reg, imm_bits, parse_instruction, parse_program, reg_names
from kernel.isa.errors import AsmParseError

LISTING = """\t.amdhsa_code_object_version 6
\t.text
k:
\ts_load_dwordx2 s[2:3], s[0:1], 0x0 ; the first kernarg
\ts_mov_b32 m0, s4
.LBB0_1:
\tv_cmp_gt_u32_e32 vcc, 5, v0
\tglobal_load_lds_dwordx4 v[2:3], off
\ts_waitcnt vmcnt(0) lgkmcnt(1)
\tv_add_f32_e32 v1, -8.0, v1
\ts_cbranch_scc1 .LBB0_1
\ts_endpgm
.Lfunc_end0:
\t.amdhsa_kernel k
\t\t.amdhsa_group_segment_fixed_size 0x100
\t\t.amdhsa_next_free_vgpr 8
\t\t.amdhsa_next_free_sgpr 16
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t.end_amdhsa_kernel
\t.set .Lk.num_vgpr, 8
\t.amdgpu_metadata
amdhsa.kernels:
  - .agpr_count:     0
    .reqd_workgroup_size:
      - 64
      - 1
      - 1
    .sgpr_count:     16
\t.end_amdgpu_metadata
"""


def test_listing_parts() -> None:
    prog = parse_program(LISTING)
    assert prog.name == "k" and [i.line for i in prog.instrs] == [4, 5, 7, 8, 9, 10, 11, 12]
    assert prog.labels == {"k": 0, ".LBB0_1": 2}
    assert prog.instrs[0].text == "s_load_dwordx2 s[2:3], s[0:1], 0x0"  # comment dropped
    assert prog.directives[".amdhsa_group_segment_fixed_size"] == 0x100 and prog.directives[".amdhsa_code_object_version"] == 6
    assert prog.symbols == {".Lk.num_vgpr": 8}
    assert prog.meta_int(".agpr_count") == 0 and prog.meta_int(".sgpr_count") == 16 and prog.meta_int(".vgpr_count") is None
    assert prog.meta_ints(".reqd_workgroup_size") == [64, 1, 1]
    assert prog.instrs[4].modifiers == {"vmcnt": 0, "lgkmcnt": 1}
    assert prog.descriptor.group_segment_size == 0x100 and prog.descriptor.kernarg_ptr_sgpr == 0


def test_operands_are_typed_and_print_as_written() -> None:
    prog = parse_program(LISTING)
    load, mov, cmp, dma = prog.instrs[:4]
    assert [str(op) for op in load.operands] == ["s[2:3]", "s[0:1]", "0"] and imm_bits(load.operands[2]) == 0
    assert mov.operands[0] == Reg("s", 124) and str(mov.operands[0]) == "m0"
    assert str(cmp.operands[0]) == "vcc" and reg_names(cmp.operands[0]) == ("s106", "s107")
    assert dma.operands[1] == OFF and reg_names(dma.operands[0]) == ("v2", "v3")
    add = prog.instrs[5]
    assert isinstance(add.operands[1], Imm) and imm_bits(add.operands[1]) == 0xC1000000
    assert str(parse_instruction("v_mul_f32_e64 v1, -|v2|, v3").operands[1]) == "-|v2|"


def test_control_flow_and_the_checks_dataflow() -> None:
    prog = parse_program(LISTING)
    assert [(b.start, b.end, b.succs) for b in prog.blocks] == [(0, 2, [1]), (2, 7, [1, 2]), (7, 8, [])]
    assert prog.loops == [[1]] and prog.block_of == [0, 0, 1, 1, 1, 1, 1, 2]
    assert iteration_paths(prog, prog.loops[0]) == [[1]]
    cmp, dma, add = prog.instrs[2], prog.instrs[3], prog.instrs[5]
    assert defs(cmp) == ("s106", "s107") and defs(add) == ("v1",) and uses(add) == ("v1",)
    assert defs(dma) == () and uses(dma) == ("v2", "v3")


def test_a_listing_without_a_descriptor_reads_and_fails_only_when_launched() -> None:
    prog = parse_program("k:\n\ts_endpgm\n")
    assert [i.mnemonic for i in prog.instrs] == ["s_endpgm"]
    with pytest.raises(AsmParseError, match="lacks .amdhsa_group_segment_fixed_size"):
        prog.descriptor  # noqa: B018


def test_unreadable_assembly_names_its_line() -> None:
    with pytest.raises(AsmParseError, match=r"^line 3: unreadable operand '\?\?' in `v_mov_b32 v0, \?\?`$"):
        parse_program("\t.text\nk:\n\tv_mov_b32 v0, ??\n")
    with pytest.raises(AsmParseError, match="no kernel function"):
        parse_program("\t.text\n")
