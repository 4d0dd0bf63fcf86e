"""Stand-ins for the few ROCm device-library functions FlyDSL kernels call, so that such kernels
compile (compile-only) on a machine without ROCm.

flydsl lowers `fx.exp2` / `fx.log2` / `fx.exp` / `fx.log` / `fx.sqrt` ... to calls of ROCm's
ocml (`__ocml_log2_f32`, ...) and `fx.grid_dim` / `gpu.grid_dim` to ockl's
`__ockl_get_num_groups`; MLIR's ROCDL serializer then links `$ROCM_PATH/amdgcn/bitcode/ocml.bc`
and `ockl.bc`, which only a ROCm install has. `write_device_libs(dir)` writes both files as
LLVM IR text (LLVM's IR reader accepts text under a .bc name), defining exactly the functions in
OCML / OCKL below with these semantics:

- `__ocml_<f>_f32(x)` = the LLVM intrinsic `llvm.<f>.f32(x)` as the AMDGPU backend lowers it
  (AMDGPUISelLowering / AMDGPULegalizerInfo: exp2 / log2 on v_exp_f32 / v_log_f32 with denormal
  range scaling, exp / log / exp10 / log10 via them with extra-precision constants, sqrt
  correctly rounded, rsqrt = 1 / sqrt with the afn-free division). This is the accuracy class of
  ROCm's own ocml for f32 (which also defers to these lowerings for exp2 / log2), not bit-for-bit
  ROCm ocml: a kernel compiled here may differ from one compiled against ROCm in the last ulp of
  exp / log results. fabs, floor, ceil, trunc, rint, fma, fmin / fmax (maxnum / minnum) are exact.
- `__ockl_get_num_groups(d)` = the dispatch's workgroup count in dimension d, read from the
  implicit kernel arguments (code object v5: hidden_block_count_{x,y,z}, u32 at offsets 0, 4, 8
  of the implicit argument block; AMDGPUUsage "Code Object V5 Metadata"); `__ockl_get_local_size`
  likewise from hidden_group_size_{x,y,z} (u16 at offsets 12, 14, 16).

Anything else a kernel calls stays an undefined external: `undefined_device_functions(ir_text)`
names them (`python -m tools.foreign_isa` reports them in one line instead of flydsl's bare
"error while serializing the module").
"""

from __future__ import annotations

import re
from pathlib import Path

OCML_UNARY = ("exp2", "log2", "exp", "log", "exp10", "log10", "sqrt", "fabs", "floor", "ceil", "trunc", "rint")
OCML_BINARY = {"fmax": "maxnum", "fmin": "minnum"}
OCML = tuple(f"__ocml_{f}_f32" for f in OCML_UNARY) + ("__ocml_rsqrt_f32", "__ocml_fma_f32") + tuple(f"__ocml_{f}_f32" for f in OCML_BINARY)
OCKL = ("__ockl_get_num_groups", "__ockl_get_local_size")
HEADER = 'target triple = "amdgcn-amd-amdhsa"\n\n'
ATTRS = "attributes #0 = { alwaysinline nounwind }\n"


def _ocml_ir() -> str:
    out = [HEADER]
    decls = set()
    for f in OCML_UNARY:
        out.append(
            f"define linkonce_odr hidden float @__ocml_{f}_f32(float %x) #0 {{\n"
            f"  %r = call float @llvm.{f}.f32(float %x)\n  ret float %r\n}}\n"
        )
        decls.add(f"declare float @llvm.{f}.f32(float)")
    for f, intr in OCML_BINARY.items():
        out.append(
            f"define linkonce_odr hidden float @__ocml_{f}_f32(float %x, float %y) #0 {{\n"
            f"  %r = call float @llvm.{intr}.f32(float %x, float %y)\n  ret float %r\n}}\n"
        )
        decls.add(f"declare float @llvm.{intr}.f32(float, float)")
    out.append(
        "define linkonce_odr hidden float @__ocml_rsqrt_f32(float %x) #0 {\n"
        "  %s = call float @llvm.sqrt.f32(float %x)\n  %r = fdiv float 1.0, %s\n  ret float %r\n}\n"
        "define linkonce_odr hidden float @__ocml_fma_f32(float %a, float %b, float %c) #0 {\n"
        "  %r = call float @llvm.fma.f32(float %a, float %b, float %c)\n  ret float %r\n}\n"
    )
    decls |= {"declare float @llvm.sqrt.f32(float)", "declare float @llvm.fma.f32(float, float, float)"}
    return "".join(out) + "\n".join(sorted(decls)) + "\n" + ATTRS


def _ockl_ir() -> str:
    return (
        HEADER
        + (
            "define linkonce_odr hidden i64 @__ockl_get_num_groups(i32 %d) #0 {\n"
            "  %p = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()\n"
            "  %o = mul i32 %d, 4\n"
            "  %q = getelementptr i8, ptr addrspace(4) %p, i32 %o\n"
            "  %v = load i32, ptr addrspace(4) %q, align 4\n"
            "  %r = zext i32 %v to i64\n  ret i64 %r\n}\n"
            "define linkonce_odr hidden i64 @__ockl_get_local_size(i32 %d) #0 {\n"
            "  %p = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()\n"
            "  %o0 = mul i32 %d, 2\n  %o = add i32 %o0, 12\n"
            "  %q = getelementptr i8, ptr addrspace(4) %p, i32 %o\n"
            "  %v = load i16, ptr addrspace(4) %q, align 2\n"
            "  %r = zext i16 %v to i64\n  ret i64 %r\n}\n"
            "declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()\n"
        )
        + ATTRS
    )


def write_device_libs(root: Path) -> Path:
    """Write root/amdgcn/bitcode/{ocml,ockl}.bc (LLVM IR text) when missing or different;
    returns the bitcode directory."""
    d = root / "amdgcn" / "bitcode"
    d.mkdir(parents=True, exist_ok=True)
    for name, text in (("ocml.bc", _ocml_ir()), ("ockl.bc", _ockl_ir())):
        p = d / name
        if not p.exists() or p.read_text() != text:
            tmp = p.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(p)
    return d


_CALLED = re.compile(r"^declare [^@]*@(__oc(?:ml|kl)_\w+)\(", re.MULTILINE)


def undefined_device_functions(ir_text: str) -> list[str]:
    """The ocml / ockl functions an LLVM IR module declares that write_device_libs does not define."""
    return sorted(set(_CALLED.findall(ir_text)) - set(OCML) - set(OCKL))


def undefined_in_dump(dump_dir: Path) -> list[str]:
    """undefined_device_functions over every *llvm_ir.ll a flydsl dump directory holds."""
    names: set[str] = set()
    for p in Path(dump_dir).glob("**/*llvm_ir.ll"):
        names |= set(undefined_device_functions(p.read_text()))
    return sorted(names)
