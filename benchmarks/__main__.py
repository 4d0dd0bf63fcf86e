"""`python -m benchmarks ROUTINE [ARGS]`: the one driver of the project's measurements.

Each routine is a module of this package with `main(argv) -> int` and a docstring saying what it
measures, in which units, and how to read it. ROUTINES names them; `python -m benchmarks` lists them.
"""

from __future__ import annotations

import importlib
import sys

ROUTINES: dict[str, str] = {
    "quickstart": "the README's user steps (install, first verdict, whole suite, three planted bugs), timed",
    "campaign": (
        "N concurrent fuzz processes per kernel pinned to GPUs (or on the CPU), optionally under MPS: one table, host and GPU "
        "utilisation; several counts of N in turn (scaling)"
    ),
    "campaign_stages": "where one fuzz campaign's time goes, stage by stage (cProfile, or wall/CPU timers and torch ops)",
    "throughput": "fuzz campaigns here and at another revision side by side: examples/s, the bare kernel's limit, stages, call shapes",
    "fuzz_kills": "fuzz campaigns against every mutant of the catalogue, per variant: examples and seconds to the first failure",
    "batch_shapes": "the shapes of the kernel calls campaigns made (query rows, keys, heads, flags), sets of run folders side by side",
    "preconditions": "cost of oracle.preconditions.check_call per call: ops, host reads, ms (--against REV)",
    "per_call": "per call of the references, emulated and the peers (bare kernel, kept state, new cache): ops, syncs, ms, memory",
    "host_work": "the peer adapters' host work per call around stand-in engines (ops, syncs, host us), repeated vs new batch",
    "fast_paths": "each fast path (kernel.fastpath) on vs off: self-checks, same bits on the bench's inputs and snapshot cases, ms",
    "gather": "the bf16-KV adapters' key gather by way (index_select as bf16 / int32 / int64, fused decode): ms, TB/s, same bits",
    "isa": "flydsl-isa (the compiled kernel on the ISA interpreter) on small exact problems: CPU s, instructions/s, top opcodes",
    "fleet": "processes as a fleet's runners around a redis-server: replay from the store, namespaces, shards, collect, store lost, cost",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help") or args[0] not in ROUTINES:
        width = max(map(len, ROUTINES))
        known = "\n".join(f"  {name:{width}s}  {what}" for name, what in ROUTINES.items())
        stream = sys.stdout if not args or args[0] in ("-h", "--help") else sys.stderr
        if args and args[0] not in ("-h", "--help"):
            print(f"benchmarks: unknown routine {args[0]!r}", file=stream)
        print(f"usage: python -m benchmarks ROUTINE [ARGS]\nroutines:\n{known}", file=stream)
        return 0 if stream is sys.stdout else 2
    module = importlib.import_module(f"benchmarks.{args[0]}")
    return int(module.main(args[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
