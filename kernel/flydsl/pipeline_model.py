"""Static model of the tile loop's memory pipeline: LDS bank conflicts and a per-tile scoreboard.

Nothing here was measured on hardware; it is a model with its assumptions stated, used to
compare layouts and loop structures with each other (this kernel's, an unswizzled layout, and
the original kernel's structure as its documentation describes it).

Bank model (`lds_cycles`): 64 banks of 4 bytes; a wave64 LDS access of W bytes per lane is
served in phases of 256 / W lanes (64 lanes for 4 B, 32 for 8 B, 16 for 16 B); a phase takes as
many cycles as the largest number of distinct dword addresses that fall in one bank (equal
addresses broadcast). A conflict-free access of W bytes per lane takes W / 4 cycles.

Read patterns (`tile_patterns`): every LDS access of one wave in one tile, lane by lane, from a
layout's address functions: `current_layout()` is gfx950.py's; `unswizzled_layout()` is the
same kernel without the swizzle (token t of a half in slot t, scale rows of 512 bytes); `seed_layout()`
is the original kernel's latent tile as its documentation states it ([128 tokens][8 x 16 B] per column
block with the 16-byte chunk XOR-swizzled by fsw(tok) = ((tok >> 1) & 7) ^ (((tok >> 4) & 1) << 1),
QK reads at tok * 128 + ((g % 2) ^ fsw(tok)) * 16 ^ 32 blk, PV tr8 reads of token
32(g // 2 + 2hf) + 16(i // 4) + 4(2(g % 2) + sub) + i % 4, i = t // 2, at tok * 128 + fsw(tok) * 16
^ 16 dc + 8 (t % 2)); only the latent-tile reads are modelled for the original kernel.

Scoreboard (`simulate`): one wave issues one iteration's instructions in order (the refill path
of the tile loop read from the ISA by kernel.isa.asm), three iterations in a row, and the last one's
length is the per-tile estimate. Issue costs and latencies (`Costs`, assumptions): VALU 4 cycles
(wave64 on a 16-lane SIMD), transcendental 16, SALU 1, memory instructions 4 to issue; MFMAs
occupy the matrix pipe 32 cycles (scaled 16x16x128 f8) or 16 (16x16x32 f16 / bf16), from the
MI355X peak rates; a dependent MFMA waits for its source accumulator; VMEM and LDS DMA complete
in order `vm_latency` cycles after issue; LDS operations go through one LDS pipe for their bank
cycles and complete `lds_latency` later; s_waitcnt stalls until the counters allow; a barrier
costs `barrier` cycles (the 4 waves are modelled as identical). Registers written by memory
loads are covered by s_waitcnt, not the scoreboard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernel.flydsl import isa_flow as F
from kernel.flydsl import layout as K
from kernel.isa.asm import Instr, Program, parse_program

LANES = range(64)
BANKS = 64
BANK_BYTES = 4


# ================================================================ banks


def lds_cycles(addrs: Sequence[int], width: int) -> int:
    """Cycles of one wave64 LDS access, lane l at byte address addrs[l], `width` bytes per lane."""
    if len(addrs) != 64 or width not in (4, 8, 16):
        raise ValueError("64 lane addresses and a width of 4, 8 or 16 bytes")
    per_phase = 256 // width
    total = 0
    for p in range(0, 64, per_phase):
        banks: dict[int, set[int]] = {}
        for a in addrs[p : p + per_phase]:
            for d in range(width // BANK_BYTES):
                dword = a // BANK_BYTES + d
                banks.setdefault(dword % BANKS, set()).add(dword)
        total += max(len(s) for s in banks.values())
    return total


@dataclass(frozen=True)
class Layout:
    """Lane address functions of one LDS layout (byte offsets; lane = 16 g + t)."""

    name: str
    qk_k: Callable[[int, int, int, int, int], int]  # (wave, s, j, part, lane) -> K operand read
    tr8: Callable[[int, int, int, int], int]  # (wave, kc, ch, lane) -> PV tr8 read
    qk_scale: Callable[[int, int, int], int] | None  # (wave, s, lane) -> scale word read
    pv_scale: Callable[[int, int, int, int], int] | None  # (wave, kc, k, lane) -> 16-byte scale read
    pv_p: Callable[[int, int, int], int] | None  # (kc, k, lane) -> 16-byte P read


def _gfx950_layout(name: str, slot: Callable[[int], int], scale_row: int) -> Layout:
    def lds_k(block: int, tok: int, chunk: int) -> int:
        return K.LDS_K + block * K.LDS_K_BLOCK + (tok >> 6) * K.LDS_K_HALF + chunk * K.LDS_K_CHUNK + slot(tok & 63) * 16

    def lds_scale(block: int, tok: int) -> int:
        return K.LDS_SCALE + block * scale_row + (tok >> 6) * 256 + slot(tok & 63) * 4

    def qk_k(w: int, s: int, j: int, part: int, lane: int) -> int:
        t, g = lane % 16, lane // 16
        return lds_k(K.qk_block(part, g), K.qk_row_token(w, s, t), 2 * j + (g & 1))

    def tr8(w: int, kc: int, ch: int, lane: int) -> int:
        t, g = lane % 16, lane // 16
        return lds_k(w, K.pv_token(kc, g, t >> 1), ch) + (t & 1) * 8

    def qk_scale(w: int, s: int, lane: int) -> int:
        t, g = lane % 16, lane // 16
        return lds_scale(g, K.qk_row_token(w, s, t))

    def pv_scale(w: int, kc: int, k: int, lane: int) -> int:
        g = lane // 16
        return lds_scale(w, K.pv_token(kc, g, 4 * k))

    def pv_p(kc: int, k: int, lane: int) -> int:
        t, g = lane % 16, lane // 16
        return K.lds_p(t, K.pv_token(kc, g, 4 * k))

    return Layout(name, qk_k, tr8, qk_scale, pv_scale, pv_p)


def current_layout() -> Layout:
    """gfx950.py's layout (slot swizzle, padded scale rows), through its own functions."""
    lay = _gfx950_layout("this kernel (after)", K.token_slot, K.SCALE_ROW_BYTES)
    # the model's copies of lds_k / lds_scale must be gfx950's
    for w in range(4):
        for lane in LANES:
            assert lay.tr8(w, 3, 7, lane) == K.tr8_address(w, 3, 7, lane % 16, lane // 16)
            assert lay.qk_scale(w, 1, lane) == K.lds_scale(lane // 16, K.qk_row_token(w, 1, lane % 16))
    return lay


def unswizzled_layout() -> Layout:
    """This kernel without the swizzle: slot = token, scale rows of 128 x 4 bytes."""
    return _gfx950_layout("this kernel (before)", lambda x: x, K.TILE * 4)


def _fsw(tok: int) -> int:
    return ((tok >> 1) & 7) ^ (((tok >> 4) & 1) << 1)


def seed_layout() -> Layout:
    """The seed's latent tile as its documentation gives it (latent reads only)."""

    def qk_k(w: int, s: int, j: int, part: int, lane: int) -> int:
        t, g = lane % 16, lane // 16
        tok = w * 32 + 16 * s + t
        base = (g // 2) * 16384 + tok * 128 + ((g % 2) ^ _fsw(tok)) * 16
        return (base ^ (32 * j)) + 32768 * part

    def tr8(w: int, kc: int, ch: int, lane: int) -> int:
        t, g = lane % 16, lane // 16
        hf, sub = kc >> 1, kc & 1  # the seed's PV chunk order: hf, then sub, per dc group
        i = t // 2
        tok = (g // 2) * 32 + (i // 4) * 16 + ((g % 2) * 2 + sub) * 4 + i % 4
        base = w * 16384 + tok * 128 + _fsw(tok) * 16 + (t % 2) * 8
        return (base ^ (16 * ch)) + hf * 8192

    return Layout("seed (documented)", qk_k, tr8, None, None, None)


@dataclass
class PatternCost:
    """One read pattern of a tile: instructions per tile, cycles each (max over instructions)
    under the bank model, and the conflict-free minimum."""

    name: str
    count: int
    cycles_each: int
    minimum_each: int

    @property
    def per_tile(self) -> int:
        return self.count * self.cycles_each


def tile_patterns(layout: Layout, wave: int = 0) -> list[PatternCost]:
    """Bank cycles of every LDS read pattern of one tile for one wave (max over its instances)."""
    out = []

    def worst(addr_sets: list[list[int]], width: int) -> int:
        return max(lds_cycles(a, width) for a in addr_sets)

    k_sets = [[layout.qk_k(wave, s, j, part, lane) for lane in LANES] for s in range(2) for j in range(4) for part in range(2)]
    out.append(PatternCost("QK K operand (ds_read_b128)", len(k_sets), worst(k_sets, 16), 4))
    tr_sets = [[layout.tr8(wave, kc, ch, lane) for lane in LANES] for kc in range(4) for ch in range(8)]
    out.append(PatternCost("PV V tr8 (ds_read_b64_tr_b8)", len(tr_sets), worst(tr_sets, 8), 2))
    if layout.qk_scale is not None:
        qs = layout.qk_scale
        s_sets = [[qs(wave, s, lane) for lane in LANES] for s in range(2)]
        out.append(PatternCost("QK record scale word (ds_read_b32)", 2, worst(s_sets, 4), 1))
    if layout.pv_scale is not None:
        ps = layout.pv_scale
        v_sets = [[ps(wave, kc, k, lane) for lane in LANES] for kc in range(4) for k in range(2)]
        out.append(PatternCost("PV block scales (ds_read_b128)", 8, worst(v_sets, 16), 4))
    if layout.pv_p is not None:
        pp = layout.pv_p
        p_sets = [[pp(kc, k, lane) for lane in LANES] for kc in range(4) for k in range(2)]
        out.append(PatternCost("PV P rows (ds_read_b128)", 8, worst(p_sets, 16), 4))
    return out


# ================================================================ scoreboard


@dataclass(frozen=True)
class Costs:
    """Issue costs and latencies in cycles (assumptions, see the module docstring)."""

    valu: int = 4
    trans: int = 16
    salu: int = 1
    mem_issue: int = 4
    mfma: tuple[tuple[str, int], ...] = (
        ("v_mfma_scale_f32_16x16x128_f8f6f4", 32),
        ("v_mfma_f32_16x16x32_f16", 16),
        ("v_mfma_f32_16x16x32_bf16", 16),
    )
    vm_latency: int = 1000
    lds_latency: int = 64
    smem_latency: int = 200
    barrier: int = 16


@dataclass
class Estimate:
    """One tile's scoreboard estimate: cycles, busy cycles per unit, stalls per waitcnt."""

    cycles: int
    mfma_busy: int
    lds_busy: int
    issue: int
    stalls: list[tuple[int, str, int]] = field(default_factory=list)  # (line, wait, cycles)

    @property
    def exposed_wait(self) -> int:
        return sum(c for _, _, c in self.stalls)


def _waits(ins: Instr) -> dict[str, int]:
    """The VMEM and LDS counters an s_waitcnt waits for (decoded by the reader)."""
    return {k: int(v) for k, v in ins.modifiers.items() if k in ("vmcnt", "lgkmcnt")}


def simulate(instrs: Sequence[Instr], ds_cycles: Callable[[Instr], int], costs: Costs = Costs(), iterations: int = 3) -> Estimate:
    """Run `instrs` (one iteration, in issue order) `iterations` times; the last one's estimate."""
    mfma_cost = dict(costs.mfma)
    t = 0
    ready: dict[str, int] = {}
    vm: list[int] = []  # completion times, in order
    lgkm: list[int] = []
    mfma_free = 0
    lds_free = 0
    est = Estimate(0, 0, 0, 0)
    reads = [F.uses(ins) for ins in instrs]
    writes = [F.defs(ins) for ins in instrs]
    for it in range(iterations):
        last = it == iterations - 1
        t0, m0, l0 = t, 0, 0
        stalls = []
        issue = 0
        for ins, read, written in zip(instrs, reads, writes):
            m = ins.mnemonic
            start = max([t] + [ready.get(r, 0) for r in read])
            if m == "s_waitcnt":
                w = _waits(ins)
                need = start
                if "vmcnt" in w and len(vm) > w["vmcnt"]:
                    need = max(need, vm[len(vm) - w["vmcnt"] - 1])
                if "lgkmcnt" in w and len(lgkm) > w["lgkmcnt"]:
                    need = max(need, sorted(lgkm)[len(lgkm) - w["lgkmcnt"] - 1])
                if need > start and last:
                    stalls.append((ins.line, " ".join(f"{k}({v})" for k, v in w.items()), need - start))
                t = need + 1
                vm = [c for c in vm if c > t]
                lgkm = [c for c in lgkm if c > t]
                continue
            if m == "s_barrier":
                t = start + costs.barrier
                continue
            if m in mfma_cost:
                s = max(start, mfma_free)
                mfma_free = s + mfma_cost[m]
                for r in written:
                    ready[r] = mfma_free
                m0 += mfma_cost[m]
                t = s + costs.valu
                issue += costs.valu
                continue
            if m.startswith(("global_", "buffer_")):
                done = max([start + costs.vm_latency] + vm[-1:])
                vm.append(done)
                t = start + costs.mem_issue
                issue += costs.mem_issue
                continue
            if m.startswith("ds_"):
                cyc = ds_cycles(ins)
                s = max(start, lds_free)
                lds_free = s + cyc
                lgkm.append(lds_free + costs.lds_latency)
                l0 += cyc
                t = start + costs.mem_issue
                issue += costs.mem_issue
                continue
            if m.startswith("s_load"):
                lgkm.append(start + costs.smem_latency)
                t = start + costs.salu
                issue += costs.salu
                continue
            if m.startswith("s_"):
                t = start + costs.salu
                issue += costs.salu
                for r in written:
                    ready[r] = t
                continue
            cost = costs.trans if m.startswith(("v_exp", "v_log", "v_rcp", "v_sqrt", "v_rsq")) else costs.valu
            t = start + cost
            issue += cost
            for r in written:
                ready[r] = t
        if last:
            est = Estimate(t - t0, m0, l0, issue, stalls)
    return est


def loop_path(prog: Program) -> list[Instr]:
    """The instructions of the tile loop's longest iteration path (the refill path)."""
    loop = next(lp for lp in prog.loops if any(i.mnemonic.startswith("v_mfma_scale") for i in prog.loop_instrs(lp)))
    paths = F.iteration_paths(prog, loop)
    best = max(paths, key=lambda p: sum(len(prog.block_instrs(b)) for b in p))
    return [i for b in best for i in prog.block_instrs(b)]


def ds_cost_function(layout: Layout) -> Callable[[Instr], int]:
    """LDS cycles of an ISA instruction under `layout`: tr8 reads and the b32 scale-word reads
    take the layout's modelled cycles, every other access its conflict-free minimum (the
    patterns of tile_patterns show those are conflict-free or broadcasts)."""
    pats = {p.name: p.cycles_each for p in tile_patterns(layout)}
    tr8 = pats["PV V tr8 (ds_read_b64_tr_b8)"]
    sw = pats.get("QK record scale word (ds_read_b32)", 1)

    def cost(ins: Instr) -> int:
        m = ins.mnemonic
        if m == "ds_read_b64_tr_b8":
            return tr8
        if m == "ds_read_b32":
            return sw
        for w, c in (("b128", 4), ("b96", 3), ("b64", 2), ("2_b64", 4), ("2_b32", 2)):
            if m.endswith(w):
                return c
        return 1

    return cost


def estimate_isa(text: str, layout: Layout, costs: Costs = Costs()) -> Estimate:
    """Per-tile estimate of a compiled kernel's tile loop (refill path) under `layout`'s banks."""
    return simulate(loop_path(parse_program(text)), ds_cost_function(layout), costs)


# ================================================================ the seed's tile, as documented


def seed_tile_listing() -> str:
    """One iteration of the seed's tile loop in assembly form, from the structure its
    documentation gives (instruction kinds and order; registers chosen so the MFMA chains and
    waits depend as described; address arithmetic omitted):

    vmcnt(0) + barrier; index loads of tile t + 2 (QK rows); QK: K reads 2 ahead of the 16
    scaled MFMAs (hi, lo per j), 4 rope bf16 MFMAs; scale words to LDS, 8 S-layout scale reads;
    8 v_exp-free selects, tile max write, lgkmcnt(0) + barrier; max read, 9 v_exp; P store,
    lgkmcnt(0) + barrier; P reads; 16 tr8 reads, 16 f16 MFMAs; 16 tr8 reads, lgkmcnt(0), the
    refill DMA (16 bpermutes + 16 global_load_lds_dwordx4), 16 f16 MFMAs; side data of tile t + 1
    (2 scale + 4 rope global loads); DMA index loads of tile t + 2.
    """
    L: list[str] = ["sparse_mla_seed_tile:"]
    a = L.append
    a("\ts_waitcnt vmcnt(0)")
    a("\ts_barrier")
    a("\tbuffer_load_dword v200, v201, s[4:7], 0 offen")
    a("\tbuffer_load_dword v202, v203, s[4:7], 0 offen")
    reads = [f"\tds_read_b128 v[{100 + 8 * (j % 3)}:{103 + 8 * (j % 3)}], v90" for j in range(8)]
    for j in range(2):
        a(reads[j])
        a(
            reads[j]
            .replace("v90", "v90 offset:32768")
            .replace(f"v[{100 + 8 * (j % 3)}:", f"v[{104 + 8 * (j % 3)}:")
            .replace(f":{103 + 8 * (j % 3)}]", f":{107 + 8 * (j % 3)}]")
        )
    for j in range(8):
        s = j // 4
        a(f"\ts_waitcnt lgkmcnt({2 if j < 6 else 0})")
        if j + 2 < 8:
            a(reads[j + 2])
            a(reads[j + 2].replace("v90", "v90 offset:32768"))
        acc = f"v[{20 + 4 * s}:{23 + 4 * s}]"
        a(f"\tv_mfma_scale_f32_16x16x128_f8f6f4 {acc}, v[100:107], v[0:7], {acc}, v60, v61 op_sel_hi:[0,0,0]")
        a(f"\tv_mfma_scale_f32_16x16x128_f8f6f4 {acc}, v[100:107], v[8:15], {acc}, v60, v62 op_sel_hi:[0,0,0]")
    for s in range(2):
        for i in range(2):
            acc = f"v[{20 + 4 * s}:{23 + 4 * s}]"
            a(f"\tv_mfma_f32_16x16x32_bf16 {acc}, v[{140 + 4 * i}:{143 + 4 * i}], v[150:153], {acc}")
    for s in range(2):
        a("\tds_write_b32 v91, v63")
    for k in range(8):
        a(f"\tds_read_b128 v[{160 + 4 * (k % 2)}:{163 + 4 * (k % 2)}], v92")
    a("\ts_waitcnt lgkmcnt(0)")
    for k in range(8):
        a(f"\tv_cndmask_b32_e32 v{170 + k}, v64, v{20 + k}, vcc")
        a(f"\tv_max_f32_e32 v180, v180, v{170 + k}")
    a("\tv_permlane16_swap_b32_e32 v180, v181")
    a("\tv_permlane32_swap_b32_e32 v180, v181")
    a("\tds_write_b32 v93, v180")
    a("\ts_waitcnt lgkmcnt(0)")
    a("\ts_barrier")
    a("\tds_read_b128 v[184:187], v94")
    a("\ts_waitcnt lgkmcnt(0)")
    for k in range(9):
        a(f"\tv_exp_f32_e32 v{188 + k}, v{184 + k % 4}")
    for k in range(8):
        a(f"\tv_pk_mul_f32 v[{30 + 4 * k}:{31 + 4 * k}], v[{30 + 4 * k}:{31 + 4 * k}], v[188:189]")
        a(f"\tv_pk_mul_f32 v[{32 + 4 * k}:{33 + 4 * k}], v[{32 + 4 * k}:{33 + 4 * k}], v[188:189]")
    for k in range(2):
        a("\tds_write_b128 v95, v[188:191]")
    a("\ts_waitcnt lgkmcnt(0)")
    a("\ts_barrier")
    for k in range(8):
        a(f"\tds_read_b128 v[{100 + 4 * (k % 4)}:{103 + 4 * (k % 4)}], v96")
    for half in range(2):
        for r in range(16):
            a(f"\tds_read_b64_tr_b8 v[{200 + 2 * r}:{201 + 2 * r}], v97 offset:{(r % 4) * 8192 + (r // 4) * 16}")
        if half == 1:
            a("\ts_waitcnt lgkmcnt(0)")
            for j in range(16):
                a(f"\tds_bpermute_b32 v{240 + (j % 8)}, v98, v99")
            a("\ts_waitcnt lgkmcnt(0)")
            for j in range(16):
                a("\ts_mov_b32 m0, s10")
                a(f"\tglobal_load_lds_dwordx4 v[{240 + 2 * (j % 4)}:{241 + 2 * (j % 4)}], off")
        else:
            a("\ts_waitcnt lgkmcnt(0)")
        for r in range(16):
            dc = 4 * half + r // 4
            acc = f"v[{30 + 4 * dc}:{33 + 4 * dc}]"
            for k in range(4):
                a(f"\tv_cvt_scalef32_pk_f16_fp8 v{120 + k}, v{200 + 2 * r}, 1.0")
            a(f"\tv_mfma_f32_16x16x32_f16 {acc}, v[120:123], v[124:127], {acc}")
    for k in range(2):
        a("\tglobal_load_dword v230, v[232:233], off")
        for i in range(2):
            a("\tglobal_load_dwordx4 v[140:143], v[232:233], off")
    a("\tbuffer_load_dword v204, v205, s[4:7], 0 offen")
    a("\tbuffer_load_dword v206, v207, s[4:7], 0 offen")
    a("\ts_cbranch_scc1 sparse_mla_seed_tile")
    a("\ts_endpgm")
    return "\n".join(L) + "\n"


def estimate_seed(costs: Costs = Costs()) -> Estimate:
    """The seed's documented tile structure under the same scoreboard and its own banks."""
    prog = parse_program(seed_tile_listing())
    return simulate(prog.instrs[:-2], ds_cost_function(seed_layout()), costs)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the bank table of the three layouts and the scoreboard estimates of the seed's
    structure and of each ISA dump given (`--isa PATH[:before]`: ':before' reads it with the
    unswizzled layout's banks)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kernel.flydsl.pipeline_model")
    ap.add_argument("--isa", action="append", default=[], help="final ISA dump (append ':before' for the old layout)")
    ap.add_argument("--latency", default="500,1000,2000", help="VMEM latencies in cycles")
    args = ap.parse_args(argv)
    print(
        "| read pattern (per wave, per tile) | "
        + " | ".join(lay.name for lay in (unswizzled_layout(), current_layout(), seed_layout()))
        + " |"
    )
    print("| --- | --- | --- | --- |")
    pats = [{p.name: p for p in tile_patterns(lay)} for lay in (unswizzled_layout(), current_layout(), seed_layout())]
    for name in pats[0]:
        cells = [f"{d[name].count} x {d[name].cycles_each} = {d[name].per_tile}" if name in d else "-" for d in pats]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("| tile loop | VMEM latency | cycles per tile | MFMA busy | LDS busy | exposed VMEM wait | exposed LDS wait |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for lat in (int(x) for x in args.latency.split(",")):
        costs = Costs(vm_latency=lat)
        rows = [("seed structure (documented)", estimate_seed(costs))]
        for spec in args.isa:
            path, _, tag = spec.partition(":")
            lay = unswizzled_layout() if tag == "before" else current_layout()
            with open(path) as fh:
                rows.append((f"{path.split('/')[-2]}{' (before)' if tag == 'before' else ''}", estimate_isa(fh.read(), lay, costs)))
        for name, e in rows:
            vm = sum(c for _, w, c in e.stalls if "vmcnt" in w)
            print(f"| {name} | {lat} | {e.cycles} | {e.mfma_busy} | {e.lds_busy} | {vm} | {e.exposed_wait - vm} |")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
