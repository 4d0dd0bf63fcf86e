"""Per-call cost of the references and the gathered-KV adapters: torch ops, host syncs, time.

For each kernel (`oracle`, `emulated`, `torch-sdpa`; `flashmla-prefill` on a Hopper GPU) on the
bench's inputs (conformance bench shapes: n_q rows of KEYS uniform keys, H heads), one call
under a counting dispatch mode gives the number of aten ops (on a GPU: about one kernel launch
each) and of host synchronisations (ops that read device data back to the host:
`_local_scalar_dense` (item, int(), bool()), `tolist`, `nonzero`, `unique`, ... listed in SYNC_OPS); then
the median time per call over repeated calls (CPU: process time; CUDA: device events), and on
CUDA the peak device memory one call allocates (PEAK GB).
The adapters are timed on calls with the same tensors (a serving engine's next layer: the
index layout and the dequantised cache are kept), and, as `NAME:new-cache`, on a fresh copy of
the cache each call (the first call on a cache: per-slot gather, plus the clone); on CUDA,
`NAME:bare-kept` is the bare kernel on the inputs the adapter prepares from the kept cache, and
"x bare" the adapter's median over it.

Usage: python scripts/speed21_ops.py [--n-q 1,64] [--keys 2048] [--heads 16] [--cache-rows 65536]
       [--kernels oracle,emulated,torch-sdpa] [--iters 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.tools.bench import build_cache, build_inputs, call_ms
from conformance.tools.op_count import count_ops


def peak_gb(fn: Callable[[], object], device: torch.device) -> float | None:
    """GB of device memory one call of fn allocates above what was allocated before it (CUDA's
    peak counter), None on a CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 1e9


def median_ms(fn: Callable[[], object], device: torch.device, iters: int) -> float:
    """Median per-call time in ms (CUDA events on a GPU, process time on the CPU)."""
    return statistics.median(call_ms(fn, device) for _ in range(iters))


def kernel_calls(name: str, inputs: Any) -> list[tuple[str, Callable[[], object]]]:
    """(row, callable) for kernel `name` on `inputs`; [] when it cannot run here."""
    args = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
    if name == "oracle":
        from oracle.reference import reference

        return [("oracle", lambda: reference(*args))]
    if name == "bound":
        from oracle.bound import evaluate_modes
        from oracle.profiles import load_profile

        profile = load_profile("gfx950")
        return [("bound", lambda: evaluate_modes(*args, profile=profile))]
    from kernel.registry import BackendUnavailable, resolve

    try:
        backend = resolve(name)
    except BackendUnavailable as err:
        print(f"{name}: unavailable: {err}", file=sys.stderr)
        return []
    if inputs.q.device.type not in backend.devices:
        return []
    rows: list[tuple[str, Callable[[], object]]] = []
    bare = bare_on_kept_cache(name, args)
    if bare is not None:
        rows.append((name + ":bare-kept", bare))
    rows.append((name, lambda: backend(*args, return_lse=True)))
    if name != "emulated":
        q, kv, idx, ptr, scale = args
        rows.append((name + ":new-cache", lambda: backend(q, kv.clone(), idx, ptr, scale, return_lse=True)))
    return rows


def bare_on_kept_cache(name: str, args: tuple[Any, ...]) -> Callable[[], object] | None:
    """The bare kernel on the inputs the adapter prepares from a kept dequantised cache (the
    bf16 cache and the rows' own indices for the prefill, the gathered bf16 keys for SDPA), or
    None (CPU, or no such adapter)."""
    if args[0].device.type != "cuda":
        return None
    from kernel.backends.dequant_cache import DequantCache

    cache = DequantCache()
    if name == "flashmla-prefill":
        from kernel.backends.flashmla import load_flash_mla
        from kernel.backends.flashmla_prefill import prepare_prefill

        module = load_flash_mla()
        prepare_prefill(*args, dequant_cache=cache)
        call = prepare_prefill(*args, dequant_cache=cache)
        return lambda: call.run(module)
    if name == "torch-sdpa":
        from kernel.backends.torch_sdpa import prepare_sdpa

        prepare_sdpa(*args, dequant_cache=cache)
        return prepare_sdpa(*args, dequant_cache=cache).run
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="1,64")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 16)
    parser.add_argument("--kernels", default="oracle,emulated,torch-sdpa")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    cache = build_cache(args.cache_rows, device)
    results = []
    print(f"device {device}; keys {args.keys}, H {args.heads}, cache {args.cache_rows} rows")
    print(f"{'KERNEL':<24} {'N_Q':>5} {'OPS':>6} {'SYNCS':>6} {'MEDIAN ms':>10} {'x bare':>7} {'PEAK GB':>8}  sync ops")
    for n_q in [int(x) for x in args.n_q.split(",")]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        bare_ms: dict[str, float] = {}
        for name in args.kernels.split(","):
            for row, fn in kernel_calls(name, inputs):
                fn()  # warm: caches filled, lazy imports done
                fn()
                counter = count_ops(fn)
                ms = median_ms(fn, device, args.iters)
                peak = peak_gb(fn, device)
                syncs = counter.syncs
                base = row.split(":")[0]
                if row.endswith(":bare-kept"):
                    bare_ms[base] = ms
                x_bare = ms / bare_ms[base] if base in bare_ms and not row.endswith(":bare-kept") else None
                entry = {"kernel": row, "n_q": n_q, "ops": counter.total, "syncs": syncs, "median_ms": ms, "x_bare": x_bare}
                entry["peak_gb"] = peak
                results.append({**entry, "top_ops": counter.ops.most_common(12)})
                ratio = f"{x_bare:>7.2f}" if x_bare is not None else f"{'':>7}"
                mem = f"{peak:>8.2f}" if peak is not None else f"{'':>8}"
                n_syncs = sum(syncs.values())
                print(f"{row:<24} {n_q:>5} {counter.total:>6} {n_syncs:>6} {ms:>10.3f} {ratio} {mem}  {syncs or ''}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": str(device), "results": results}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
