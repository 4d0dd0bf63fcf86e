"""The opcode catalogue against the compiled kernel, the decoder, the docs and the tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel.isa.asm import parse_program
from kernel.isa.catalog import OPCODES, render_table
from kernel.isa.errors import UnknownInstruction
from kernel.isa.interp import decode, factory_for

ROOT = Path(__file__).resolve().parents[3]
TEST_FILES = ["test_opcodes_alu.py", "test_opcodes_memory.py", "test_opcodes_mfma.py", "test_opcodes_foreign.py", "test_checkers.py"]
MNEMONIC = re.compile(r"\b((?:s|v|ds|buffer|global)_[a-z0-9_]+)\b")


def test_every_catalogued_opcode_decodes() -> None:
    from kernel.isa.asm import Instr

    for name in OPCODES:
        factory_for(Instr(0, 0, name, [], {}, name))  # UnknownInstruction if not implemented


def test_unknown_opcode_and_modifier_are_named() -> None:
    text = (
        "\t.text\nk:\n\tv_sin_f32_e32 v1, v0\n\tv_add_f32_e32 v1, v0, v0 clamp\n\ts_endpgm\n"
        ".amdhsa_kernel k\n.amdhsa_group_segment_fixed_size 0\n.amdhsa_next_free_vgpr 8\n.amdhsa_next_free_sgpr 8\n.end_amdhsa_kernel\n"
    )
    with pytest.raises(UnknownInstruction) as err:
        decode(parse_program(text))
    assert "v_sin_f32_e32" in str(err.value) and "clamp" in str(err.value)


def test_every_catalogued_opcode_has_a_test() -> None:
    seen: set[str] = set()
    for f in TEST_FILES:
        seen |= set(MNEMONIC.findall((Path(__file__).parent / f).read_text().replace("\\n", " ")))
    missing = sorted(set(OPCODES) - seen)
    assert not missing, f"opcodes without a per-opcode test: {missing}"


def test_docs_table_is_the_catalogue() -> None:
    docs = (ROOT / "docs" / "reference" / "isa-opcodes.md").read_text()
    assert render_table() in docs, "docs/reference/isa-opcodes.md differs from kernel.isa.catalog (python -m kernel.isa.catalog)"


def test_compiled_kernel_opcodes_are_catalogued() -> None:
    pytest.importorskip("flydsl")
    from kernel.flydsl.isa_cache import kernel_asm

    for cfg in ((1, False, False), (16, True, True)):
        prog = parse_program(kernel_asm(*cfg))
        used = {i.mnemonic for i in prog.instrs}
        assert used <= set(OPCODES), f"{cfg}: not in the catalogue: {sorted(used - set(OPCODES))}"
        decode(prog)
