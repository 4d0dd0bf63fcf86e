"""A gfx950 kernel loaded from its assembly, launched on the interpreter.

    k = IsaKernel.from_asm(text)
    stats = k.launch(grid, args, buffers, checks="raise")

`args` are the kernel's by-value arguments in .amdgpu_metadata .args order (Python ints are
packed little-endian to the argument's size, Python floats as f32 (4 bytes) or f64 (8)); the
kernarg segment is built from them and its address goes to the kernarg-pointer SGPRs.
`buffers` are the CPU tensors the kernel may touch; an address outside all of them is a
checker finding. Workgroups share nothing but global memory; they run in lockstep chunks.

To run your own FlyDSL kernel: dump its ISA (FLYDSL_DEBUG_DUMP_ASM=1 FLYDSL_DUMP_DIR=... with
COMPILE_ONLY=1 ARCH=gfx950, see kernel.flydsl.isa_cache), then IsaKernel.from_asm(open(path).read())
and launch it with the raw device addresses its host wrapper would pass (tensor.data_ptr() of
CPU tensors).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from kernel.isa.asm import Program, parse_program
from kernel.isa.errors import Finding, IsaError
from kernel.isa.interp import Decoded, decode, run_workgroups
from kernel.isa.state import Checks, GlobalMemory

WORKGROUPS_TOGETHER = 16  # workgroups run in lockstep at a time (memory: their registers and LDS shadows)


@dataclass
class LaunchStats:
    """Work done by one launch: workgroups, instructions executed (all waves), seconds (wall),
    findings collected (checks='collect')."""

    workgroups: int
    instructions: int
    seconds: float
    findings: list[Finding] = field(default_factory=list)


Grid = int | tuple[int, int, int]


def grid3(grid: Grid) -> tuple[int, int, int]:
    g = (int(grid), 1, 1) if isinstance(grid, int) else tuple(int(v) for v in grid)
    if len(g) != 3 or min(g) < 1:
        raise IsaError(f"grid must be a positive int or three positive ints, got {grid!r}")
    return g  # type: ignore[return-value]


def hidden_values(grid: Grid, threads: int) -> dict[str, int]:
    """Implicit kernel arguments the interpreter provides (code object v5, AMDGPUUsage):
    block counts, group sizes (1-D workgroups), no remainders or global offsets, grid_dims;
    every other hidden argument (hostcall / printf buffers, queue pointers, ...) is 0, so a
    kernel that dereferences one is caught as an out-of-bounds access, not served."""
    gx, gy, gz = grid3(grid)
    return {
        "hidden_block_count_x": gx,
        "hidden_block_count_y": gy,
        "hidden_block_count_z": gz,
        "hidden_group_size_x": threads,
        "hidden_group_size_y": 1,
        "hidden_group_size_z": 1,
        "hidden_grid_dims": 3 if gz > 1 else 2 if gy > 1 else 1,
    }


def explicit_args(program: Program) -> list:
    return [a for a in program.descriptor.args if not a.value_kind.startswith("hidden_")]


def pack_kernargs(program: Program, args: Sequence[int | float | bytes], hidden: dict[str, int] | None = None) -> np.ndarray:
    """The kernarg segment (uint8, 16-byte multiple) for the explicit `args` in metadata order
    (bytes: the argument's exact bytes, e.g. a by-value struct), with the hidden (implicit)
    arguments from `hidden` (0 where absent)."""
    desc = program.descriptor
    explicit = explicit_args(program)
    if len(args) != len(explicit):
        raise IsaError(f"{desc.name} takes {len(explicit)} kernel arguments, got {len(args)}")
    size = max(desc.kernarg_size, max((a.offset + a.size for a in desc.args), default=0))
    buf = bytearray((size + 15) // 16 * 16)
    hidden = hidden or {}
    for a in desc.args:
        if a.value_kind.startswith("hidden_"):
            buf[a.offset : a.offset + a.size] = (int(hidden.get(a.value_kind, 0)) & ((1 << (8 * a.size)) - 1)).to_bytes(a.size, "little")
    for a, v in zip(explicit, args):
        if a.value_kind not in ("by_value", "global_buffer"):
            raise IsaError(f"kernel argument at offset {a.offset}: value kind {a.value_kind!r} not modelled")
        if isinstance(v, bytes | bytearray):
            if len(v) != a.size:
                raise IsaError(f"kernel argument at offset {a.offset} is {a.size} bytes, {len(v)} given")
            data = bytes(v)
        elif isinstance(v, float):
            data = struct.pack("<f" if a.size == 4 else "<d", v)
        else:
            data = (int(v) & ((1 << (8 * a.size)) - 1)).to_bytes(a.size, "little")
        buf[a.offset : a.offset + a.size] = data
    return np.frombuffer(bytes(buf), dtype=np.uint8).copy()


class IsaKernel:
    """A decoded kernel ready to launch."""

    def __init__(self, program: Program, threads: int | None = None) -> None:
        self.program = program
        self.decoded: Decoded = decode(program)
        self.threads = threads or 256

    @classmethod
    def from_asm(cls, text: str, threads: int | None = None) -> IsaKernel:
        prog = parse_program(text)
        if threads is None:
            threads = next(iter(prog.meta_ints(".reqd_workgroup_size")), None)
        return cls(prog, threads)

    def launch(
        self,
        grid: Grid,
        args: Sequence[int | float | bytes],
        buffers: Sequence[tuple[torch.Tensor, str]],
        checks: str | Checks = "raise",
        workgroups: Sequence[int] | None = None,
    ) -> LaunchStats:
        """Run the grid's workgroups x fastest (or the listed flat ids, x only), up to
        WORKGROUPS_TOGETHER at a time in lockstep; raise CheckFailed in 'raise' mode."""
        chk = checks if isinstance(checks, Checks) else Checks(checks)
        mem = GlobalMemory()
        for t, name in buffers:
            if t is not None:
                mem.add_tensor(t, name)
        karg = pack_kernargs(self.program, args, hidden_values(grid, self.threads))
        mem.add_array(karg.ctypes.data, karg, "kernarg segment")
        t0 = time.perf_counter()
        n = 0
        gx, gy, gz = grid3(grid)
        if workgroups is None:
            ids: list = [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]
        else:
            ids = list(workgroups)
        for c in range(0, len(ids), WORKGROUPS_TOGETHER):
            res = run_workgroups(self.decoded, ids[c : c + WORKGROUPS_TOGETHER], karg.ctypes.data, mem, chk, self.threads)
            n += sum(r.instructions for r in res)
        return LaunchStats(len(ids), n, time.perf_counter() - t0, chk.findings)
