"""Speed of the flydsl-isa backend on small exact-arithmetic problems.

    python scripts/isa_bench.py

Prints, per problem: wall and CPU seconds of the call (ISA cached and decoded beforehand),
instructions executed (all waves), instructions per CPU-second, and seconds per query row.
"""

from __future__ import annotations

import time

PROBLEMS = [(16, True, True, (5, 130)), (16, False, False, (128,)), (1, False, True, (128,)), (8, True, False, (256, 256, 0, 37))]


def main() -> int:
    from kernel.isa.backend import flydsl_isa_sparse_mla, get_kernel, last_stats
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    for h, hi, rl, rows in PROBLEMS:
        get_kernel(h, hi, rl)
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
        p = materialize(r, "cpu")
        t, c = time.perf_counter(), time.process_time()
        flydsl_isa_sparse_mla(p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale, has_invalid=hi, return_lse=rl)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        n = last_stats[0].instructions
        print(
            f"H{h} has_invalid={int(hi)} return_lse={int(rl)} rows {rows}: {dt:.2f} s wall, {dc:.2f} s CPU, "
            f"{n} instructions, {n / dc:,.0f} instructions/CPU-s, {dt / len(rows):.2f} s/row"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
