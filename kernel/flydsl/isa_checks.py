"""Static checks of the FlyDSL gfx950 kernel's final ISA that pin its algorithm.

`check_program(prog)` takes one parsed dump (kernel.isa.asm.parse_program), reads the configuration
from the kernel's symbol name (sparse_mla_fp8ds_gfx950_h{H}_i{0|1}_l{0|1}) and returns a list of
`Failure(check, message)`; an empty list means every check passed. The check ids (used by the
mutation self-test, isa_edits.py, and the table in docs/reference/flydsl-checks.md):

counts.tile      exact per-tile counts on every path through the tile loop (isa_expect)
counts.kernel    exact per-kernel counts (isa_expect)
kv64.mul         the record offset: every use of 656 is a v_mad_u64_u32 (64-bit multiply-add),
                 never a 32/24-bit multiply; 8 of them in the kernel, {2, 4} per tile path
kv64.masked      each record address feeds a v_cndmask_b32 pair (masked -> the zero record)
kv64.form        every LDS DMA and KV (rope) load addresses with a 64-bit VGPR pair and `off`
kv64.buffer      buffer instructions are loads through the one index descriptor (word 3 0x27000)
sync.m0          an M0 write before every LDS DMA (since the previous DMA of its block)
sync.barrier     no LDS operation outstanding (lgkmcnt) at any s_barrier
sync.loop_top    no VMEM operation outstanding (vmcnt(0)) at the tile loop's first barrier
sync.dma_read    no LDS read while an LDS DMA may be in flight or not yet behind a barrier
sync.dma_war     no LDS operation outstanding when an LDS DMA is issued
mfma.format      scaled MFMAs: both operands e4m3 (no cbsz/blgp format modifiers), op_sel 0
mfma.lo_scale    two B-scale registers, 8 MFMAs each; the lo one defined as hi - 5 (and that
                 is its only definition)
mfma.k_scale     every A scale is the exponent field (v_bfe_u32 x, 23, 8) of a record scale
mfma.operands    PV f16 MFMAs: A = converted V (v_cvt_scalef32_pk_f16_fp8), B = P' (v_cvt_pk_f16_f32);
                 scaled MFMAs: A = K codes read from LDS (ds_read_b128)
layout.lds       .amdhsa_group_segment_fixed_size equals the layout's size
layout.tr8       tr8 immediate offsets, in issue order, are the layout's (kc, ch) windows, over
                 two base registers (sub = kc & 1)
num.denorm       f32 and f16/f64 denormals kept (denorm mode 3), no mode or rounding change
num.fma          no fused multiply-add outside the one f32 division (v_div_scale .. v_div_fixup)
num.rtz          no round-toward-zero conversion
num.p_shift      per tile one m - 8 (v_add_f32 -8.0 / v_sub 8.0) and one max with -1e20
num.masked       per tile 8 selects of the masked score -1e30
store.guard      H < 16: every output store under an exec mask from `t < H`; the lse store
                 under an exec mask whatever H
row.order        the query row is n_q - 1 - workgroup id (long rows first)

The dataflow behind sync.* tracks, per program point and over all paths (loops iterated to a
fixed point), the outstanding VMEM operations, LDS operations and SMEM loads (s_waitcnt
vmcnt(N) / lgkmcnt(N) leave at most N), and whether an LDS DMA may be in flight (how many VMEM
operations were issued after it: a vmcnt(N) with N at most that count completes it) and whether
one completed since the last s_barrier. Only documented counter semantics are used: VMEM
operations complete in order for vmcnt; lgkmcnt(N) leaves at most N of LDS + SMEM together.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kernel.flydsl import isa_expect as E
from kernel.flydsl import isa_flow as F
from kernel.isa.asm import OFF, SPECIAL_SGPRS, Instr, Operand, Program, Reg, imm_bits, reg_names

KERNEL_RE = re.compile(r"sparse_mla_fp8ds_gfx950_h(\d+)_i([01])_l([01])")
RECORD_BYTES = 656
VM_CAP = 63


@dataclass(frozen=True)
class Failure:
    """One violated check: its id (module docstring) and what was seen."""

    check: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}"


def config_of(name: str) -> tuple[int, bool, bool] | None:
    """(heads, has_invalid, return_lse) from a kernel symbol name, None if it is not one."""
    m = KERNEL_RE.search(name)
    if not m:
        return None
    return int(m.group(1)), m.group(2) == "1", m.group(3) == "1"


# ================================================================ instruction classes


def is_vmem(m: str) -> bool:
    return m.startswith(("global_", "buffer_", "flat_", "scratch_"))


def is_lds_dma(m: str) -> bool:
    return m.startswith("global_load_lds") or (m.startswith("buffer_load") and "lds" in m)


def is_ds(m: str) -> bool:
    return m.startswith("ds_")


def is_lds_read(m: str) -> bool:
    """LDS memory reads (ds_bpermute / ds_permute / ds_swizzle move registers, not memory)."""
    return m.startswith(("ds_read", "ds_load"))


def is_smem(m: str) -> bool:
    return m.startswith(("s_load", "s_buffer_load", "s_scratch_load"))


def _count_key(counter: Counter, key: str) -> int:
    if key.endswith("*"):
        return sum(n for m, n in counter.items() if m.startswith(key[:-1]))
    return counter.get(key, 0)


def _one_reg(op: Operand | None) -> str | None:
    """The register an operand names when it names exactly one, else None."""
    r = reg_names(op)
    return r[0] if len(r) == 1 else None


M0 = Reg("s", *SPECIAL_SGPRS["m0"])
EXEC = (Reg("s", *SPECIAL_SGPRS["exec"]), Reg("s", *SPECIAL_SGPRS["exec_lo"]))
KERNARG_PTR = Reg("s", 0, 2)  # s[0:1]: the kernarg segment pointer (the first user SGPRs)


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


# ================================================================ definitions


class Defs:
    """Reaching definitions by text-order scans: inside a loop the scan wraps around the loop's
    instructions (a loop-carried value is defined later in the body), then continues before the
    loop; v_mov copies are followed."""

    def __init__(self, prog: Program, loop: list[int] | None) -> None:
        self.prog = prog
        self.loop_list = prog.loop_instrs(loop) if loop else []
        self.loop_pos = {ins.index: k for k, ins in enumerate(self.loop_list)}
        self.loop_first = min((i.index for i in self.loop_list), default=0)
        self.defs = [F.defs(i) for i in prog.instrs]

    def reaching(self, at: Instr, reg: str | None) -> Instr | None:
        if at.index in self.loop_pos:
            k = self.loop_pos[at.index]
            n = len(self.loop_list)
            for step in range(1, n + 1):
                ins = self.loop_list[(k - step) % n]
                if reg in self.defs[ins.index]:
                    return ins
            start = self.loop_first
        else:
            start = at.index
        for ins in reversed(self.prog.instrs[:start]):
            if reg in self.defs[ins.index]:
                return ins
        return None

    def source(self, at: Instr, reg: str | None, depth: int = 6) -> Instr | None:
        """The defining instruction of reg at `at`, through v_mov/s_mov copies."""
        d = self.reaching(at, reg)
        while d is not None and depth > 0 and d.mnemonic.startswith(("v_mov_b32", "v_mov_b64", "s_mov_b32", "s_mov_b64")):
            src = reg_names(d.operands[1]) if len(d.operands) > 1 else ()
            if not src:
                return d  # a literal move
            off = self.defs[d.index].index(reg) if reg in self.defs[d.index] else 0
            d = self.reaching(d, src[min(off, len(src) - 1)])
            depth -= 1
        return d

    def const(self, at: Instr, op: Operand) -> int | None:
        """Value of an operand that is a literal or a register holding one (moved in)."""
        lit = imm_bits(op)
        if lit is not None:
            return lit
        r = reg_names(op)
        if len(r) != 1:
            return None
        d = self.source(at, r[0])
        if d is not None and d.mnemonic in ("v_mov_b32_e32", "s_mov_b32", "s_movk_i32", "v_mov_b32_e64") and len(d.operands) > 1:
            return imm_bits(d.operands[1])
        return None


# ================================================================ the kernel's structure


@dataclass
class Kernel:
    prog: Program
    heads: int
    has_invalid: bool
    return_lse: bool
    tile_loop: list[int] | None
    other_loops: list[list[int]]


def kernel_structure(prog: Program) -> tuple[Kernel | None, list[Failure]]:
    cfg = config_of(prog.name)
    if cfg is None:
        return None, [Failure("structure", f"kernel name {prog.name!r} is not a sparse_mla_fp8ds_gfx950 configuration")]
    tile = [lp for lp in prog.loops if any(i.mnemonic.startswith("v_mfma_scale") for i in prog.loop_instrs(lp))]
    others = [lp for lp in prog.loops if lp not in tile]
    fails = []
    if len(tile) != 1:
        fails.append(Failure("structure", f"{len(tile)} loops hold scaled MFMAs (expected one tile loop)"))
    want_other = int(cfg[1])
    if len(others) != want_other:
        fails.append(Failure("structure", f"{len(others)} loops besides the tile loop (expected {want_other}: the has_invalid scan)"))
    return Kernel(prog, cfg[0], cfg[1], cfg[2], tile[0] if len(tile) == 1 else None, others), fails


# ================================================================ counts


def check_counts(k: Kernel) -> list[Failure]:
    exp = E.expected_counts(k.heads, k.has_invalid, k.return_lse)
    out: list[Failure] = []
    total = Counter(i.mnemonic for i in k.prog.instrs)
    for key, want in exp.kernel.items():
        got = _count_key(total, key)
        if got != want:
            out.append(Failure("counts.kernel", f"{key}: {got} in the kernel, expected {want}"))
    if k.tile_loop is None:
        return out
    try:
        paths = F.iteration_paths(k.prog, k.tile_loop)
    except ValueError as err:
        return out + [Failure("counts.tile", f"tile loop paths: {err}")]
    seen: dict[str, set[int]] = {key: set() for key in exp.tile}
    for path in paths:
        c = Counter(i.mnemonic for b in path for i in k.prog.block_instrs(b))
        for key in exp.tile:
            seen[key].add(_count_key(c, key))
    for key, want in exp.tile.items():
        if not seen[key] <= want or not seen[key]:
            out.append(Failure("counts.tile", f"{key}: {sorted(seen[key])} per tile over {len(paths)} paths, expected {sorted(want)}"))
    # every allowed value of a two-valued count must occur (the refill branch exists)
    for key, want in exp.tile.items():
        if len(want) > 1 and seen[key] != set(want):
            out.append(Failure("counts.tile", f"{key}: paths give {sorted(seen[key])}, expected both of {sorted(want)}"))
    return out


# ================================================================ 64-bit KV path


def _record_mads(k: Kernel, defs: Defs, instrs: Iterable[Instr]) -> tuple[list[Instr], list[Failure]]:
    mads, fails = [], []
    for ins in instrs:
        m = ins.mnemonic
        uses_656 = [op for op in ins.operands[1:] if defs.const(ins, op) == RECORD_BYTES]
        if not uses_656:
            continue
        if m.startswith("v_mad_u64_u32") and any(defs.const(ins, op) == RECORD_BYTES for op in ins.operands[2:4]):
            mads.append(ins)
        elif m.startswith(("v_mul", "s_mul", "v_mad", "v_lshl", "s_lshl", "v_mad_u32_u24", "v_mul_u32_u24")):
            fails.append(Failure("kv64.mul", f"line {ins.line}: record size 656 in a 32-bit multiply: {ins.text}"))
    return mads, fails


def check_kv64(k: Kernel) -> list[Failure]:
    prog = k.prog
    out: list[Failure] = []
    defs = Defs(prog, k.tile_loop)
    mads, fails = _record_mads(k, defs, prog.instrs)
    out += fails
    exp = E.expected_counts(k.heads, k.has_invalid, k.return_lse)
    if len(mads) != exp.record_mads:
        out.append(
            Failure("kv64.mul", f"{len(mads)} record offsets by 64-bit multiply-add (v_mad_u64_u32 x 656), expected {exp.record_mads}")
        )
    if k.tile_loop is not None:
        try:
            paths = F.iteration_paths(prog, k.tile_loop)
        except ValueError:
            paths = []
        mad_ids = {i.index for i in mads}
        per = {sum(1 for b in p for i in prog.block_instrs(b) if i.index in mad_ids) for p in paths}
        if per and not per <= exp.record_mads_tile:
            out.append(Failure("kv64.mul", f"{sorted(per)} record offsets per tile path, expected {sorted(exp.record_mads_tile)}"))
    # each record address goes through the masked select (the zero record for masked positions)
    for mad in mads:
        dst = reg_names(mad.operands[0])
        readers = _first_readers(prog, mad, dst)
        bad = [r for r in readers if not r.mnemonic.startswith("v_cndmask_b32")]
        if bad or len(readers) < len(dst):
            what = bad[0].text if bad else "no reader"
            out.append(Failure("kv64.masked", f"line {mad.line}: record address {mad.operands[0]} used unmasked by {what!r}"))
    # address forms: every LDS DMA and every KV load from a 64-bit VGPR address, `off`: the
    # tile loop's global loads are its rope loads; outside it at least the prologue's 4 rope
    # loads (Q loads may use an SGPR row base plus a 32-bit lane offset: Q is not the cache)
    loop_ids = {i.index for i in prog.loop_instrs(k.tile_loop)} if k.tile_loop is not None else set()
    wide_outside = 0
    for ins in prog.instrs:
        m = ins.mnemonic
        if not m.startswith("global_load"):
            if m.startswith(("flat_", "scratch_")):
                out.append(Failure("kv64.form", f"line {ins.line}: {m} (only global_ and buffer_ memory operations expected)"))
            continue
        if m.startswith("global_load_lds"):
            vaddr, tail = (ins.operands[0] if ins.operands else None), ins.operands[1:]
        else:
            vaddr, tail = (ins.operands[1] if len(ins.operands) > 1 else None), ins.operands[2:]
        wide = len(reg_names(vaddr)) == 2 and str(vaddr).startswith("v[") and tail[-1:] == [OFF]
        if m.startswith("global_load_lds") or ins.index in loop_ids:
            if not wide:
                out.append(Failure("kv64.form", f"line {ins.line}: not the 64-bit `v[..], off` form: {ins.text}"))
        elif wide and m == "global_load_dwordx4":
            wide_outside += 1
    rope = E.SUBTILES * E.ROPE_HALVES
    if wide_outside < rope:
        out.append(
            Failure(
                "kv64.form",
                f"{wide_outside} 64-bit-addressed 16-byte loads outside the tile loop, expected at least the prologue's {rope} rope loads",
            )
        )
    # buffer instructions: loads through one descriptor built with word 3 = 0x27000
    rsrcs = set()
    for ins in prog.instrs:
        if ins.mnemonic.startswith("buffer_"):
            if not ins.mnemonic.startswith("buffer_load"):
                out.append(Failure("kv64.buffer", f"line {ins.line}: {ins.mnemonic} (only index loads go through a descriptor)"))
            if len(ins.operands) > 2:
                rsrcs.add(ins.operands[2])
    if len(rsrcs) > 1:
        out.append(
            Failure(
                "kv64.buffer",
                f"buffer instructions use {len(rsrcs)} descriptors {sorted(map(str, rsrcs))}, expected the index buffer's only",
            )
        )
    for rs in sorted(rsrcs, key=str):
        r = reg_names(rs)
        first = next(i for i in prog.instrs if i.mnemonic.startswith("buffer_") and len(i.operands) > 2 and i.operands[2] == rs)
        if len(r) != 4 or defs.const(first, Reg(rs.file, rs.index + 3)) != 0x27000:
            out.append(Failure("kv64.buffer", f"descriptor {rs}: word 3 is not the raw 32-bit format 0x27000"))
    return out


def _first_readers(prog: Program, at: Instr, dst: tuple[str, ...]) -> list[Instr]:
    """For each register of dst, the first later instruction (text order, same block onward)
    that reads it before it is redefined."""
    out = []
    for reg in dst:
        for ins in prog.instrs[at.index + 1 :]:
            if reg in F.uses(ins):
                out.append(ins)
                break
            if reg in F.defs(ins):
                break
    return out


# ================================================================ waits, barriers, M0


@dataclass(frozen=True)
class _State:
    vm: int = 0
    ds: int = 0
    smem: int = 0
    dma_younger: int | None = None  # VMEM ops issued after the youngest LDS DMA in flight
    dma_unfenced: bool = False  # a DMA completed (or not) with no barrier since

    def join(self, o: _State) -> _State:
        if self.dma_younger is None:
            dy = o.dma_younger
        elif o.dma_younger is None:
            dy = self.dma_younger
        else:
            dy = min(self.dma_younger, o.dma_younger)
        return _State(max(self.vm, o.vm), max(self.ds, o.ds), max(self.smem, o.smem), dy, self.dma_unfenced or o.dma_unfenced)


def _waitcnt(ins: Instr) -> dict[str, int]:
    """The counters an s_waitcnt waits for (the reader decodes them into its modifiers)."""
    return {key: int(n) for key, n in ins.modifiers.items() if key in ("vmcnt", "lgkmcnt", "expcnt")}


def _step(st: _State, ins: Instr, report: list[Failure] | None, loop_top_barrier: int | None) -> _State:
    m = ins.mnemonic
    vm, ds, smem, dy, unf = st.vm, st.ds, st.smem, st.dma_younger, st.dma_unfenced
    if m == "s_waitcnt":
        w = _waitcnt(ins)
        if "vmcnt" in w:
            n = w["vmcnt"]
            vm = min(vm, n)
            if dy is not None and n <= dy:
                dy = None
        if "lgkmcnt" in w:
            n = w["lgkmcnt"]
            ds, smem = min(ds, n), min(smem, n)
    elif m == "s_barrier":
        if report is not None:
            if ds:
                report.append(
                    Failure("sync.barrier", f"line {ins.line}: s_barrier with up to {ds} LDS operations outstanding (no lgkmcnt(0))")
                )
            if loop_top_barrier == ins.index and vm:
                report.append(
                    Failure(
                        "sync.loop_top", f"line {ins.line}: tile-loop barrier with up to {vm} VMEM operations outstanding (no vmcnt(0))"
                    )
                )
        if dy is None:
            unf = False
    elif is_vmem(m):
        if is_lds_dma(m):
            if report is not None and ds:
                report.append(Failure("sync.dma_war", f"line {ins.line}: LDS DMA issued with up to {ds} LDS operations outstanding"))
            dy, unf = 0, True
        elif dy is not None:
            dy = min(dy + 1, VM_CAP)
        vm = min(vm + 1, VM_CAP)
    elif is_ds(m):
        if is_lds_read(m) and report is not None and (dy is not None or unf):
            why = "may still be in flight" if dy is not None else "has no barrier after its wait"
            report.append(Failure("sync.dma_read", f"line {ins.line}: {m} while an LDS DMA {why}"))
        # only LDS memory operations count for the barrier and DMA hazards (ds_bpermute moves
        # registers); lgkmcnt(N) bounds them all the same
        if is_lds_read(m) or m.startswith(("ds_write", "ds_store", "ds_add", "ds_max", "ds_min")):
            ds = min(ds + 1, VM_CAP)
    elif is_smem(m):
        smem = min(smem + 1, VM_CAP)
    return _State(vm, ds, smem, dy, unf)


def check_sync(k: Kernel) -> list[Failure]:
    prog = k.prog
    loop_top = None
    if k.tile_loop is not None:
        head = F.loop_header(prog, k.tile_loop)
        bars = [i for i in prog.block_instrs(head) if i.mnemonic == "s_barrier"]
        loop_top = bars[0].index if bars else None
        if loop_top is None:
            out0 = [Failure("sync.loop_top", "the tile loop's header block has no s_barrier")]
        else:
            out0 = []
    else:
        out0 = []
    n = len(prog.blocks)
    state_in: list[_State | None] = [None] * n
    state_in[0] = _State()
    work = [0]
    while work:
        b = work.pop()
        st = state_in[b]
        assert st is not None
        for ins in prog.block_instrs(b):
            st = _step(st, ins, None, loop_top)
        for s in prog.blocks[b].succs:
            new = st if state_in[s] is None else state_in[s].join(st)
            if new != state_in[s]:
                state_in[s] = new
                work.append(s)
    out: list[Failure] = list(out0)
    for b in range(n):
        st = state_in[b]
        if st is None:
            continue
        for ins in prog.block_instrs(b):
            st = _step(st, ins, out, loop_top)
    # M0 before every LDS DMA: written since the block start or the previous DMA
    for blk in prog.blocks:
        m0_fresh = False
        for ins in prog.block_instrs(blk.index):
            if ins.operands and ins.operands[0] == M0 and ins.mnemonic.startswith("s_"):
                m0_fresh = True
            elif is_lds_dma(ins.mnemonic):
                if not m0_fresh:
                    out.append(Failure("sync.m0", f"line {ins.line}: LDS DMA without an M0 write since the previous one"))
                m0_fresh = False
    return out


# ================================================================ MFMA operands


def check_mfma(k: Kernel) -> list[Failure]:
    prog = k.prog
    out: list[Failure] = []
    defs = Defs(prog, k.tile_loop)
    scaled = [i for i in prog.instrs if i.mnemonic.startswith("v_mfma_scale_f32_16x16x128_f8f6f4")]
    for ins in scaled:
        mods = [key if val is True else f"{key}:{val}" for key, val in ins.modifiers.items()]
        bad = [mod for mod in mods if mod not in ("op_sel_hi:[0,0,0]", "op_sel:[0,0,0]")]
        if bad:
            out.append(Failure("mfma.format", f"line {ins.line}: modifiers {bad} (e4m3 x e4m3, scale byte 0 expected)"))
        if len(ins.operands) != 6:
            out.append(Failure("mfma.format", f"line {ins.line}: {len(ins.operands)} operands, expected 6"))
    if not scaled:
        return out
    b_scales = Counter(i.operands[5] for i in scaled if len(i.operands) == 6)
    if len(b_scales) != 2 or sorted(b_scales.values()) != [len(scaled) // 2] * 2:
        seen = {str(r): n for r, n in b_scales.items()}
        out.append(Failure("mfma.lo_scale", f"B-scale registers {seen}: expected two (hi, lo), {len(scaled) // 2} MFMAs each"))
    else:
        ra, rb = list(b_scales)
        ok = False
        for hi, lo in ((ra, rb), (rb, ra)):
            user = next(i for i in scaled if i.operands[5] == lo)
            d = defs.source(user, _one_reg(lo))
            if d is None or not _is_minus_5(defs, d, _one_reg(hi)):
                continue
            # the hi register still holds the value the minus-5 read, at every hi MFMA
            hi_users = [i for i in scaled if i.operands[5] == hi]
            hd = {defs.reaching(i, _one_reg(hi)).index if defs.reaching(i, _one_reg(hi)) else None for i in hi_users}
            src = defs.reaching(d, _one_reg(hi))
            if len(hd) == 1 and src is not None and hd == {src.index}:
                ok = True
        if not ok:
            out.append(Failure("mfma.lo_scale", f"neither of {ra}, {rb} holds the other minus 5 (lo E8M0 = hi - 5)"))
        # hi / lo alternate: within each pair the lo MFMA accumulates onto the hi one
        for a, b in zip(scaled[0::2], scaled[1::2]):
            if len(a.operands) == 6 and len(b.operands) == 6 and (a.operands[5] == b.operands[5] or b.operands[3] != a.operands[0]):
                out.append(
                    Failure("mfma.lo_scale", f"lines {a.line}/{b.line}: not a hi MFMA followed by its lo MFMA on the same accumulator")
                )
                break
    for ins in scaled:
        if len(ins.operands) != 6:
            continue
        r = reg_names(ins.operands[4])
        d = defs.source(ins, r[0]) if len(r) == 1 else None
        if d is None or not (d.mnemonic.startswith("v_bfe_u32") and [imm_bits(o) for o in d.operands[2:4]] == [23, 8]):
            out.append(
                Failure(
                    "mfma.k_scale",
                    f"line {ins.line}: A scale {ins.operands[4]} is not a record scale's exponent field "
                    f"(v_bfe_u32 x, 23, 8): {d.text if d else None}",
                )
            )
        a = reg_names(ins.operands[1])
        srcs = {defs.source(ins, x).mnemonic if defs.source(ins, x) else None for x in a}
        if srcs != {"ds_read_b128"}:
            out.append(
                Failure(
                    "mfma.operands",
                    f"line {ins.line}: scaled MFMA A operand from {sorted(map(str, srcs))}, expected K codes (ds_read_b128)",
                )
            )
    for ins in prog.instrs:
        if ins.mnemonic == "v_mfma_f32_16x16x32_f16":
            a = {defs.source(ins, x).mnemonic if defs.source(ins, x) else None for x in reg_names(ins.operands[1])}
            b = {defs.source(ins, x).mnemonic if defs.source(ins, x) else None for x in reg_names(ins.operands[2])}
            if a != {"v_cvt_scalef32_pk_f16_fp8"} or b != {"v_cvt_pk_f16_f32"}:
                out.append(
                    Failure(
                        "mfma.operands",
                        f"line {ins.line}: PV MFMA A from {sorted(map(str, a))}, B from {sorted(map(str, b))}; "
                        "expected V (v_cvt_scalef32_pk_f16_fp8) x P' (v_cvt_pk_f16_f32)",
                    )
                )
                break
    return out


def _is_minus_5(defs: Defs, d: Instr, hi: str | None) -> bool:
    m, ops = d.mnemonic, d.operands
    if len(ops) < 3:
        return False
    srcs = [reg_names(o) for o in ops[1:3]]
    consts = [defs.const(d, o) for o in ops[1:3]]
    if m.startswith(("v_add_u32", "v_add_nc_u32", "v_add_co_u32", "v_add_i32", "s_add_i32")):
        return (consts[0] == (-5 & 0xFFFFFFFF) and srcs[1] == (hi,)) or (consts[1] == (-5 & 0xFFFFFFFF) and srcs[0] == (hi,))
    if m.startswith(("v_sub_u32", "v_sub_nc_u32", "s_sub_i32")):
        return srcs[0] == (hi,) and consts[1] == 5
    if m.startswith("v_subrev_u32"):
        return consts[0] == 5 and srcs[1] == (hi,)
    return False


# ================================================================ layout


def check_layout(k: Kernel) -> list[Failure]:
    prog = k.prog
    out: list[Failure] = []
    lds = prog.directives.get(".amdhsa_group_segment_fixed_size")
    want = E.expected_lds_bytes()
    if lds != want:
        out.append(Failure("layout.lds", f"group segment {lds} bytes, the layout's is {want}"))
    if k.tile_loop is None:
        return out
    tr8 = [i for i in prog.loop_instrs(k.tile_loop) if i.mnemonic == "ds_read_b64_tr_b8"]
    offs = []
    bases = []
    for i in tr8:
        offs.append(int(str(i.modifiers.get("offset", 0)), 0))
        bases.append(i.operands[1] if len(i.operands) > 1 else None)
    if offs != E.expected_tr8_offsets():
        out.append(Failure("layout.tr8", f"tr8 immediate offsets {offs} differ from the layout's {E.expected_tr8_offsets()}"))
    order = list(dict.fromkeys(bases))
    if len(order) != 2 or [order.index(b) for b in bases] != E.expected_tr8_bases():
        out.append(
            Failure("layout.tr8", f"tr8 base registers {list(map(str, bases))}: expected two, alternating per K-chunk (sub = kc & 1)")
        )
    return out


# ================================================================ numerics


def check_numerics(k: Kernel) -> list[Failure]:
    prog = k.prog
    out: list[Failure] = []
    for key in (".amdhsa_float_denorm_mode_32", ".amdhsa_float_denorm_mode_16_64"):
        if prog.directives.get(key) != 3:
            out.append(Failure("num.denorm", f"{key} = {prog.directives.get(key)}, expected 3 (denormals kept)"))
    for ins in prog.instrs:
        m = ins.mnemonic
        if m.startswith(("s_denorm_mode", "s_round_mode", "s_setreg")):
            out.append(Failure("num.denorm", f"line {ins.line}: {ins.text} changes the FP mode"))
        if "rtz" in m:
            out.append(Failure("num.rtz", f"line {ins.line}: round-toward-zero conversion {m}"))
    div_lo = [i.index for i in prog.instrs if i.mnemonic.startswith("v_div_scale_f32")]
    div_hi = [i.index for i in prog.instrs if i.mnemonic.startswith("v_div_fixup_f32")]
    lo = min(div_lo) if div_lo else -1
    hi = max(div_hi) if div_hi else -1
    for ins in prog.instrs:
        m = ins.mnemonic
        fused = m.startswith(("v_fma", "v_pk_fma", "v_mac_", "v_mad_f32", "v_fmac", "v_mad_legacy", "v_mad_mix", "v_dot"))
        if fused and not lo <= ins.index <= hi:
            out.append(Failure("num.fma", f"line {ins.line}: {m} outside the f32 division"))
    if k.tile_loop is None:
        return out
    defs = Defs(prog, k.tile_loop)
    body = prog.loop_instrs(k.tile_loop)
    minus8 = 0
    floor = 0
    masked = 0
    for ins in body:
        m = ins.mnemonic
        consts = [defs.const(ins, op) for op in ins.operands[1:]]
        if (m.startswith("v_add_f32") and _f32_bits(-8.0) in consts) or (
            m.startswith(("v_sub_f32", "v_subrev_f32")) and _f32_bits(8.0) in consts
        ):
            minus8 += 1
        if m.startswith("v_max_f32") and _f32_bits(-1.0e20) in consts:
            floor += 1
        if m.startswith("v_cndmask_b32") and _f32_bits(-1.0e30) in consts:
            masked += 1
    if minus8 != 1 or floor != 1:
        out.append(
            Failure(
                "num.p_shift",
                f"per tile {minus8} subtractions of 8 and {floor} maxima with -1e20 (expected 1 and 1: P = exp2(x - max(m - 8, -1e20)))",
            )
        )
    want = E.expected_counts(k.heads, k.has_invalid, k.return_lse).masked_selects_tile
    if masked != want:
        out.append(Failure("num.masked", f"per tile {masked} selects of the masked score -1e30, expected {want}"))
    return out


# ================================================================ stores, row order


def check_stores(k: Kernel) -> list[Failure]:
    prog = k.prog
    out: list[Failure] = []
    defs = Defs(prog, None)
    for ins in prog.instrs:
        m = ins.mnemonic
        if not m.startswith("global_store"):
            continue
        is_lse = m == "global_store_dword"
        if not is_lse and k.heads == 16:
            continue
        guard = _exec_guard(prog, ins)
        if guard is None:
            out.append(Failure("store.guard", f"line {ins.line}: {m} not under an exec mask"))
            continue
        if is_lse:
            continue
        cond = reg_names(guard.operands[1]) if len(guard.operands) > 1 else ()
        d = defs.reaching(guard, cond[0]) if cond else None
        if d is None or not _is_head_compare(defs, d, k.heads):
            out.append(Failure("store.guard", f"line {ins.line}: output store's exec mask is not t < {k.heads}: {d.text if d else None}"))
    return out


def _exec_guard(prog: Program, at: Instr) -> Instr | None:
    """The s_and_saveexec_b64 the instruction executes under (text-order scan back through
    its block and single-predecessor blocks), None when exec is not narrowed."""
    b = prog.block_of[at.index]
    idx = at.index
    seen = set()
    while b not in seen:
        seen.add(b)
        blk = prog.blocks[b]
        for ins in reversed(prog.instrs[blk.start : idx]):
            if ins.mnemonic.startswith("s_and_saveexec_b64"):
                return ins
            if ins.operands and ins.operands[0] in EXEC and not ins.mnemonic.startswith("s_cbranch"):
                return None
        if len(blk.preds) != 1:
            return None
        b = blk.preds[0]
        idx = prog.blocks[b].end
    return None


def _is_head_compare(defs: Defs, d: Instr, heads: int) -> bool:
    m = d.mnemonic
    if not m.startswith("v_cmp_"):
        if m.startswith(("s_and_b64", "s_mov_b64")) and len(d.operands) > 1:
            for op in d.operands[1:]:
                r = reg_names(op)
                if r:
                    dd = defs.reaching(d, r[0])
                    if dd is not None and dd.mnemonic.startswith("v_cmp_") and _is_head_compare(defs, dd, heads):
                        return True
        return False
    consts = [defs.const(d, op) for op in d.operands[1:3]]
    if heads == 1 and "_eq_" in m:  # t < 1 is t == 0
        return 0 in consts
    if heads == 15 and "_ne_" in m:  # t = lane & 15: t < 15 is t != 15
        return 15 in consts
    if "_gt_u32" in m or "_gt_i32" in m:
        return consts[0] == heads
    if "_lt_u32" in m or "_lt_i32" in m:
        return consts[1] == heads
    if "_ge_u32" in m or "_ge_i32" in m:
        return consts[0] == heads - 1
    if "_le_u32" in m or "_le_i32" in m:
        return consts[1] == heads - 1
    return False


def _kernarg_sgprs(prog: Program) -> dict[int, list[str]]:
    """Kernarg byte offset -> SGPRs loaded from it (s_load_dword{,xN} sD, s[0:1], off)."""
    out: dict[int, list[str]] = {}
    for ins in prog.instrs:
        if ins.mnemonic.startswith("s_load_dword") and len(ins.operands) == 3 and ins.operands[1] == KERNARG_PTR:
            base = imm_bits(ins.operands[2])
            if base is None:
                continue
            for k, r in enumerate(reg_names(ins.operands[0])):
                out.setdefault(base + 4 * k, []).append(r)
    return out


def check_row_order(k: Kernel) -> list[Failure]:
    """qi = n_q - 1 - wgid, evaluated symbolically over the SALU prologue as a*n_q + b*wgid + c."""
    prog = k.prog
    wg = prog.directives.get(".amdhsa_user_sgpr_count")
    if wg is None:
        return [Failure("row.order", ".amdhsa_user_sgpr_count missing")]
    nq_regs = _kernarg_sgprs(prog).get(56)  # n_q is the 8th kernarg (after 7 addresses)
    if not nq_regs:
        return [Failure("row.order", "n_q (kernarg offset 56) never loaded")]
    val: dict[str, tuple[int, int, int]] = {f"s{wg}": (0, 1, 0)}
    seen = set()
    for ins in prog.instrs[:400]:
        if ins.mnemonic.startswith("s_load_dword") and ins.operands[1:2] == [KERNARG_PTR]:
            base = imm_bits(ins.operands[2])
            for word, r in enumerate(reg_names(ins.operands[0])):
                val.pop(r, None)
                if base is not None and base + 4 * word == 56:
                    val[r] = (1, 0, 0)
            continue
        m, ops = ins.mnemonic, ins.operands

        def lin(op: Operand) -> tuple[int, int, int] | None:
            lit = imm_bits(op)
            if lit is not None:
                return (0, 0, lit - (1 << 32) if lit >= 1 << 31 else lit)
            return val.get(_one_reg(op) or "")

        res = None
        if m == "s_not_b32" and len(ops) == 2 and lin(ops[1]):
            a, b, c = lin(ops[1])  # type: ignore[misc]
            res = (-a, -b, -c - 1)
        elif m in ("s_add_i32", "s_add_u32") and len(ops) == 3 and lin(ops[1]) and lin(ops[2]):
            x, y = lin(ops[1]), lin(ops[2])
            res = (x[0] + y[0], x[1] + y[1], x[2] + y[2])  # type: ignore[index]
        elif m in ("s_sub_i32", "s_sub_u32") and len(ops) == 3 and lin(ops[1]) and lin(ops[2]):
            x, y = lin(ops[1]), lin(ops[2])
            res = (x[0] - y[0], x[1] - y[1], x[2] - y[2])  # type: ignore[index]
        elif m == "s_mov_b32" and len(ops) == 2 and lin(ops[1]):
            res = lin(ops[1])
        written = F.defs(ins)
        if written:
            for r in written:
                val.pop(r, None)
            if res is not None and len(written) == 1:
                val[written[0]] = res
                seen.add(res)
    if (1, -1, -1) not in seen:
        return [Failure("row.order", f"no SGPR holds n_q - 1 - workgroup id (linear forms seen: {sorted(seen)})")]
    return []


# ================================================================ entry point


def check_program(prog: Program) -> list[Failure]:
    """Every check of this module on one parsed ISA dump (empty list: all pass)."""
    k, fails = kernel_structure(prog)
    if k is None:
        return fails
    for fn in (check_counts, check_kv64, check_sync, check_mfma, check_layout, check_numerics, check_stores, check_row_order):
        fails += fn(k)
    return fails
