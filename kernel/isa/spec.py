"""Launch specs: run any compiled gfx950 kernel (`*final_isa.s`) on the interpreter from a small
TOML file, without writing Python.

    python -m kernel.isa run --asm K.s --args spec.toml [--checks raise|collect|off]

Spec format (every key is checked; an unknown or malformed one is a one-line SpecError naming it):

    grid = [2, 1, 1]          # workgroups (x, y, z) or one int
    block = 256               # threads per workgroup (default: the kernel's .reqd_workgroup_size)
    seed = 0                  # for "randn" / "randint" tensors

    [[arg]]                   # one table per explicit kernel argument, in .amdgpu_metadata order
    name = "query"
    tensor = { shape = [2, 128, 512], dtype = "bfloat16", init = "randn" }   # its address is passed
    [[arg]]
    name = "num_queries"
    value = 2                 # an int (packed to the argument's size) or a float (f32 / f64)
    [[arg]]
    name = "q_stride"
    value = "query.stride(0)" # or an expression over earlier tensors: NAME.shape[i],
                              # NAME.stride(i), NAME.numel(), NAME.nbytes, numbers, + - * / //
    [[arg]]
    name = "query_layout"
    layout = "query"          # FlyDSL's by-value layout of a layout-dynamic fx.Tensor argument:
                              # i32 shapes, then i64 strides but the unit one (flydsl_layout)
    [[arg]]
    name = "out_ptr"
    pointer = "query"         # the address of an earlier tensor (a second argument for one buffer)

Tensor data: `values = [...]` (flat, filling the shape), or an init: "zeros", "ones", "randn"
(normal, then cast), "randint:LO:HI" (integers in
[LO, HI)), "arange". dtypes: any torch dtype name (float32, bfloat16, uint8, int32, ...).
Every tensor is registered with the interpreter's memory checker; an access outside all of them
is an out_of_bounds finding.
"""

from __future__ import annotations

import ast
import struct
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernel.isa.errors import IsaError


class SpecError(IsaError):
    """A launch spec that cannot be used; the message names the field."""


@dataclass
class SpecReport:
    """What one spec run did: instructions, seconds, findings, the tensors after the run."""

    kernel: str
    instructions: int
    seconds: float
    workgroups: int
    findings: list = field(default_factory=list)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for f in self.findings:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
        fs = ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())) or "no findings"
        rate = self.instructions / self.seconds if self.seconds > 0 else float("nan")
        return (
            f"{self.kernel}: {self.workgroups} workgroups, {self.instructions:,} instructions in {self.seconds:.2f} s ({rate:,.0f}/s); {fs}"
        )


_TOP = {"grid", "block", "seed", "arg"}
_ARG = {"name", "tensor", "value", "pointer", "layout"}
_TENSOR = {"shape", "dtype", "init", "values"}


def _make_tensor(where: str, t: Any, gen: torch.Generator) -> torch.Tensor:
    if not isinstance(t, dict):
        raise SpecError(f"{where}.tensor must be a table {{shape, dtype, init}}")
    bad = set(t) - _TENSOR
    if bad:
        raise SpecError(f"{where}.tensor: unknown key(s) {sorted(bad)} (use {sorted(_TENSOR)})")
    shape = t.get("shape")
    if not isinstance(shape, list) or not shape or not all(isinstance(v, int) and v > 0 for v in shape):
        raise SpecError(f"{where}.tensor.shape must be a non-empty list of positive ints, got {shape!r}")
    dname = t.get("dtype", "float32")
    dtype = getattr(torch, str(dname), None)
    if not isinstance(dtype, torch.dtype):
        raise SpecError(f"{where}.tensor.dtype {dname!r} is not a torch dtype")
    if "values" in t:
        vals = t["values"]
        try:
            out = torch.tensor(vals).reshape(shape).to(dtype)
        except (TypeError, ValueError, RuntimeError) as err:
            raise SpecError(
                f"{where}.tensor.values: {len(vals) if isinstance(vals, list) else vals!r} values do not fill shape {shape}"
            ) from err
        return out
    init = str(t.get("init", "zeros"))
    if init == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if init == "ones":
        return torch.ones(shape, dtype=dtype)
    if init == "arange":
        n = 1
        for v in shape:
            n *= v
        return torch.arange(n).reshape(shape).to(dtype)
    if init == "randn":
        return torch.randn(shape, generator=gen).to(dtype)
    if init.startswith("randint:"):
        try:
            lo, hi = (int(v) for v in init.split(":")[1:3])
        except ValueError as err:
            raise SpecError(f"{where}.tensor.init {init!r}: expected randint:LO:HI") from err
        return torch.randint(lo, hi, shape, generator=gen).to(dtype)
    raise SpecError(f"{where}.tensor.init {init!r}: use zeros, ones, arange, randn or randint:LO:HI")


def eval_expr(where: str, text: str, env: dict[str, Any]) -> int | float:
    """A small arithmetic expression: numbers, names of `env` bound to numbers, and for names
    bound to tensors NAME.shape[i], NAME.stride(i), NAME.numel(), NAME.nbytes; + - * / // and
    unary minus. Anything else is a SpecError naming `where`."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name) and node.id in env and not isinstance(env[node.id], torch.Tensor | type(None)):
            return env[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div | ast.FloorDiv):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Div | ast.FloorDiv) and b == 0:
                raise SpecError(f"{where} {text!r}: division by zero")
            ops = {
                ast.Add: lambda: a + b,
                ast.Sub: lambda: a - b,
                ast.Mult: lambda: a * b,
                ast.Div: lambda: a / b,
                ast.FloorDiv: lambda: a // b,
            }
            return ops[type(node.op)]()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            return int(tensor(node.value.value).shape[ev(node.slice)])
        if isinstance(node, ast.Attribute) and node.attr == "nbytes":
            t = tensor(node.value)
            return t.numel() * t.element_size()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("stride", "numel"):
            t = tensor(node.func.value)
            return int(t.stride(ev(node.args[0]))) if node.func.attr == "stride" else t.numel()
        raise SpecError(f"{where} {text!r}: unsupported expression part `{ast.unparse(node)}`")

    def tensor(node: ast.AST) -> torch.Tensor:
        if isinstance(node, ast.Name) and isinstance(env.get(node.id), torch.Tensor):
            return env[node.id]
        raise SpecError(f"{where} {text!r}: `{ast.unparse(node)}` is not an earlier tensor argument")

    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise SpecError(f"{where} {text!r}: not an expression ({err.msg})") from err
    return ev(tree.body)


def flydsl_layout(t: torch.Tensor) -> bytes:
    """The by-value layout FlyDSL passes after a layout-dynamic fx.Tensor's pointer
    (flydsl.compiler.jit_argument: every shape as i32, then every stride except the unit-stride
    leading one as i64, packed without padding)."""
    strides = [s for i, s in enumerate(t.stride()) if not (s == 1 and i == _leading(t))]
    return struct.pack("<" + "i" * t.dim() + "q" * len(strides), *t.shape, *strides)


def _leading(t: torch.Tensor) -> int:
    return next((i for i, s in enumerate(t.stride()) if s == 1), -1)


def load_spec(spec: dict, n_explicit: int) -> tuple[Any, int | None, list[int | float | bytes], dict[str, torch.Tensor]]:
    """(grid, block, kernel argument values, tensors by name) from a parsed spec."""
    bad = set(spec) - _TOP
    if bad:
        raise SpecError(f"unknown top-level key(s) {sorted(bad)} (use {sorted(_TOP)})")
    grid = spec.get("grid", 1)
    if isinstance(grid, list):
        if len(grid) > 3 or not all(isinstance(v, int) and v > 0 for v in grid):
            raise SpecError(f"grid must be a positive int or up to three positive ints, got {grid!r}")
        grid = tuple(grid + [1] * (3 - len(grid)))
    elif not isinstance(grid, int) or grid < 1:
        raise SpecError(f"grid must be a positive int or up to three positive ints, got {grid!r}")
    block = spec.get("block")
    if block is not None and (not isinstance(block, int) or block < 64 or block % 64):
        raise SpecError(f"block must be a positive multiple of 64 threads, got {block!r}")
    gen = torch.Generator().manual_seed(int(spec.get("seed", 0)))
    args = spec.get("arg", [])
    if not isinstance(args, list):
        raise SpecError("arg must be an array of tables ([[arg]])")
    if len(args) != n_explicit:
        raise SpecError(f"arg: the kernel takes {n_explicit} explicit arguments, the spec lists {len(args)}")
    values: list[int | float | bytes] = []
    tensors: dict[str, torch.Tensor] = {}
    for i, a in enumerate(args):
        where = f"arg[{i}]"
        if not isinstance(a, dict):
            raise SpecError(f"{where} must be a table")
        bad = set(a) - _ARG
        if bad:
            raise SpecError(f"{where}: unknown key(s) {sorted(bad)} (use {sorted(_ARG)})")
        name = a.get("name", f"arg{i}")
        where = f"arg[{i}] ({name})"
        kinds = [k for k in ("tensor", "value", "pointer", "layout") if k in a]
        if len(kinds) != 1:
            raise SpecError(f"{where}: give exactly one of tensor, value, pointer, layout (got {kinds or 'none'})")
        if "tensor" in a:
            t = _make_tensor(where, a["tensor"], gen)
            tensors[name] = t
            values.append(t.data_ptr())
        elif "layout" in a:
            ref = a["layout"]
            if ref not in tensors:
                raise SpecError(f"{where}.layout {ref!r} is not an earlier tensor argument")
            values.append(flydsl_layout(tensors[ref]))
        elif "pointer" in a:
            ref = a["pointer"]
            if ref not in tensors:
                raise SpecError(f"{where}.pointer {ref!r} is not an earlier tensor argument")
            values.append(tensors[ref].data_ptr())
        else:
            v = a["value"]
            if isinstance(v, bool) or not isinstance(v, int | float | str):
                raise SpecError(f"{where}.value must be an int, a float or an expression string, got {v!r}")
            values.append(eval_expr(f"{where}.value", v, tensors) if isinstance(v, str) else v)
    return grid, block, values, tensors


def run_spec(asm_text: str, spec: dict, checks: str = "collect", name: str = "kernel") -> SpecReport:
    """Load the kernel, build its arguments from the spec, launch it; a SpecReport."""
    from kernel.isa.asm import parse_program
    from kernel.isa.launch import IsaKernel, explicit_args

    prog = parse_program(asm_text)
    grid, block, values, tensors = load_spec(spec, len(explicit_args(prog)))
    k = IsaKernel.from_asm(asm_text, threads=block)
    stats = k.launch(grid, values, [(t, n) for n, t in tensors.items()], checks=checks)
    return SpecReport(name, stats.instructions, stats.seconds, stats.workgroups, stats.findings, tensors)


def run_spec_file(asm: Path, spec: Path, checks: str = "collect") -> SpecReport:
    try:
        data = tomllib.loads(Path(spec).read_text())
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{spec}: not TOML ({err})") from err
    except OSError as err:
        raise SpecError(f"{spec}: cannot read ({err.strerror})") from err
    try:
        text = Path(asm).read_text()
    except OSError as err:
        raise SpecError(f"{asm}: cannot read ({err.strerror})") from err
    return run_spec(text, data, checks=checks, name=Path(asm).stem)
