"""Speed of the flydsl-isa backend on small exact-arithmetic problems.

    python scripts/isa_bench.py [--repeat N] [--ops K] [--only 0,4]

Prints, per problem: CPU seconds of the call (the minimum over N repeats: process_time, which
other load on the machine inflates less than wall time, and the minimum least), wall seconds of
that repeat, instructions executed (all waves), instructions per CPU-second, and CPU seconds per
query row. The ISA is compiled (cached) and decoded beforehand. With --ops K, also the K opcodes
of the first problem run that take the most CPU time (thread_time around each instruction, minimum
over the repeats; the timing itself adds about 1 us per instruction).
"""

from __future__ import annotations

import argparse
import collections
import time

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


def main(argv: list[str] | None = None) -> int:
    from kernel.backends.flydsl_isa import flydsl_isa_sparse_mla, get_kernel, last_stats

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="calls per problem; the fastest (CPU) is reported")
    ap.add_argument("--ops", type=int, default=0, help="also list the K costliest opcodes of the first selected problem")
    ap.add_argument("--only", default="", help="comma-separated indices of PROBLEMS to run (default: all)")
    a = ap.parse_args(argv)
    chosen = [PROBLEMS[int(i)] for i in a.only.split(",")] if a.only else PROBLEMS
    for h, hi, rl, rows in chosen:
        get_kernel(h, hi, rl)
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
    if a.ops:
        _op_table(a.ops, a.repeat, chosen[0])
    return 0


def _op_table(k: int, repeat: int, problem: tuple) -> None:
    """CPU time per opcode on the first problem (the decoded closures, per-wave and batched,
    wrapped in timers; a batched closure's time is one call for its whole lockstep group)."""
    from kernel.backends.flydsl_isa import flydsl_isa_sparse_mla, get_kernel

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
    for m, t in sorted(best.items(), key=lambda kv: -kv[1])[:k]:
        print(f"  {m:50s} {t * 1e3:8.1f} ms  {100 * t / total:5.1f} %")


if __name__ == "__main__":
    raise SystemExit(main())
