"""Launch specs (kernel.isa.spec): a hand-written kernel run from a TOML spec, and one-line
errors naming the bad field."""

from __future__ import annotations

import pytest
import torch

from kernel.isa.spec import SpecError, run_spec
from tests.kernel.isa.harness import TEMPLATE

# out[tid] = a[tid] + n (kernarg: a pointer at 0, out pointer at 8, n at 16)
BODY = """s_load_dwordx4 s[4:7], s[0:1], 0x0
s_load_dword s8, s[0:1], 0x10
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
global_load_dword v2, v1, s[4:5]
s_waitcnt vmcnt(0)
v_add_u32_e32 v2, s8, v2
global_store_dword v1, v2, s[6:7]
s_waitcnt vmcnt(0)"""
META = """\t.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     0
    .args:
      - .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .offset:         8
        .size:           8
        .value_kind:     global_buffer
      - .offset:         16
        .size:           4
        .value_kind:     by_value
    .kernarg_segment_size: 24
    .name:           snippet
\t.end_amdgpu_metadata
"""
ASM = TEMPLATE.format(body="\n".join("\t" + ln for ln in BODY.splitlines()), lds=0, vgprs=8) + META


def _spec(**over):
    spec = {
        "grid": 1,
        "block": 64,
        "arg": [
            {"name": "a", "tensor": {"shape": [64], "dtype": "int32", "init": "arange"}},
            {"name": "out", "tensor": {"shape": [64], "dtype": "int32"}},
            {"name": "n", "value": "a.numel() * 2"},
        ],
    }
    spec.update(over)
    return spec


def test_spec_runs_a_kernel() -> None:
    rep = run_spec(ASM, _spec())
    assert rep.findings == []
    assert torch.equal(rep.tensors["out"], torch.arange(64, dtype=torch.int32) + 128)


def test_spec_tensor_too_small_is_a_finding() -> None:
    spec = _spec()
    spec["arg"][1] = {"name": "out", "tensor": {"shape": [32], "dtype": "int32"}}
    rep = run_spec(ASM, spec)
    assert {f.kind for f in rep.findings} == {"out_of_bounds"}


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"grids": 1}, "unknown top-level key(s) ['grids']"),
        ({"grid": 0}, "grid must be"),
        ({"block": 100}, "block must be"),
        ({"arg": []}, "takes 3 explicit arguments, the spec lists 0"),
    ],
)
def test_bad_spec_names_the_field(over, needle) -> None:
    with pytest.raises(SpecError) as err:
        run_spec(ASM, _spec(**over))
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "arg, needle",
    [
        ({"name": "n", "value": "b.numel()"}, "arg[2] (n).value 'b.numel()': `b` is not an earlier tensor"),
        ({"name": "n", "value": "__import__('os')"}, "arg[2] (n).value"),
        ({"name": "n", "pointer": "zz"}, "arg[2] (n).pointer 'zz'"),
        ({"name": "n"}, "arg[2] (n): give exactly one of tensor, value, pointer"),
        ({"name": "n", "tensor": {"shape": [4], "dtype": "float99"}}, "arg[2] (n).tensor.dtype 'float99'"),
        ({"name": "n", "tensor": {"shape": [4], "init": "rand"}}, "arg[2] (n).tensor.init 'rand'"),
        ({"name": "n", "value": 1, "typo": 2}, "arg[2]: unknown key(s) ['typo']"),
    ],
)
def test_bad_arg_names_the_field(arg, needle) -> None:
    spec = _spec()
    spec["arg"][2] = arg
    with pytest.raises(SpecError) as err:
        run_spec(ASM, spec)
    assert needle in str(err.value), str(err.value)
