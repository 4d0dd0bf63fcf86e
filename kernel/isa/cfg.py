"""Control flow of a parsed kernel (kernel.isa.asm.Program.blocks / .loops).

Contract:
- `basic_blocks(instrs, labels)`: the instructions split at labels and after every branch or
  end (`s_branch`, `s_cbranch_*`, `s_endpgm`, `s_setpc_b64`, `s_trap`), in text order, with
  successor edges (the branch target's block, the fall-through block after a conditional branch
  or a non-branch) and the matching predecessor edges. A branch to a label the kernel does not
  hold has no edge.
- `cyclic_components(blocks)`: the strongly connected components that contain a cycle (the
  loops), each as sorted block indices, in the order Tarjan's algorithm closes them.
Nothing here knows the kernel or the interpreter; it is plain assembly structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Instr(Protocol):
    """What the control flow reads of an instruction (kernel.isa.asm.Instr has it): the
    mnemonic, and the operands, of which a branch's first is a label with a `name`."""

    mnemonic: str
    operands: list


BRANCHES = ("s_branch", "s_cbranch_")
ENDS = ("s_endpgm", "s_setpc_b64", "s_trap")


@dataclass
class Block:
    """A basic block: instructions [start, end) of Program.instrs, its labels and edges."""

    index: int
    labels: list[str]
    start: int
    end: int
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)


def _target(ins: Instr) -> str:
    return getattr(ins.operands[0], "name", "") if ins.operands else ""


def basic_blocks(instrs: Sequence[Instr], labels: dict[str, int]) -> list[Block]:
    """Basic blocks with their edges (module docstring)."""
    labels_at: dict[int, list[str]] = {}
    for name, at in labels.items():
        labels_at.setdefault(at, []).append(name)
    starts = {0} | set(labels_at)
    for i, ins in enumerate(instrs):
        if ins.mnemonic.startswith(BRANCHES) or ins.mnemonic in ENDS:
            starts.add(i + 1)
    ordered = sorted(s for s in starts if s < len(instrs))
    ends = [*ordered[1:], len(instrs)]
    blocks = [Block(bi, labels_at.get(st, []), st, end) for bi, (st, end) in enumerate(zip(ordered, ends))]
    label_block = {lab: blk.index for blk in blocks for lab in blk.labels}
    for blk in blocks:
        last = instrs[blk.end - 1]
        m = last.mnemonic
        after = [blk.index + 1] if blk.index + 1 < len(blocks) else []
        target = label_block.get(_target(last))
        if m == "s_branch":
            blk.succs = [target] if target is not None else []
        elif m.startswith("s_cbranch_"):
            blk.succs = ([target] if target is not None else []) + after
        elif m in ENDS:
            blk.succs = []
        else:
            blk.succs = after
    for blk in blocks:
        for s in blk.succs:
            blocks[s].preds.append(blk.index)
    return blocks


def cyclic_components(blocks: Sequence[Block]) -> list[list[int]]:
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
