"""Speed of the flydsl-isa backend (the compiled FlyDSL kernel on the ISA interpreter) on small
exact-arithmetic problems, on the CPU.

    python -m benchmarks isa [--repeat N] [--ops K] [--only 0,4] [--json PATH]

Prints, per problem: CPU seconds of the call (the minimum over N repeats: process_time, which
other load on the machine inflates less than wall time, and the minimum least), wall seconds of
that repeat, instructions executed (all waves), instructions per CPU-second, and CPU seconds per
query row. The ISA is compiled (cached) and decoded beforehand. With --ops K, also the K opcodes
of the first problem run that take the most CPU time (thread_time around each instruction, minimum
over the repeats; the timing itself adds about 1 us per instruction). A configuration whose ISA is
not in the cache is compiled first (kernel.flydsl.isa_cache: minutes on a cold cache).
Exit codes: 0 measured; 2 a bad option or the ISA cannot be built here (no flydsl).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from benchmarks.common import add_json, parse, positive, write_json

# many rows of mixed lengths, as the suite draws
ROWS40 = (3, 100, 17, 250, 0, 64, 128, 31, 90, 200, 5, 7, 300, 12, 44, 80, 150, 16, 20, 1) * 2
PROBLEMS = [
    (16, True, True, (5, 130)),
    (16, False, False, (128,)),
    (1, False, True, (128,)),
    (8, True, False, (256, 256, 0, 37)),
    (1, False, False, (128,)),
    (5, True, True, ROWS40),
]


def _problem(h: int, hi: bool, rl: bool, rows: tuple[int, ...]):
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    r = Recipe(
        seed=3,
        n_q=len(rows),
        heads=h,
        row_lengths=rows,
        cache_rows=600,
        latent="exact",
        rope="exact",
        q="exact",
        softmax_scale="exact",
        has_invalid=hi,
        return_lse=rl,
    )
    return materialize(r, "cpu")


def _only(text: str) -> list[int]:
    try:
        picked = [int(i) for i in text.split(",") if i.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated problem numbers, got {text!r}") from None
    if not picked or any(not 0 <= i < len(PROBLEMS) for i in picked):
        raise argparse.ArgumentTypeError(f"problem numbers are 0..{len(PROBLEMS) - 1}, got {text!r}")
    return picked


def main(argv: list[str]) -> int:
    """The routine (module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks isa", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=positive, default=3, help="calls per problem; the fastest (CPU) is reported")
    ap.add_argument("--ops", type=int, default=0, help="also list the K costliest opcodes of the first selected problem")
    ap.add_argument("--only", type=_only, default=None, help=f"comma-separated numbers 0..{len(PROBLEMS) - 1} of the problems to run")
    add_json(ap)
    a = parse(ap, argv)
    if isinstance(a, int):
        return a
    from kernel.flydsl.isa_backend import flydsl_isa_sparse_mla, get_kernel, last_stats
    from kernel.flydsl.isa_cache import IsaBuildError

    chosen = [PROBLEMS[i] for i in a.only] if a.only else PROBLEMS
    results = []
    for h, hi, rl, rows in chosen:
        try:
            get_kernel(h, hi, rl)
        except IsaBuildError as err:
            print(f"isa: the ISA of H{h} has_invalid={int(hi)} return_lse={int(rl)} cannot be built here: {err}", file=sys.stderr)
            return 2
        p = _problem(h, hi, rl, rows)
        best = None
        for _ in range(max(1, a.repeat)):
            t, c = time.perf_counter(), time.process_time()
            flydsl_isa_sparse_mla(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, has_invalid=hi, return_lse=rl)
            dt, dc = time.perf_counter() - t, time.process_time() - c
            if best is None or dc < best[1]:
                best = (dt, dc)
        dt, dc = best
        n = last_stats[0].instructions
        shown = rows if len(rows) <= 4 else f"({len(rows)} rows, {sum(rows)} keys)"
        print(
            f"H{h} has_invalid={int(hi)} return_lse={int(rl)} rows {shown}: {dc:.3f} s CPU ({dt:.3f} s wall), "
            f"{n} instructions, {n / dc:,.0f} instructions/CPU-s, {dc / len(rows):.3f} CPU-s/row"
        )
        results.append({"heads": h, "has_invalid": hi, "return_lse": rl, "rows": list(rows), "cpu_s": dc, "wall_s": dt, "instructions": n})
    if a.ops:
        results[0]["opcodes_cpu_s"] = _op_table(a.ops, a.repeat, chosen[0])
    write_json(a.json, results)
    return 0


def _op_table(k: int, repeat: int, problem: tuple) -> dict[str, float]:
    """CPU time per opcode on the first problem (the decoded closures, per-wave and batched,
    wrapped in timers; a batched closure's time is one call for its whole lockstep group),
    printed; the K costliest returned (opcode -> CPU s)."""
    from kernel.flydsl.isa_backend import flydsl_isa_sparse_mla, get_kernel

    h, hi, rl, rows = problem
    dec = get_kernel(h, hi, rl).decoded
    orig, borig = list(dec.code), list(dec.bcode)
    clock = time.thread_time
    runs: list[collections.Counter] = []
    cur: collections.Counter = collections.Counter()

    def wrap(f, m):
        def timed(*a):
            t = clock()
            r = f(*a)
            cur[m] += clock() - t
            return r

        return timed

    names = [i.mnemonic for i in dec.program.instrs]
    dec.code[:] = [wrap(f, m) for f, m in zip(orig, names)]
    dec.bcode[:] = [None if f is None else wrap(f, m + " (batched)") for f, m in zip(borig, names)]
    try:
        p = _problem(h, hi, rl, rows)
        for _ in range(max(1, repeat)):
            cur.clear()
            flydsl_isa_sparse_mla(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, has_invalid=hi, return_lse=rl)
            runs.append(collections.Counter(cur))
    finally:
        dec.code[:], dec.bcode[:] = orig, borig
    best = {m: min(r.get(m, 0.0) for r in runs) for m in runs[0]}
    total = sum(best.values())
    print(f"\nopcodes of H{h} rows {rows if len(rows) <= 4 else len(rows)} by CPU time (min over {len(runs)} runs; {total:.3f} s in all):")
    top = sorted(best.items(), key=lambda kv: -kv[1])[:k]
    for m, t in top:
        print(f"  {m:50s} {t * 1e3:8.1f} ms  {100 * t / total:5.1f} %")
    return dict(top)
