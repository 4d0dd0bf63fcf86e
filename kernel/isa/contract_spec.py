"""`--kernel isa:PATH.s:SPEC.toml`: anyone's compiled sparse MLA kernel (gfx950 ISA) as a suite
backend on the interpreter; a launch spec maps the kernel contract onto the kernel's arguments.
`isa:@h16_i1_l1:SPEC.toml` takes that configuration of the project's own kernel from the ISA
cache (compiled on first use; the spec must describe the same H and flags).

Spec (TOML; every key is checked, a bad one is a one-line SpecError naming it):

    [contract]
    heads = [16]                  # H the ISA was compiled for (one .s = one configuration)
    has_invalid = true            # the has_invalid / return_lse it was compiled for; calls with
    return_lse = false            #   the other value are refused (a supports() reason)
    grid = "n_q"                  # workgroups: an expression or [x, y, z] of expressions
    block = 256
    profile = "gfx950"            # numerics profile the suite judges it by (default gfx950)
    max_index_entries = 8192      # refuse bigger calls (interpreter speed; default 8192)
    max_rows = 256

    [[arg]]                       # the kernel's explicit arguments in .amdgpu_metadata order
    tensor = "q"                  # a contract tensor's address: q kv_cache indices indptr out lse
    [[arg]]
    zeros = 656                   # a fresh zero-filled buffer of that many bytes (its address)
    [[arg]]
    value = "q.stride(0)"         # expression: n_q heads n_indices kv_rows softmax_scale
                                  #   has_invalid return_lse, TENSOR.stride(i) / .shape[i] /
                                  #   .numel() / .nbytes, numbers, + - * / //
    [[arg]]
    layout = "q"                  # FlyDSL's by-value layout of a contract tensor (kernel.isa.spec)

out is the caller's `out=` or a new bf16 [n_q, H, 512]; lse a new f32 [n_q, H] (when return_lse).
Every contract tensor and zeros buffer is registered with the memory checker; a finding raises
CheckFailed (FLYDSL_ISA_CHECKS=collect|off changes that, as for flydsl-isa).
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernel.backend import Backend, BackendUnavailable
from kernel.contract import MAX_HEADS, CallInfo, begin_call
from kernel.isa.spec import SpecError, eval_expr, flydsl_layout

CONTRACT_TENSORS = ("q", "kv_cache", "indices", "indptr", "out", "lse")
_CONTRACT_KEYS = {"heads", "has_invalid", "return_lse", "grid", "block", "profile", "max_index_entries", "max_rows"}
_ARG_KEYS = {"name", "tensor", "zeros", "value", "layout"}


def _check_spec(spec: dict, n_explicit: int) -> dict:
    bad = set(spec) - {"contract", "arg"}
    if bad:
        raise SpecError(f"unknown top-level key(s) {sorted(bad)} (use contract, arg)")
    c = spec.get("contract")
    if not isinstance(c, dict):
        raise SpecError("[contract] table missing (heads, has_invalid, return_lse, grid, block)")
    bad = set(c) - _CONTRACT_KEYS
    if bad:
        raise SpecError(f"contract: unknown key(s) {sorted(bad)} (use {sorted(_CONTRACT_KEYS)})")
    heads = c.get("heads")
    if not isinstance(heads, list) or not heads or not all(isinstance(h, int) and 1 <= h <= MAX_HEADS for h in heads):
        raise SpecError(f"contract.heads must be a list of H in 1..{MAX_HEADS}, got {heads!r}")
    for k in ("has_invalid", "return_lse"):
        if not isinstance(c.get(k), bool):
            raise SpecError(f"contract.{k} must be true or false (the configuration the ISA was compiled for)")
    if "grid" not in c or not isinstance(c["grid"], str | int | list):
        raise SpecError("contract.grid must be an expression, an int or a list of up to three")
    block = c.get("block", 256)
    if not isinstance(block, int) or block < 64 or block % 64:
        raise SpecError(f"contract.block must be a positive multiple of 64 threads, got {block!r}")
    args = spec.get("arg", [])
    if not isinstance(args, list) or len(args) != n_explicit:
        n = len(args) if isinstance(args, list) else "no"
        raise SpecError(f"arg: the kernel takes {n_explicit} explicit arguments, the spec lists {n}")
    for i, a in enumerate(args):
        if not isinstance(a, dict):
            raise SpecError(f"arg[{i}] must be a table")
        bad = set(a) - _ARG_KEYS
        if bad:
            raise SpecError(f"arg[{i}]: unknown key(s) {sorted(bad)} (use {sorted(_ARG_KEYS)})")
        kinds = [k for k in ("tensor", "zeros", "value", "layout") if k in a]
        if len(kinds) != 1:
            raise SpecError(f"arg[{i}]: give exactly one of tensor, zeros, value, layout (got {kinds or 'none'})")
        for k in ("tensor", "layout"):
            if k in a and a[k] not in CONTRACT_TENSORS:
                raise SpecError(f"arg[{i}].{k} {a[k]!r} is not a contract tensor ({', '.join(CONTRACT_TENSORS)})")
        if "zeros" in a and (not isinstance(a["zeros"], int) or a["zeros"] < 1):
            raise SpecError(f"arg[{i}].zeros must be a positive byte count")
        if "value" in a and (isinstance(a["value"], bool) or not isinstance(a["value"], int | float | str)):
            raise SpecError(f"arg[{i}].value must be a number or an expression string")
    return c


@functools.lru_cache(maxsize=8)
def _parsed(text: str) -> Any:
    """The program of an assembly text, parsed once per process (the suite resolves a kernel
    name more than once per process: the plugin's check, then the target fixture)."""
    from kernel.isa.asm import parse_program

    return parse_program(text)


@functools.lru_cache(maxsize=8)
def _decoded(text: str, block: int) -> Any:
    """The decoded kernel of an assembly text and block size, once per process (IsaKernel keeps
    no state between launches)."""
    from kernel.isa.launch import IsaKernel

    return IsaKernel(_parsed(text), block)


ConfigAsm = Callable[[int, bool, bool], Path]  # (heads, has_invalid, return_lse) -> that configuration's .s


def _asm_path(name: str, where: str, config_asm: ConfigAsm | None) -> tuple[Path, tuple[int, bool, bool] | None]:
    """The assembly file of `isa:WHERE:SPEC`: a path, or `@h{H}_i{0|1}_l{0|1}` for that configuration
    of the project's own kernel, with the configuration: config_asm(heads, has_invalid, return_lse)
    gives its file (kernel.registry passes the ISA cache's, kernel.flydsl.isa_cache: compiled in a
    subprocess on a cold cache) or raises BackendUnavailable saying why not."""
    if not where.startswith("@"):
        return Path(where), None
    m = re.fullmatch(r"h(\d+)_i([01])_l([01])", where[1:])
    if m is None or not 1 <= int(m[1]) <= MAX_HEADS:
        raise BackendUnavailable(
            f"kernel {name!r}: {where} is not a configuration of the project's kernel (@h<H>_i<0|1>_l<0|1>, H 1..{MAX_HEADS})"
        )
    config = (int(m[1]), m[2] == "1", m[3] == "1")
    if config_asm is None:
        raise BackendUnavailable(f"kernel {name!r}: the project's kernel configurations resolve through kernel.registry")
    try:
        return config_asm(*config), config
    except BackendUnavailable as err:
        raise BackendUnavailable(f"kernel {name!r}: {err}") from err


def isa_contract_backend(name: str, *, config_asm: ConfigAsm | None = None) -> Backend:
    """The Backend for `isa:PATH.s:SPEC.toml` (BackendUnavailable naming the problem); config_asm
    resolves the `isa:@CONFIG:SPEC.toml` form (see _asm_path; None: that form is refused)."""
    from kernel.isa.errors import IsaError
    from kernel.isa.launch import explicit_args

    parts = name.split(":")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise BackendUnavailable(f"kernel {name!r}: expected isa:PATH.s:SPEC.toml")
    spec_path = Path(parts[2])
    asm_path, config = _asm_path(name, parts[1], config_asm)
    try:
        spec = tomllib.loads(spec_path.read_text())
        text = asm_path.read_text()
    except OSError as err:
        raise BackendUnavailable(f"kernel {name!r}: cannot read {err.filename} ({err.strerror})") from err
    except tomllib.TOMLDecodeError as err:
        raise BackendUnavailable(f"kernel {name!r}: {spec_path} is not TOML ({err})") from err
    try:
        prog = _parsed(text)
        c = _check_spec(spec, len(explicit_args(prog)))
        kern = _decoded(text, int(c.get("block", 256)))
    except IsaError as err:
        raise BackendUnavailable(f"kernel {name!r}: {str(err).splitlines()[0]}") from err
    if config is not None and (c["heads"], c["has_invalid"], c["return_lse"]) != ([config[0]], config[1], config[2]):
        raise BackendUnavailable(
            f"kernel {name!r}: {spec_path} describes heads={c['heads']}, has_invalid={c['has_invalid']}, "
            f"return_lse={c['return_lse']}, not the configuration {parts[1][1:]}"
        )
    args = spec["arg"]
    heads = tuple(c["heads"])
    max_entries, max_rows = int(c.get("max_index_entries", 8192)), int(c.get("max_rows", 256))

    def fn(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
        info, early = begin_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
        if early is not None:
            return early
        res = out if out is not None else torch.empty(info.n_q, info.heads, 512, dtype=torch.bfloat16)
        lse = torch.empty(info.n_q, info.heads, dtype=torch.float32) if return_lse else None
        env: dict[str, Any] = {
            "q": q, "kv_cache": kv_cache, "indices": indices, "indptr": indptr, "out": res, "lse": lse,
            "n_q": info.n_q, "heads": info.heads, "n_indices": info.n_indices, "kv_rows": info.kv_rows,
            "softmax_scale": float(softmax_scale), "has_invalid": int(has_invalid), "return_lse": int(return_lse),
        }  # fmt: skip
        values: list[int | float | bytes] = []
        buffers: list[tuple[torch.Tensor, str]] = [(t, n) for n, t in env.items() if isinstance(t, torch.Tensor)]
        for i, a in enumerate(args):
            if "tensor" in a:
                t = env[a["tensor"]]
                if t is None:
                    raise SpecError(f"arg[{i}].tensor {a['tensor']!r} is absent in this call (return_lse false)")
                values.append(t.data_ptr())
            elif "zeros" in a:
                z = torch.zeros(int(a["zeros"]), dtype=torch.uint8)
                buffers.append((z, f"arg[{i}] zeros"))
                values.append(z.data_ptr())
            elif "layout" in a:
                values.append(flydsl_layout(env[a["layout"]]))
            else:
                v = a["value"]
                values.append(eval_expr(f"arg[{i}].value", v, env) if isinstance(v, str) else v)
        g = c["grid"]
        grid = [g] if not isinstance(g, list) else g
        dims = [int(eval_expr("contract.grid", d, env)) if isinstance(d, str) else int(d) for d in grid]
        dims += [1] * (3 - len(dims))
        kern.launch(tuple(dims), values, buffers, checks=os.environ.get("FLYDSL_ISA_CHECKS", "raise"))  # type: ignore[arg-type]
        return res, lse

    def extra(info: CallInfo) -> str:
        if info.has_invalid != c["has_invalid"] or info.return_lse != c["return_lse"]:
            return f"{name} was compiled for has_invalid={c['has_invalid']}, return_lse={c['return_lse']}"
        if info.n_indices > max_entries or info.n_q > max_rows:
            return f"{name} takes at most {max_entries} index entries and {max_rows} rows (interpreter speed)"
        return ""

    return Backend(
        name=name,
        fn=fn,
        profile=c.get("profile", "gfx950"),
        devices=("cpu",),
        max_heads=max(heads),
        head_counts=heads,
        accepts_out=True,
        bounded_index_reads=True,
        extra_support=extra,
        limits=(f"{asm_path.name} on the ISA interpreter, launched per {spec_path.name}",),
    )
