"""The project's one reader of AMDGPU assembly text (LLVM's output for gfx950).

Used by the interpreter (kernel/isa) and by the static checks of the FlyDSL kernel's final ISA
(kernel/flydsl: compile.check_isa, isa_checks, pipeline_model).

Contract:
- `parse_program(text)` returns the (single) kernel as a `Program`: its instructions in text
  order (`Instr`: mnemonic, typed operands, modifiers, 1-based source line), its labels (the
  kernel's own name included), every `.amdhsa_* N` directive, the `.set NAME, N` symbols and the
  `.amdgpu_metadata` block. Code lines count from the kernel's label (the first label not
  starting with `.L`) to `.Lfunc_end*`; `;` and `//` start comments. An unreadable instruction
  raises AsmParseError naming its line; so does a text without a kernel.
- `Program.descriptor` (what a launch needs: LDS, registers, user SGPRs, kernarg layout) is
  built on first read and raises AsmParseError when the text lacks it or asks for something the
  interpreter does not model (scratch, dispatch pointer, ...); the static checks never read it.
- `Program.blocks` / `Program.loops`: basic blocks with successor edges and the loops (kernel.isa.cfg).
- `reg_names(op)` names the 32-bit registers an operand denotes ("v4", "s106", ...).

Syntax follows LLVM's AMDGPU assembler (AMDGPUAsmParser / llvm/test/MC/AMDGPU/gfx950*.s):
`mnemonic op, op, ... [mod[:value]] ...`; registers v5, v[4:7], s3, s[0:1], vcc, exec, m0;
source modifiers -x, |x|; literals 0x..., decimal integers, float inline constants (1.0, ...).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from functools import cached_property

from kernel.isa.cfg import Block, basic_blocks, cyclic_components
from kernel.isa.errors import AsmParseError

SPECIAL_SGPRS = {  # name -> (SGPR file index, dwords)
    "vcc": (106, 2),
    "vcc_lo": (106, 1),
    "vcc_hi": (107, 1),
    "exec": (126, 2),
    "exec_lo": (126, 1),
    "exec_hi": (127, 1),
    "m0": (124, 1),
    "flat_scratch": (102, 2),
}
FLOAT_INLINE = {
    "0.5": 0x3F000000,
    "-0.5": 0xBF000000,
    "1.0": 0x3F800000,
    "-1.0": 0xBF800000,
    "2.0": 0x40000000,
    "-2.0": 0xC0000000,
    "4.0": 0x40800000,
    "-4.0": 0xC0800000,
    "0.15915494": 0x3E22F983,
}
_SPECIAL_NAMES = {(idx, n): name for name, (idx, n) in SPECIAL_SGPRS.items()}
FLAG_MODIFIERS = {"offen", "idxen", "glc", "slc", "nt", "sc0", "sc1", "lds", "clamp", "gds"}


@dataclass(frozen=True)
class Reg:
    """A register operand: file 'v', 's' or 'a'; first index; number of dwords;
    neg / abs source modifiers."""

    file: str
    index: int
    count: int = 1
    neg: bool = False
    abs: bool = False

    def __str__(self) -> str:
        name = _SPECIAL_NAMES.get((self.index, self.count)) if self.file == "s" else None
        if name is None:
            name = f"{self.file}{self.index}" if self.count == 1 else f"{self.file}[{self.index}:{self.index + self.count - 1}]"
        if self.abs:
            name = f"|{name}|"
        return f"-{name}" if self.neg else name


@dataclass(frozen=True)
class Imm:
    """An immediate: 32-bit pattern `bits` (float inline constants as f32 bits), the integer
    value `value` (signed, for inline integers), literal=True when it is not an inline constant."""

    bits: int
    value: int
    literal: bool
    is_float: bool = False
    neg: bool = False

    def __str__(self) -> str:
        if self.is_float:
            return repr(struct.unpack("<f", struct.pack("<I", self.bits))[0])
        return hex(self.bits) if self.literal else str(self.value)


@dataclass(frozen=True)
class Label:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Special:
    """A bare keyword operand ('off')."""

    name: str

    def __str__(self) -> str:
        return self.name


Operand = Reg | Imm | Label | Special
OFF = Special("off")


def reg_names(op: Operand | None) -> tuple[str, ...]:
    """The 32-bit registers an operand denotes: v[4:5] -> ("v4", "v5"), vcc -> ("s106", "s107");
    () for anything but a register."""
    if not isinstance(op, Reg):
        return ()
    return tuple(f"{op.file}{op.index + k}" for k in range(op.count))


def imm_bits(op: Operand | None) -> int | None:
    """The 32-bit pattern of an immediate operand (f32 bits for a float), None for anything else."""
    return op.bits if isinstance(op, Imm) else None


@dataclass
class Instr:
    """One instruction: index in the program, source line, mnemonic, operands, modifiers
    (name -> value string or True), and the text as written."""

    index: int
    line: int
    mnemonic: str
    operands: list[Operand]
    modifiers: dict[str, object]
    text: str


@dataclass
class KernArg:
    offset: int
    size: int
    value_kind: str


@dataclass
class KernelDescriptor:
    """What the launch needs from the descriptor; sizes in bytes, counts in registers."""

    name: str
    group_segment_size: int
    private_segment_size: int
    kernarg_size: int
    user_sgpr_count: int
    kernarg_ptr_sgpr: int | None  # first SGPR of the kernarg segment pointer, when enabled
    workgroup_id_x_sgpr: int | None
    workgroup_id_y: bool
    workgroup_id_z: bool
    workitem_id_dims: int  # .amdhsa_system_vgpr_workitem_id: 0 = x only in v0
    next_free_vgpr: int
    next_free_sgpr: int
    accum_offset: int
    wavefront_size: int
    args: list[KernArg]
    directives: dict[str, int] = field(default_factory=dict)


@dataclass
class Program:
    """A parsed kernel (module docstring): instructions in text order, label -> instruction
    index, `.amdhsa_*` directives, `.set` symbols, the metadata block's text."""

    name: str
    instrs: list[Instr]
    labels: dict[str, int]
    directives: dict[str, int]
    symbols: dict[str, int]
    metadata: str

    def opcodes(self) -> list[str]:
        return sorted({i.mnemonic for i in self.instrs})

    def meta_int(self, key: str) -> int | None:
        """The first integer `key: N` of the metadata block (None when absent)."""
        m = re.search(rf"^[\s-]*{re.escape(key)}:\s+(-?\d+)\s*$", self.metadata, re.MULTILINE)
        return int(m.group(1)) if m else None

    def meta_ints(self, key: str) -> list[int]:
        """The integers of the first YAML list `key:` / `- N` ... of the metadata block ([] when absent)."""
        m = re.search(rf"^[\s-]*{re.escape(key)}:\s*\n((?:\s*-\s*-?\d+\s*\n?)+)", self.metadata, re.MULTILINE)
        return [int(x) for x in re.findall(r"-?\d+", m.group(1))] if m else []

    @cached_property
    def descriptor(self) -> KernelDescriptor:
        """What a launch needs (AsmParseError when the text lacks it or the interpreter does not
        model what it enables)."""
        return _descriptor(self)

    @cached_property
    def blocks(self) -> list[Block]:
        """Basic blocks in text order with successor and predecessor edges (kernel.isa.cfg)."""
        return basic_blocks(self.instrs, self.labels)

    @cached_property
    def loops(self) -> list[list[int]]:
        """Block indices of each strongly connected component with a cycle."""
        return cyclic_components(self.blocks)

    @cached_property
    def block_of(self) -> list[int]:
        """Instruction index -> its block's index."""
        out = [0] * len(self.instrs)
        for blk in self.blocks:
            out[blk.start : blk.end] = [blk.index] * (blk.end - blk.start)
        return out

    def block_instrs(self, b: int) -> list[Instr]:
        blk = self.blocks[b]
        return self.instrs[blk.start : blk.end]

    def loop_instrs(self, loop: list[int]) -> list[Instr]:
        """Instructions of a loop's blocks, in text order."""
        return [i for b in sorted(loop, key=lambda x: self.blocks[x].start) for i in self.block_instrs(b)]


_REG_RE = re.compile(r"^([vsa])(?:(\d+)|\[(\d+):(\d+)\])$")
_MOD_KV_RE = re.compile(r"(?<![\[\w])([a-z_][a-z_0-9]*):(\[[^\]]*\]|swizzle\([^)]*\)|[^\s,]+)")


def _parse_int(text: str) -> int:
    t = text.strip()
    neg = t.startswith("-")
    if neg:
        t = t[1:]
    v = int(t, 16) if t.lower().startswith("0x") else int(t, 10)
    return -v if neg else v


def parse_operand(tok: str) -> Operand:
    """One operand token -> Reg / Imm / Label / Special (AsmParseError when unreadable)."""
    t = tok.strip()
    neg = False
    ab = False
    if t.startswith("-") and not re.match(r"^-\d", t) and not re.match(r"^-0x", t):
        neg, t = True, t[1:]
    if t.startswith("|") and t.endswith("|"):
        ab, t = True, t[1:-1]
    if t.startswith("-") and re.match(r"^-[vs]", t):
        neg, t = True, t[1:]
    m = _REG_RE.match(t)
    if m:
        f = m.group(1)
        if m.group(2) is not None:
            return Reg(f, int(m.group(2)), 1, neg, ab)
        lo, hi = int(m.group(3)), int(m.group(4))
        return Reg(f, lo, hi - lo + 1, neg, ab)
    if t in SPECIAL_SGPRS:
        idx, n = SPECIAL_SGPRS[t]
        return Reg("s", idx, n, neg, ab)
    if t == "off":
        return Special("off")
    if (t.startswith(".L") or re.match(r"^[A-Za-z_.][\w.$]*$", t)) and not neg and not ab:
        return Label(t)
    if t in FLOAT_INLINE:
        bits = FLOAT_INLINE[t]
        return Imm(bits ^ (0x80000000 if neg else 0), 0, False, True)
    if re.match(r"^-?(0x[0-9a-fA-F]+|\d+)$", t):
        v = _parse_int(t)
        if neg:
            v = -v
        inline = -16 <= v <= 64
        return Imm(v & 0xFFFFFFFF, v, not inline)
    if re.match(r"^-?\d+\.\d+(e-?\d+)?$", t):
        bits = struct.unpack("<I", struct.pack("<f", float(t)))[0]
        return Imm(bits, 0, t not in FLOAT_INLINE, True)
    raise AsmParseError(f"unreadable operand {tok!r}")


def _split_commas(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur or parts:
        parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _parse_waitcnt(rest: str, text: str) -> dict[str, object]:
    """s_waitcnt operands -> {'vmcnt': n, 'expcnt': n, 'lgkmcnt': n} (absent counters: no wait)."""
    out: dict[str, object] = {}
    r = rest.strip()
    if re.match(r"^(0x[0-9a-fA-F]+|\d+)$", r):
        v = _parse_int(r)  # gfx9 SIMM16: vmcnt[3:0] | expcnt[6:4] | lgkmcnt[11:8] | vmcnt_hi[15:14]
        out["vmcnt"] = (v & 0xF) | ((v >> 14) & 3) << 4
        out["expcnt"] = (v >> 4) & 7
        out["lgkmcnt"] = (v >> 8) & 0xF
        return out
    for part in re.split(r"[\s&,]+", r):
        if not part:
            continue
        m = re.match(r"^(vmcnt|expcnt|lgkmcnt)\((\d+)\)$", part)
        if not m:
            raise AsmParseError(f"unreadable s_waitcnt operand {part!r} in `{text}`")
        out[m.group(1)] = int(m.group(2))
    return out


def parse_instruction(text: str, index: int = 0, line: int = 0) -> Instr:
    """`mnemonic operands modifiers` -> Instr."""
    s = text.strip()
    head, _, rest = s.partition(" ")
    mnemonic = head.strip()
    modifiers: dict[str, object] = {}

    def _kv(m: re.Match) -> str:
        key, val = m.group(1), m.group(2)
        if key in ("s", "v", "a"):
            return m.group(0)
        modifiers[key] = val
        return " "

    if mnemonic == "s_waitcnt":
        return Instr(index, line, mnemonic, [], _parse_waitcnt(rest, s), s)
    rest = _MOD_KV_RE.sub(_kv, rest)
    ops: list[Operand] = []
    for part in _split_commas(rest):
        toks = part.split()
        for j, tk in enumerate(toks):
            if tk in FLAG_MODIFIERS:
                modifiers[tk] = True
            elif j == 0:
                ops.append(parse_operand(tk))
            else:
                raise AsmParseError(f"unreadable token {tk!r} in `{s}`")
    return Instr(index, line, mnemonic, ops, modifiers, s)


def modifier_list(value: object, n: int) -> list[int]:
    """'[0,1,0]' -> [0, 1, 0] (length-checked); AsmParseError otherwise."""
    if not isinstance(value, str) or not (value.startswith("[") and value.endswith("]")):
        raise AsmParseError(f"modifier value {value!r} is not a list")
    vals = [int(x) for x in value[1:-1].split(",")]
    if len(vals) != n:
        raise AsmParseError(f"modifier list {value!r} should have {n} entries")
    return vals


def _parse_args(meta: str) -> list[KernArg]:
    args: list[KernArg] = []
    m = re.search(r"^\s*\.args:\s*$", meta, re.MULTILINE)
    if not m:
        return args
    block = meta[m.end() :]
    cur: dict[str, str] = {}
    for line in block.splitlines():
        s = line.strip()
        if not s:
            continue
        if not s.startswith(("- .", ".")) or (not s.startswith("- ") and not line.startswith(" " * 8)):
            break
        if s.startswith("- "):
            if cur:
                args.append(KernArg(int(cur[".offset"]), int(cur[".size"]), cur.get(".value_kind", "")))
            cur = {}
            s = s[2:]
        k, _, v = s.partition(":")
        cur[k.strip()] = v.strip()
    if cur:
        args.append(KernArg(int(cur[".offset"]), int(cur[".size"]), cur.get(".value_kind", "")))
    return args


def _int_or_none(text: str) -> int | None:
    try:
        return _parse_int(text)
    except ValueError:
        return None


def parse_program(text: str) -> Program:
    """Parse the (single) kernel of an LLVM AMDGPU assembly file (module docstring)."""
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    directives: dict[str, int] = {}
    symbols: dict[str, int] = {}
    meta_lines: list[str] = []
    name = None
    in_func = False
    in_meta = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        s = raw.split(";", 1)[0].split("//", 1)[0].strip()
        if s.startswith(".amdgpu_metadata"):
            in_meta = True
        elif s.startswith(".end_amdgpu_metadata"):
            in_meta = False
        elif in_meta:
            meta_lines.append(raw)
        elif not s:
            continue
        elif s.endswith(":") and not any(c.isspace() for c in s):
            lab = s[:-1]
            if name is None and not lab.startswith(".L"):
                name, in_func = lab, True
            if lab.startswith(".Lfunc_end"):
                in_func = False
            elif in_func:
                labels[lab] = len(instrs)
        elif s.startswith("."):
            if s.startswith((".amdhsa_", ".set")):
                words = s.replace(",", " ").split()
                if words[0] == ".set" and len(words) == 3 and (v := _int_or_none(words[2])) is not None:
                    symbols[words[1]] = v
                elif words[0].startswith(".amdhsa_") and len(words) == 2 and (v := _int_or_none(words[1])) is not None:
                    directives[words[0]] = v
        elif in_func:
            try:
                instrs.append(parse_instruction(s, len(instrs), lineno))
            except AsmParseError as err:
                raise AsmParseError(f"line {lineno}: {err}" + ("" if s in str(err) else f" in `{s}`")) from None
    if name is None or not instrs:
        raise AsmParseError("no kernel function found in the assembly text")
    return Program(name, instrs, labels, directives, symbols, "\n".join(meta_lines))


def _descriptor(prog: Program) -> KernelDescriptor:
    """The launch's view of the kernel descriptor and metadata (Program.descriptor)."""
    directives = prog.directives
    for key in (".amdhsa_group_segment_fixed_size", ".amdhsa_next_free_vgpr", ".amdhsa_next_free_sgpr"):
        if key not in directives:
            raise AsmParseError(f"kernel descriptor lacks {key}")
    user_count = directives.get(".amdhsa_user_sgpr_count", 0)
    nxt = 0
    if directives.get(".amdhsa_user_sgpr_private_segment_buffer", 0):
        nxt += 4
    for key in (".amdhsa_user_sgpr_dispatch_ptr", ".amdhsa_user_sgpr_queue_ptr"):
        if directives.get(key, 0):
            raise AsmParseError(f"{key} is enabled; the interpreter provides only the kernarg pointer")
    kptr = None
    if directives.get(".amdhsa_user_sgpr_kernarg_segment_ptr", 0):
        kptr = nxt
        nxt += 2
    for key in (
        ".amdhsa_user_sgpr_dispatch_id",
        ".amdhsa_user_sgpr_private_segment_size",
        ".amdhsa_user_sgpr_kernarg_preload_length",
        ".amdhsa_enable_private_segment",
        ".amdhsa_system_sgpr_workgroup_info",
    ):
        if directives.get(key, 0):
            raise AsmParseError(f"{key} is enabled; not modelled by the interpreter")
    if nxt != user_count:
        raise AsmParseError(f"user SGPR count {user_count} does not match the enabled user SGPRs ({nxt})")
    wg_x = user_count if directives.get(".amdhsa_system_sgpr_workgroup_id_x", 0) else None
    wg_y = bool(directives.get(".amdhsa_system_sgpr_workgroup_id_y", 0))
    wg_z = bool(directives.get(".amdhsa_system_sgpr_workgroup_id_z", 0))
    wsize = prog.meta_int(".wavefront_size") or 64
    kernarg_size = prog.meta_int(".kernarg_segment_size")
    if kernarg_size is None:
        kernarg_size = directives.get(".amdhsa_kernarg_size", 0)
    desc = KernelDescriptor(
        name=prog.name,
        group_segment_size=directives[".amdhsa_group_segment_fixed_size"],
        private_segment_size=directives.get(".amdhsa_private_segment_fixed_size", 0),
        kernarg_size=kernarg_size,
        user_sgpr_count=user_count,
        kernarg_ptr_sgpr=kptr,
        workgroup_id_x_sgpr=wg_x,
        workgroup_id_y=wg_y,
        workgroup_id_z=wg_z,
        workitem_id_dims=directives.get(".amdhsa_system_vgpr_workitem_id", 0),
        next_free_vgpr=directives[".amdhsa_next_free_vgpr"],
        next_free_sgpr=directives[".amdhsa_next_free_sgpr"],
        accum_offset=directives.get(".amdhsa_accum_offset", directives[".amdhsa_next_free_vgpr"]),
        wavefront_size=wsize,
        args=_parse_args(prog.metadata),
        directives=directives,
    )
    if desc.private_segment_size:
        raise AsmParseError("the kernel uses scratch (private segment); not modelled")
    return desc
