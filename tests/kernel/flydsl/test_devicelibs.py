"""The stand-in ocml / ockl device libraries (kernel.flydsl.devicelibs)."""

from __future__ import annotations

import re
from pathlib import Path

from kernel.flydsl.devicelibs import OCKL, OCML, undefined_device_functions, write_device_libs


def test_device_libs_define_exactly_the_listed_functions(tmp_path: Path) -> None:
    d = write_device_libs(tmp_path)
    defined = set()
    for name in ("ocml.bc", "ockl.bc"):
        text = (d / name).read_text()
        assert text.startswith('target triple = "amdgcn-amd-amdhsa"')
        defined |= set(re.findall(r"^define [^@]*@(\w+)\(", text, re.MULTILINE))
    assert defined == set(OCML) | set(OCKL)
    assert "__ocml_log2_f32" in defined and "__ockl_get_num_groups" in defined
    before = (d / "ocml.bc").stat().st_mtime_ns
    write_device_libs(tmp_path)  # unchanged content is not rewritten
    assert (d / "ocml.bc").stat().st_mtime_ns == before


def test_undefined_device_functions_are_named() -> None:
    ir = "declare float @__ocml_log2_f32(float)\ndeclare float @__ocml_tanh_f32(float)\ndeclare i64 @__ockl_get_num_groups(i32)\n"
    assert undefined_device_functions(ir) == ["__ocml_tanh_f32"]
