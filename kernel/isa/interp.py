"""Decoder and workgroup runner.

`decode(program)` turns every instruction into a per-wave closure once (unknown opcodes,
operand forms or modifiers raise UnknownInstruction naming all of them) and, where
`kernel.isa.compiled` has one, a batched closure over a group of waves. `run_workgroups`
executes workgroups together on the lockstep scheduler (`kernel.isa.lockstep`): their waves
advance instruction by instruction in groups, a barrier holds a wave until every live wave of
its workgroup has reached it (a wave that ended no longer takes part, as on hardware), then the
workgroup's barrier epoch advances. So every cross-wave LDS exchange goes through a barrier
exactly as the program orders it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernel.isa.asm import Instr, Program, Reg
from kernel.isa.compiled import compile_batched
from kernel.isa.errors import UnknownInstruction
from kernel.isa.lockstep import run_lockstep
from kernel.isa.ops_matrix import MFMA
from kernel.isa.ops_memory import MEM
from kernel.isa.ops_scalar import SALU
from kernel.isa.ops_vector import VALU, base_name
from kernel.isa.state import EXEC, LANES, Checks, GlobalMemory, PendingOp, StackedLds, Wave, Workgroup

Fn = Callable[[Wave, Any], int | None]
SDWA_OK = {"v_cvt_pk_f32_fp8"}
_ZEROS = [0] * 64  # no load in flight (Executor.retire's slice of vpend)


@dataclass
class DecodeCtx:
    labels: dict[str, int]
    n_vgpr: int


def factory_for(ins: Instr) -> Callable[[Instr, Any], Fn]:
    """The semantics factory of an instruction's mnemonic (UnknownInstruction when none)."""
    m = ins.mnemonic
    for table in (SALU, MEM, MFMA):
        if m in table:
            return table[m]
    base, enc = base_name(m)
    if base in VALU and (enc in ("", "e32", "e64") or (enc == "sdwa" and base in SDWA_OK)):
        return VALU[base]
    raise UnknownInstruction(f"unknown opcode {m} (`{ins.text}`, #{ins.index})")


@dataclass
class Decoded:
    """Per instruction: the per-wave closure (`code`), the batched closure or None (`bcode`),
    and the VGPRs whose state (value, definedness, load in flight) the per-wave closure may
    change (`vtouch`: every VGPR its operands name; none for SALU / SOPP)."""

    program: Program
    code: list[Fn]
    n_vgpr: int
    bcode: list = field(default_factory=list)
    vtouch: list[tuple[int, ...]] = field(default_factory=list)


def vgprs_named(ins: Instr) -> tuple[int, ...]:
    """Every VGPR an instruction's operands name (sources and destinations): all a modelled
    instruction can read or write (no modelled opcode addresses VGPRs relative to M0)."""
    return tuple(j for o in ins.operands if isinstance(o, Reg) and o.file == "v" for j in range(o.index, o.index + o.count))


def decode(program: Program) -> Decoded:
    """Decode every instruction; UnknownInstruction lists every problem found."""
    d = DecodeCtx(program.labels, program.descriptor.next_free_vgpr)
    code: list[Fn] = []
    errors: list[str] = []
    for ins in program.instrs:
        try:
            for o in ins.operands:
                if isinstance(o, Reg) and o.file == "a":
                    raise UnknownInstruction(f"`{ins.text}`: AGPR operands are not modelled")
                if isinstance(o, Reg) and o.file == "v" and o.index + o.count > d.n_vgpr:
                    raise UnknownInstruction(f"`{ins.text}`: v{o.index + o.count - 1} beyond .amdhsa_next_free_vgpr {d.n_vgpr}")
            code.append(factory_for(ins)(ins, d))
        except UnknownInstruction as err:
            errors.append(str(err))
            code.append(lambda w, x: None)
    if errors:
        head = f"{len(errors)} instruction(s) the interpreter does not model:\n  "
        raise UnknownInstruction(head + "\n  ".join(errors[:40]))
    vtouch = [() if ins.mnemonic in SALU else vgprs_named(ins) for ins in program.instrs]
    return Decoded(program, code, d.n_vgpr, compile_batched(program, d, code), vtouch)


class Executor:
    """Shared context of the closures: instructions, memory, workgroup, checker sink."""

    def __init__(self, dec: Decoded, mem: GlobalMemory, wg: Workgroup, checks: Checks) -> None:
        self.instrs = dec.program.instrs
        self.code = dec.code
        self.mem = mem
        self.wg = wg
        self.checks = checks
        self.chk = checks.on  # checkers enabled (read per operand access)

    def retire(self, w: Wave, op: PendingOp) -> None:
        g = self.wg
        if op.lds_bytes is not None:
            idx = op.lds_bytes  # byte indices, or a slice of the LDS
            pend = g.lds_pending[idx]
            mine = pend == op.token
            if isinstance(idx, slice):
                pend[mine] = 0  # a view: writes through
                g.lds_epoch[idx][mine] = g.epoch
            else:
                landed = idx[mine]
                g.lds_pending[landed] = 0
                g.lds_epoch[landed] = g.epoch  # the bytes count as written when the wait covers them
            g.dma_inflight -= 1
            g.note_write(w.wid)
        if op.vgprs is not None:
            i, n = op.vgprs
            vp = w.vpend
            tok = op.token
            if vp[i : i + n].count(tok) == n:  # the usual case: no later load into any of them
                vp[i : i + n] = _ZEROS[:n]
            else:
                for j in range(i, i + n):
                    if vp[j] == tok:
                        vp[j] = 0
        if op.sgprs is not None:
            i, n = op.sgprs
            for j in range(i, i + n):
                if w.spend[j] == op.token:
                    w.spend[j] = 0


@dataclass
class WorkgroupResult:
    """Instructions executed (all waves), barriers passed, and the final waves and LDS."""

    instructions: int
    barriers: int
    waves: list[Wave]
    workgroup: Workgroup


def init_wave(
    dec: Decoded, wid: int, wgid: int | tuple[int, int, int], kernarg_addr: int, v: np.ndarray | None = None, vdef: np.ndarray | None = None
) -> Wave:
    """Initial state per the kernel descriptor: kernarg pointer and the enabled workgroup ids
    (x, then y, then z, in consecutive system SGPRs after the user SGPRs: AMDGPUUsage "Initial
    Kernel Execution State") in their SGPRs, v0 = flat work-item id (x), EXEC all ones;
    everything else undefined. `v` / `vdef`: the wave's rows of stacked register files."""
    desc = dec.program.descriptor
    if desc.workitem_id_dims != 0:
        raise UnknownInstruction("only .amdhsa_system_vgpr_workitem_id 0 (x in v0) is modelled")
    w = Wave(wid, dec.n_vgpr, v, vdef)
    if desc.kernarg_ptr_sgpr is not None:
        k = desc.kernarg_ptr_sgpr
        w.s[k], w.s[k + 1] = kernarg_addr & 0xFFFFFFFF, kernarg_addr >> 32
        w.sdef[k] = w.sdef[k + 1] = True
    ids = (wgid, 0, 0) if isinstance(wgid, int) else wgid
    nxt = desc.user_sgpr_count
    for on, val in zip((desc.workgroup_id_x_sgpr is not None, desc.workgroup_id_y, desc.workgroup_id_z), ids):
        if on:
            w.s[nxt] = int(val)
            w.sdef[nxt] = True
            nxt += 1
    w.s[EXEC] = w.s[EXEC + 1] = 0xFFFFFFFF
    w.sdef[EXEC] = w.sdef[EXEC + 1] = True
    w.set_exec_from_sgprs()
    w.v[0] = (wid * LANES + np.arange(LANES)).astype(np.uint32)
    w.vdef[0] = 0xF
    return w


def run_workgroups(
    dec: Decoded,
    wgids: list[int | tuple[int, int, int]],
    kernarg_addr: int,
    mem: GlobalMemory,
    checks: Checks,
    threads: int,
    setup: Callable[[Wave], None] | None = None,
    wg_setup: Callable[[Workgroup], None] | None = None,
) -> list[WorkgroupResult]:
    """Execute workgroups `wgids` of `threads` work-items (a multiple of 64) together, in
    lockstep; `setup(wave)` and `wg_setup(workgroup)`, when given, adjust the initial state
    (tests). Workgroups share only global memory."""
    if threads % LANES:
        raise UnknownInstruction(f"workgroup of {threads} threads is not a whole number of waves")
    per = threads // LANES
    V = np.zeros((len(wgids) * per, dec.n_vgpr, LANES), dtype=np.uint32)
    VDEF = np.zeros(V.shape, dtype=np.uint8)
    groups: list[tuple[Workgroup, list[Wave]]] = []
    waves: list[Wave] = []
    stack = StackedLds(len(wgids), dec.program.descriptor.group_segment_size)
    for g, wgid in enumerate(wgids):
        flat = wgid if isinstance(wgid, int) else wgid[0]
        wg = Workgroup(flat, stack.size, checks, stack, g)
        if wg_setup is not None:
            wg_setup(wg)
        x = Executor(dec, mem, wg, checks)
        mine = []
        for i in range(per):
            j = g * per + i
            w = init_wave(dec, i, wgid, kernarg_addr, V[j], VDEF[j])
            w.x = x
            if setup is not None:
                setup(w)
            mine.append(w)
        groups.append((wg, mine))
        waves += mine
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN, denormals) are values here, not errors
        run_lockstep(dec, waves, V, VDEF, checks.on, stack)
    return [WorkgroupResult(sum(w.executed for w in ws), wg.epoch, ws, wg) for wg, ws in groups]


def run_workgroup(
    dec: Decoded,
    wgid: int | tuple[int, int, int],
    kernarg_addr: int,
    mem: GlobalMemory,
    checks: Checks,
    threads: int,
    setup: Callable[[Wave], None] | None = None,
    wg_setup: Callable[[Workgroup], None] | None = None,
) -> WorkgroupResult:
    """Execute workgroup `wgid` alone (run_workgroups of one)."""
    return run_workgroups(dec, [wgid], kernarg_addr, mem, checks, threads, setup, wg_setup)[0]
