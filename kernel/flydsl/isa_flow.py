"""Register dataflow and loop iterations of a parsed kernel, as the ISA checks model them.

The ISA checks (isa_checks.py) and the pipeline model (pipeline_model.py) read the final ISA
through the one assembly reader, kernel.isa.asm (`parse_program`: instructions with typed
operands, labels, directives, basic blocks and loops). This module adds what only they use:

- `defs(ins)` / `uses(ins)`: the 32-bit registers an instruction writes / reads, by operand
  position (kernel.isa.asm.reg_names): the first operand is the destination of VALU, SALU and
  load instructions (the first two for the carry-out forms such as v_mad_u64_u32), none for
  stores, LDS DMAs, compares into SCC, branches and waits; a VOPC (v_cmp_*_e32) writes VCC.
  This is an approximation good for the kernel's code (register names, not bytes or lanes).
- `loop_header(prog, loop)` / `iteration_paths(prog, loop)`: a loop's entry block and every
  block path of one full iteration.
"""

from __future__ import annotations

from kernel.isa.asm import SPECIAL_SGPRS, Instr, Program, Reg, reg_names

_NO_DEFS = ("s_waitcnt", "s_barrier", "s_branch", "s_cbranch", "s_endpgm", "s_nop", "s_sched", "s_setprio", "s_sleep")
_NO_DEST = ("global_store", "buffer_store", "ds_write", "ds_store", "global_load_lds", "scratch_store", "s_store", "s_cmp", "v_cmpx")
_TWO_DESTS = ("v_mad_u64_u32", "v_mad_i64_i32", "v_div_scale", "v_add_co", "v_sub_co", "v_addc_co", "v_subb_co")
VCC = reg_names(Reg("s", *SPECIAL_SGPRS["vcc"]))


def _is_vopc(mnemonic: str) -> bool:
    return mnemonic.startswith("v_cmp_") and mnemonic.endswith("_e32")


def defs(ins: Instr) -> tuple[str, ...]:
    """Registers `ins` writes (module docstring)."""
    m = ins.mnemonic
    if not ins.operands or m.startswith(_NO_DEFS) or m.startswith(_NO_DEST):
        return ()
    if _is_vopc(m):
        return VCC
    out = reg_names(ins.operands[0])
    if m.startswith(_TWO_DESTS) and len(ins.operands) > 1:
        out += reg_names(ins.operands[1])
    return out


def uses(ins: Instr) -> tuple[str, ...]:
    """Registers `ins` reads: every operand after its destinations."""
    n_dest = 0
    if defs(ins) and not _is_vopc(ins.mnemonic):
        n_dest = 2 if ins.mnemonic.startswith(_TWO_DESTS) else 1
    return tuple(r for op in ins.operands[n_dest:] for r in reg_names(op))


def loop_header(prog: Program, loop: list[int]) -> int:
    """The loop's entry block: the one with a predecessor outside the loop."""
    members = set(loop)
    entries = [b for b in loop if any(p not in members for p in prog.blocks[b].preds)]
    if len(entries) != 1:
        raise ValueError(f"loop {loop} has {len(entries)} entry blocks")
    return entries[0]


def iteration_paths(prog: Program, loop: list[int], limit: int = 256) -> list[list[int]]:
    """Every block path of one full iteration: header -> ... -> a block with an edge back to the
    header, inside the loop (the loop must have no inner cycle other than through its header)."""
    head = loop_header(prog, loop)
    members = set(loop)
    paths: list[list[int]] = []
    work = [[head]]
    while work:
        path = work.pop()
        for s in prog.blocks[path[-1]].succs:
            if s == head:
                paths.append(path)
            elif s in members:
                if s in path:
                    raise ValueError("inner cycle in loop")
                work.append(path + [s])
        if len(paths) > limit:
            raise ValueError("too many iteration paths")
    return paths
