"""Parse one kernel's AMDGPU assembly dump into instructions, basic blocks and loops.

The ISA checks (isa_checks.py) and the pipeline model (pipeline_model.py) read the final ISA
that flydsl dumps (`FLYDSL_DEBUG_DUMP_ASM=1`, `*final_isa.s`) through this module only.

Contract:
- `parse_program(text)` returns a `Program`: the code lines of the (single) kernel in text order
  as `Instr` (mnemonic, operand strings, modifier strings, 1-based source line), split into
  basic blocks at labels and after branches, with successor edges (`s_branch`, `s_cbranch_*`,
  `s_endpgm`, fall-through) and the strongly connected components of that graph (`loops`:
  components with a cycle), plus the `.amdhsa_*` header directives.
- Register operands are decoded by `regs(operand)` into a tuple of names such as ("v4", "v5")
  for "v[4:5]"; non-register operands give ().
Nothing here knows the kernel; it is plain assembly structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BRANCH = ("s_branch", "s_cbranch_")
_ENDS = ("s_endpgm", "s_setpc_b64", "s_trap")
_REG_RANGE = re.compile(r"^-?\|?([vsa])\[(\d+):(\d+)\]\|?$")
_REG_ONE = re.compile(r"^-?\|?([vsa])(\d+)\|?$")
_SPECIAL = {
    "vcc": ("vcc_lo", "vcc_hi"),
    "exec": ("exec_lo", "exec_hi"),
    "m0": ("m0",),
    "vcc_lo": ("vcc_lo",),
    "vcc_hi": ("vcc_hi",),
    "exec_lo": ("exec_lo",),
    "exec_hi": ("exec_hi",),
    "scc": ("scc",),
}


@dataclass
class Instr:
    """One code line: `mnemonic op0, op1, ... mod0 mod1` at 1-based `line` of the dump."""

    index: int
    line: int
    mnemonic: str
    operands: list[str]
    modifiers: list[str]
    text: str
    block: int = -1

    def reg_operand(self, i: int) -> tuple[str, ...]:
        """Registers named by operand i (() when absent or not a register)."""
        return regs(self.operands[i]) if i < len(self.operands) else ()

    @property
    def defs(self) -> tuple[str, ...]:
        """Registers this instruction writes: its first operand for VALU/SALU/loads (plus the
        carry SGPR pair of v_mad_u64_u32-like forms); () for stores, branches, waits, MFMA-free
        forms without a destination."""
        m = self.mnemonic
        if not self.operands or m.startswith(
            ("s_waitcnt", "s_barrier", "s_branch", "s_cbranch", "s_endpgm", "s_nop", "s_sched", "s_setprio", "s_sleep")
        ):
            return ()
        if m.startswith(
            ("global_store", "buffer_store", "ds_write", "ds_store", "global_load_lds", "scratch_store", "s_store", "s_cmp", "v_cmpx")
        ):
            return ()
        out = regs(self.operands[0])
        if (
            m.startswith(("v_mad_u64_u32", "v_mad_i64_i32", "v_div_scale", "v_add_co", "v_sub_co", "v_addc_co", "v_subb_co"))
            and len(self.operands) > 1
        ):
            out += regs(self.operands[1])
        if m.startswith("v_cmp_") and m.endswith("_e32"):
            out = ("vcc_lo", "vcc_hi")
        return out

    def uses(self) -> tuple[str, ...]:
        """Registers this instruction reads (every operand after the destinations)."""
        n_def = 0
        d = self.defs
        if d:
            n_def = (
                2
                if self.mnemonic.startswith(
                    ("v_mad_u64_u32", "v_mad_i64_i32", "v_div_scale", "v_add_co", "v_sub_co", "v_addc_co", "v_subb_co")
                )
                else 1
            )
            if self.mnemonic.startswith("v_cmp_") and self.mnemonic.endswith("_e32"):
                n_def = 0
        out: tuple[str, ...] = ()
        for op in self.operands[n_def:]:
            out += regs(op)
        return out


@dataclass
class Block:
    """A basic block: instructions [start, end) of Program.instrs, its labels and successors."""

    index: int
    labels: list[str]
    start: int
    end: int
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)


@dataclass
class Program:
    """One kernel's code: instructions, blocks, loops (SCCs with a cycle), header directives."""

    name: str
    instrs: list[Instr]
    blocks: list[Block]
    loops: list[list[int]]
    header: dict[str, int]

    def block_instrs(self, b: int) -> list[Instr]:
        blk = self.blocks[b]
        return self.instrs[blk.start : blk.end]

    def loop_instrs(self, loop: list[int]) -> list[Instr]:
        """Instructions of a loop's blocks, in text order."""
        return [i for b in sorted(loop, key=lambda x: self.blocks[x].start) for i in self.block_instrs(b)]


def regs(operand: str) -> tuple[str, ...]:
    """Register names an operand denotes: "v[4:7]" -> (v4..v7), "s3" -> (s3,), "vcc" -> (vcc_lo, vcc_hi)."""
    op = operand.strip()
    m = _REG_RANGE.match(op)
    if m:
        kind, lo, hi = m.group(1), int(m.group(2)), int(m.group(3))
        return tuple(f"{kind}{i}" for i in range(lo, hi + 1))
    m = _REG_ONE.match(op)
    if m:
        return (f"{m.group(1)}{m.group(2)}",)
    return _SPECIAL.get(op.lstrip("-"), ())


def _split_operands(rest: str) -> tuple[list[str], list[str]]:
    """'v0, v[1:2], s3 offset:16 op_sel:[0,1]' -> (['v0', 'v[1:2]', 's3'], ['offset:16', 'op_sel:[0,1]'])."""
    rest = rest.split(";")[0].split("//")[0].strip()
    if not rest:
        return [], []
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in rest:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    # Modifiers are space-separated words after the last operand (words containing ':' that are
    # not register ranges, or bare keywords such as 'offen', 'off' is an operand).
    last = parts[-1].split()
    mods: list[str] = []
    if len(last) > 1:
        parts[-1] = last[0]
        mods = last[1:]
    ops = []
    for p in parts:
        words = p.split()
        if len(words) > 1:  # e.g. "v4 offen" inside a middle operand: not expected, keep first
            ops.append(words[0])
            mods += words[1:]
        else:
            ops.append(p)
    return ops, mods


def parse_program(text: str) -> Program:
    """The kernel in an ISA dump as a Program (see the module docstring)."""
    instrs: list[Instr] = []
    labels_at: dict[int, list[str]] = {}
    header: dict[str, int] = {}
    name = ""
    in_meta = False
    pending_labels: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        if s.startswith(".amdgpu_metadata"):
            in_meta = True
        if in_meta:
            if s.startswith(".end_amdgpu_metadata"):
                in_meta = False
            continue
        if s.startswith(".amdhsa_"):
            words = s.split()
            if len(words) == 2 and re.fullmatch(r"-?\d+", words[1]):
                header[words[0]] = int(words[1])
            continue
        if not s or s.startswith((";", "//")):
            continue
        if s.endswith(":") and " " not in s:
            label = s[:-1]
            if not label.startswith("."):
                name = name or label
            pending_labels.append(label)
            continue
        if s.startswith("."):
            continue
        mnem, _, rest = s.partition(" ")
        if mnem.startswith((";", "//")):
            continue
        ops, mods = _split_operands(rest)
        if pending_labels:
            labels_at[len(instrs)] = pending_labels
            pending_labels = []
        instrs.append(Instr(len(instrs), lineno, mnem, ops, mods, s))
    # Basic blocks.
    starts = {0} | set(labels_at)
    for i, ins in enumerate(instrs):
        if ins.mnemonic.startswith(_BRANCH) or ins.mnemonic in _ENDS:
            starts.add(i + 1)
    starts = sorted(s for s in starts if s < len(instrs))
    blocks: list[Block] = []
    label_block: dict[str, int] = {}
    for bi, st in enumerate(starts):
        end = starts[bi + 1] if bi + 1 < len(starts) else len(instrs)
        blk = Block(bi, labels_at.get(st, []), st, end)
        blocks.append(blk)
        for lab in blk.labels:
            label_block[lab] = bi
        for i in range(st, end):
            instrs[i].block = bi
    for blk in blocks:
        last = instrs[blk.end - 1]
        m = last.mnemonic
        if m == "s_branch":
            tgt = label_block.get(last.operands[0]) if last.operands else None
            blk.succs = [tgt] if tgt is not None else []
        elif m.startswith("s_cbranch_"):
            tgt = label_block.get(last.operands[0]) if last.operands else None
            blk.succs = ([tgt] if tgt is not None else []) + ([blk.index + 1] if blk.index + 1 < len(blocks) else [])
        elif m in _ENDS:
            blk.succs = []
        else:
            blk.succs = [blk.index + 1] if blk.index + 1 < len(blocks) else []
    for blk in blocks:
        for s in blk.succs:
            blocks[s].preds.append(blk.index)
    return Program(name, instrs, blocks, _cyclic_sccs(blocks), header)


def _cyclic_sccs(blocks: list[Block]) -> list[list[int]]:
    """Strongly connected components that contain a cycle (Tarjan, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(len(blocks)):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, pi = work.pop()
            if pi == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            succs = blocks[v].succs
            if pi < len(succs):
                work.append((v, pi + 1))
                w = succs[pi]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in blocks[v].succs:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


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
