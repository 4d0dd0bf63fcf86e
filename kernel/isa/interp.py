"""Decoder and workgroup scheduler.

`decode(program)` turns every instruction into a closure once (unknown opcodes, operand forms
or modifiers raise UnknownInstruction naming all of them). `run_workgroup` executes one
workgroup: its waves run one at a time, each until it reaches s_barrier or s_endpgm; when every
live wave waits at the barrier, the barrier epoch advances and they continue (a wave that ended
no longer takes part, as on hardware). So every cross-wave LDS exchange goes through a barrier
exactly as the program orders it, and the checkers see each wave's accesses in program order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel.isa.asm import Instr, Program, Reg
from kernel.isa.errors import IsaError, UnknownInstruction
from kernel.isa.ops_matrix import MFMA
from kernel.isa.ops_memory import MEM
from kernel.isa.ops_scalar import BARRIER, SALU
from kernel.isa.ops_vector import VALU, base_name
from kernel.isa.state import EXEC, LANES, Checks, GlobalMemory, PendingOp, Wave, Workgroup

Fn = Callable[[Wave, Any], int | None]
MAX_INSTRUCTIONS_PER_WAVE = 20_000_000
SDWA_OK = {"v_cvt_pk_f32_fp8"}


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


def implemented_opcodes() -> list[str]:
    return sorted(set(SALU) | set(MEM) | set(MFMA) | set(VALU))


@dataclass
class Decoded:
    program: Program
    code: list[Fn]
    n_vgpr: int


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
    return Decoded(program, code, d.n_vgpr)


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
            for j in range(i, i + n):
                if vp[j] == op.token:
                    vp[j] = 0
        if op.sgprs is not None:
            i, n = op.sgprs
            for j in range(i, i + n):
                if w.spend[j] == op.token:
                    w.spend[j] = 0

    def run_wave(self, w: Wave) -> None:
        code = self.code
        n_code = len(code)
        pc = w.pc
        n = 0
        try:
            while True:
                if pc >= n_code:
                    raise IsaError(f"wave {w.wid} ran past the last instruction")
                w.pc = pc
                r = code[pc](w, self)
                n += 1
                if r is None:
                    pc += 1
                elif r >= 0:
                    pc = r
                elif r == BARRIER:
                    w.pc = pc + 1
                    w.at_barrier = True
                    break
                else:  # ENDPGM
                    while w.vm:
                        self.retire(w, w.vm.popleft())
                    while w.lgkm:
                        self.retire(w, w.lgkm.popleft())
                    w.done = True
                    break
                if n > MAX_INSTRUCTIONS_PER_WAVE:
                    raise IsaError(f"wave {w.wid} executed more than {MAX_INSTRUCTIONS_PER_WAVE} instructions")
        except IsaError:
            raise
        except Exception as err:  # an interpreter bug: name the instruction
            ins = self.instrs[w.pc]
            raise IsaError(f"internal error at #{w.pc} `{ins.text}` (wave {w.wid}): {type(err).__name__}: {err}") from err
        finally:
            w.executed += n


@dataclass
class WorkgroupResult:
    """Instructions executed (all waves), barriers passed, and the final waves and LDS."""

    instructions: int
    barriers: int
    waves: list[Wave]
    workgroup: Workgroup


def init_wave(dec: Decoded, wid: int, wgid: int | tuple[int, int, int], kernarg_addr: int) -> Wave:
    """Initial state per the kernel descriptor: kernarg pointer and the enabled workgroup ids
    (x, then y, then z, in consecutive system SGPRs after the user SGPRs: AMDGPUUsage "Initial
    Kernel Execution State") in their SGPRs, v0 = flat work-item id (x), EXEC all ones;
    everything else undefined."""
    desc = dec.program.descriptor
    if desc.workitem_id_dims != 0:
        raise UnknownInstruction("only .amdhsa_system_vgpr_workitem_id 0 (x in v0) is modelled")
    w = Wave(wid, dec.n_vgpr)
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
    """Execute workgroup `wgid` of `threads` work-items (a multiple of 64); `setup(wave)` and
    `wg_setup(workgroup)`, when given, adjust the initial state (tests)."""
    if threads % LANES:
        raise UnknownInstruction(f"workgroup of {threads} threads is not a whole number of waves")
    flat = wgid if isinstance(wgid, int) else wgid[0]
    wg = Workgroup(flat, dec.program.descriptor.group_segment_size, checks)
    if wg_setup is not None:
        wg_setup(wg)
    x = Executor(dec, mem, wg, checks)
    waves = [init_wave(dec, i, wgid, kernarg_addr) for i in range(threads // LANES)]
    if setup is not None:
        for w in waves:
            setup(w)
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN, denormals) are values here, not errors
        while True:
            live = [w for w in waves if not w.done]
            if not live:
                break
            for w in live:
                x.run_wave(w)
            waiting = [w for w in waves if not w.done and w.at_barrier]
            if waiting:
                wg.epoch += 1
                for w in waiting:
                    w.at_barrier = False
    return WorkgroupResult(sum(w.executed for w in waves), wg.epoch, waves, wg)
