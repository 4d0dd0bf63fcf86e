"""Lockstep scheduler: the waves of one or more workgroups advance together.

All waves of a launch chunk live in one stacked register file (VGPRs and their definedness,
[waves, n_vgpr, 64]); each Wave's `v` / `vdef` are its rows (views). A *group* is a run of
consecutive waves at the same program counter. It executes instruction by instruction: an
instruction with a batched form (`kernel.isa.compiled`) runs once on the group's [k, 64] lane
arrays; any other runs wave by wave through the per-wave closure. The group ends where its
waves part (different branch targets, a barrier, the end of the program) or where it reaches
the pc of a runnable wave ahead of it (so waves that skipped ahead are picked up again).

Order: the scheduler always runs the runnable waves of lowest pc first; a barrier is released
once no wave can run (every live wave of every workgroup waits or has ended), which advances
the barrier epoch of each workgroup with waiting waves. A group stops at the pc of the nearest
runnable wave ahead of it (to run on together from there); waves at the same pc that are not
consecutive run as separate groups, one after the other. Within a barrier epoch the waves of a
workgroup therefore interleave instruction by instruction (in wave order at each pc), which a
race-free program cannot observe; a racy one gets the checkers' reports (lds_race,
dma_before_wait) for the order the interleaving produces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernel.isa.errors import IsaError
from kernel.isa.ops_scalar import BARRIER
from kernel.isa.state import StackedLds, Wave

MAX_INSTRUCTIONS_PER_WAVE = 20_000_000


class Batch:
    """The lockstep context a batched closure runs on: waves[k], their stacked registers
    V / VDEF ([k, n_vgpr, 64] views), the pc being executed, and caches:
    `ok` = VGPRs known fully defined with no load in flight on every wave of the group
    (a per-wave instruction removes the VGPRs it names), `exec_mask()` = None when
    every wave's EXEC is all ones, else the stacked bool [k, 64] EXEC."""

    def __init__(self, waves: list[Wave], V: np.ndarray, VDEF: np.ndarray, chk: bool, stack: StackedLds | None = None) -> None:
        self.waves = waves
        self.stack = stack  # the workgroups' stacked LDS; wave i's slot is slots[i]
        self.slots = np.array([w.x.wg.slot for w in waves]) if stack is not None else None
        self.V = V
        self.VDEF = VDEF
        self.k = len(waves)
        self.shape = (self.k, V.shape[2])
        self.chk = chk
        self.pc = 0
        self.ok: set[int] = set()
        self.exec_dirty = True
        self._exec: np.ndarray | None = None

    def exec_mask(self) -> np.ndarray | None:
        if self.exec_dirty:
            self.exec_dirty = False
            if all(w.exec_all for w in self.waves):
                self._exec = None
            else:
                self._exec = np.array([w.exec for w in self.waves])
        return self._exec

    def at(self, w: Wave) -> Wave:
        """`w` with its pc set to the instruction being executed (for a checker's report)."""
        w.pc = self.pc
        return w


def run_group(
    code: list[Callable[[Wave, Any], int | None]],
    bcode: list[Callable[[Batch], None] | None],
    vtouch: list[tuple[int, ...]],
    instrs: list,
    b: Batch,
    stop: int,
) -> None:
    """Execute the group's waves (all at one pc, none waiting or done) until they part, one
    waits at a barrier or ends, or the pc reaches `stop` (> the starting pc)."""
    ws = b.waves
    for w in ws:
        w.batch = b
    pc = ws[0].pc
    n_code = len(code)
    n = 0
    try:
        while True:
            if pc >= n_code:
                raise IsaError(f"wave {ws[0].wid} ran past the last instruction")
            bf = bcode[pc]
            n += 1
            if bf is not None:
                b.pc = pc
                bf(b)
                pc += 1
            else:
                f = code[pc]
                touched = vtouch[pc]
                if touched:
                    b.ok.difference_update(touched)
                rs = []
                for w in ws:
                    w.pc = pc
                    rs.append(f(w, w.x))
                r = rs[0]
                if r is not None and r < 0 or rs.count(r) != len(rs):
                    for w, r in zip(ws, rs):
                        _after(w, pc, r)
                    return
                pc = pc + 1 if r is None else r
            if pc >= stop:
                break
            if n > MAX_INSTRUCTIONS_PER_WAVE:
                raise IsaError(f"wave {ws[0].wid} executed more than {MAX_INSTRUCTIONS_PER_WAVE} instructions")
        for w in ws:
            w.pc = pc
    except IsaError:
        raise
    except Exception as err:  # an interpreter bug: name the instruction
        ins = instrs[pc] if pc < len(instrs) else None
        raise IsaError(f"internal error at #{pc} `{ins.text if ins else '?'}` (wave {ws[0].wid}): {type(err).__name__}: {err}") from err
    finally:
        for w in ws:
            w.executed += n
            w.batch = None


def _after(w: Wave, pc: int, r: int | None) -> None:
    """Apply one wave's control result at the end of a group."""
    if r is None:
        w.pc = pc + 1
    elif r >= 0:
        w.pc = r
    elif r == BARRIER:
        w.pc = pc + 1
        w.at_barrier = True
    else:  # ENDPGM
        x = w.x
        while w.vm:
            x.retire(w, w.vm.popleft())
        while w.lgkm:
            x.retire(w, w.lgkm.popleft())
        w.done = True


def run_lockstep(dec: Any, waves: list[Wave], V: np.ndarray, VDEF: np.ndarray, chk: bool, stack: StackedLds | None = None) -> None:
    """Run `waves` (each with .x set; V / VDEF their stacked registers, in the same order;
    `stack` their workgroups' stacked LDS) to the end of the program, barrier epochs advancing
    per workgroup as documented above."""
    code, bcode, vtouch, instrs = dec.code, dec.bcode, dec.vtouch, dec.program.instrs
    nw = len(waves)
    while True:
        run = [i for i in range(nw) if not (waves[i].done or waves[i].at_barrier)]
        if not run:
            waiting = [w for w in waves if w.at_barrier and not w.done]
            if not waiting:
                return
            for wg in {id(w.x.wg): w.x.wg for w in waiting}.values():
                wg.epoch += 1
            for w in waiting:
                w.at_barrier = False
            continue
        pc = min(waves[i].pc for i in run)
        lo = next(i for i in run if waves[i].pc == pc)
        hi = lo + 1
        while hi < nw and not (waves[hi].done or waves[hi].at_barrier) and waves[hi].pc == pc:
            hi += 1
        ahead = [waves[i].pc for i in run if waves[i].pc > pc]
        b = Batch(waves[lo:hi], V[lo:hi], VDEF[lo:hi], chk, stack)
        run_group(code, bcode, vtouch, instrs, b, min(ahead) if ahead else 1 << 62)
