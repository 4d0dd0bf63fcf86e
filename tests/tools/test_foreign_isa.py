"""`python -m tools.foreign_isa table | run`: the interpreter's coverage of a kernel's ISA (an opcode it
does not model is named), a kernel run from its launch spec, a kernel without a spec reported, the
launch specs beside the tool readable."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.kernel.isa.harness import TEMPLATE
from tests.kernel.isa.test_spec import ASM, META
from tools.foreign_isa import __main__ as foreign

SPEC = """grid = 1
block = 64
[[arg]]
name = "a"
tensor = { shape = [64], dtype = "int32", init = "arange" }
[[arg]]
name = "out"
tensor = { shape = [64], dtype = "int32" }
[[arg]]
name = "n"
value = "a.numel() * 2"
"""


def _kernels(folder: Path) -> None:
    (folder / "adds.s").write_text(ASM)
    odd = TEMPLATE.format(body="\tv_frobnicate_b32 v1, v2\n\tv_add_u32_e32 v2, s8, v2", lds=0, vgprs=8) + META
    (folder / "odd.s").write_text(odd)


def test_table_names_the_opcodes_the_interpreter_does_not_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _kernels(tmp_path)
    assert foreign.coverage(tmp_path / "odd.s")["unmodelled"].keys() == {"v_frobnicate_b32"}
    assert foreign.main(["table", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert "| adds | 10 | 8 | 8 | - |" in rows and "| odd | 3 | 3 | 2 | `v_frobnicate_b32` |" in rows


def test_run_uses_the_spec_of_each_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kernels, specs = tmp_path / "out", tmp_path / "specs"
    kernels.mkdir()
    specs.mkdir()
    (kernels / "adds.s").write_text(ASM)
    (specs / "adds.toml").write_text(SPEC)
    monkeypatch.setattr(foreign, "SPECS", specs)
    assert foreign.main(["run", str(kernels)]) == 0
    assert "FAILED" not in capsys.readouterr().out
    (kernels / "unspecified.s").write_text(ASM)
    assert foreign.main(["run", str(kernels)]) == 1
    assert "unspecified: no spec" in capsys.readouterr().out


def test_a_folder_that_is_not_there_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert foreign.main(["table", str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.strip() == f"foreign_isa: {tmp_path / 'absent'}: not a folder"


def test_every_target_has_a_readable_launch_spec() -> None:
    names = {path.stem for path in foreign.SPECS.glob("*.toml")}
    assert names == set(foreign.TARGETS)
    for name in names:
        spec = tomllib.loads((foreign.SPECS / f"{name}.toml").read_text())
        assert {"grid", "block", "arg"} <= set(spec), name
