"""Side-by-side timing of the references and every peer kernel, with the machine's limits beside them.

One run times, on the same inputs (conformance.tools.bench's shapes: n_q rows of KEYS uniform keys
from a 1,048,576-record pow2 cache, H heads, softmax_scale 576^-0.5):
- `oracle` (oracle.reference.reference, float64 on the device) and `emulated`;
- each adapter through its contract callable (`flashmla`, `flashmla-prefill`, `torch-sdpa`), and
  each bare kernel on inputs the adapter prepared beforehand (`...:bare`: FlashMLA decode at its
  native 64 heads with the scheduler metadata reused, as a server would; the sparse prefill on
  the prepared bf16 KV and slot indices; the mem-efficient SDPA op on the gathered keys and bias).
  An adapter keeps the index layout of index tensors it has seen (kernel.backends.flashmla.
  LayoutCache: a server calls every layer of a step with one batch's indices); `NAME:new-index`
  times the adapter on fresh copies of the index tensors each call (a new batch: layout rebuilt).
Times are CUDA-event device times per call (median of up to --iters calls after --warmup).
"x bare" is an adapter row's median over its bare kernel's median at the same n_q.

Limits printed beside each row, for the call's bytes and arithmetic:
- gather = n_q * keys * 656 B / peak bandwidth (H200: 4.8 TB/s, spec sheet);
- fp64 = 2 * H * n_q * keys * (576 + 512) FLOP / fp64 peak (H200: 67 TFLOP/s fp64 tensor core,
  spec sheet): the oracle's arithmetic limit; oracle limit = gather + fp64.
The JSON report (--json) holds every sample.

Usage: python3 scripts/peers_bench.py [--n-q 1,64,1024,4096] [--kernels oracle,emulated] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: runs from a clone without an install

from conformance.tools.bench import build_cache, build_inputs, peak_bandwidth, time_calls
from kernel.record import LATENT_DIM, RECORD_BYTES, ROPE_DIM
from kernel.registry import BackendUnavailable, resolve

FP64_PEAK = {"H200": 67e12, "H100": 67e12}


def fp64_peak(name: str) -> float | None:
    """FP64 tensor-core peak FLOP/s of a device called `name` (spec sheets), None if unknown."""
    for key, value in FP64_PEAK.items():
        if key.lower() in name.lower():
            return value
    return None


def cases(inputs: Any, heads: int, seed: int, wanted: set[str] | None = None) -> list[tuple[str, Callable[[], object]]]:
    """(row name, timed callable) for every kernel this machine runs (among `wanted`, when given)."""
    args = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
    rows: list[tuple[str, Callable[[], object]]] = []
    from oracle.reference import reference

    if wanted is None or "oracle" in wanted:
        rows.append(("oracle", lambda: reference(*args)))
    for name in ("emulated", "flashmla", "flashmla-prefill", "torch-sdpa"):
        if wanted is not None and name not in wanted:
            continue
        try:
            backend = resolve(name)
        except BackendUnavailable as err:
            print(f"bench: {name} unavailable: {err}", file=sys.stderr)
            continue
        if inputs.q.device.type not in backend.devices:
            continue
        bare = bare_kernel(name, inputs, seed)  # first, so each adapter row can print its ratio to it
        if bare is not None:
            rows.append((name + ":bare", bare))
        rows.append((name, lambda backend=backend: backend(*args, return_lse=True)))
        if name != "emulated":
            # the same call with index tensors the adapter has not seen: its index layout is
            # built again (a new batch), where the row above reuses it (the next layer of a step)
            q, kv, idx, ptr, scale = args
            rows.append((name + ":new-index", lambda backend=backend: backend(q, kv, idx.clone(), ptr.clone(), scale, return_lse=True)))
    return rows


def bare_kernel(name: str, inputs: Any, seed: int) -> Callable[[], object] | None:
    """The kernel alone on inputs prepared by its adapter (module docstring), or None."""
    args = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
    if name == "flashmla":
        from kernel.backends.flashmla import load_flash_mla, prepare_call

        module = load_flash_mla()
        gen = torch.Generator(device=inputs.q.device).manual_seed(seed + 7)
        q64 = torch.randn(inputs.n_q, 64, inputs.q.shape[-1], generator=gen, device=inputs.q.device).to(torch.bfloat16)
        call = prepare_call(q64, *args[1:])
        sched = module.get_mla_metadata()[0]
        return lambda: call.run(module, sched)
    if name == "flashmla-prefill":
        from kernel.backends.flashmla import load_flash_mla
        from kernel.backends.flashmla_prefill import prepare_prefill

        module = load_flash_mla()
        pcall = prepare_prefill(*args)
        return lambda: pcall.run(module)
    if name == "torch-sdpa" and inputs.q.device.type == "cuda":
        from kernel.backends.torch_sdpa import prepare_sdpa

        return prepare_sdpa(*args).run
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="1,64,1024,4096")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=3.0)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--kernels", default=None, help="comma-separated kernel names to time (a row NAME:... counts as NAME); default all")
    args = parser.parse_args(argv)
    wanted = None if args.kernels is None else set(args.kernels.split(","))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    peak_bw, name = peak_bandwidth(device)
    peak_fp64 = fp64_peak(name)
    cache = build_cache(args.cache_rows, device, seed=args.seed)
    results: list[dict[str, Any]] = []
    header = (
        f"{'KERNEL':<22} {'N_Q':>5} {'MEDIAN ms':>10} {'MIN ms':>9} {'GB/s':>8}  {'gather lim ms':>13} {'fp64 lim ms':>11} {'x limit':>8}"
        f" {'x bare':>7}"
    )
    print(
        f"device {name}; peak {peak_bw and peak_bw / 1e12} TB/s, fp64 {peak_fp64 and peak_fp64 / 1e12} TFLOP/s (spec sheets); "
        f"keys {args.keys}, H {args.heads}, cache {args.cache_rows} rows"
    )
    print(header)
    print("-" * len(header))
    for n_q in [int(x) for x in args.n_q.split(",")]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads, seed=args.seed)
        nbytes = n_q * args.keys * RECORD_BYTES
        flops = 2 * args.heads * n_q * args.keys * (LATENT_DIM + ROPE_DIM + LATENT_DIM)
        gather_ms = None if peak_bw is None else nbytes / peak_bw * 1e3
        fp64_ms = None if peak_fp64 is None else flops / peak_fp64 * 1e3
        bare_ms: dict[str, float] = {}
        for row, fn in cases(inputs, args.heads, args.seed, wanted):
            entry: dict[str, Any] = {
                "kernel": row,
                "n_q": n_q,
                "keys": args.keys,
                "heads": args.heads,
                "gather_limit_ms": gather_ms,
                "fp64_limit_ms": fp64_ms,
            }
            try:
                timing = time_calls(fn, device, warmup=args.warmup, iters=args.iters, max_seconds=args.max_seconds)
            except Exception as err:  # noqa: BLE001 - report and go on
                entry["status"] = f"error: {type(err).__name__}: {str(err)[:300]}"
                print(f"{row:<22} {n_q:>5} {entry['status']}")
                results.append(entry)
                continue
            limit = (gather_ms or 0) + (fp64_ms or 0) if row == "oracle" else gather_ms
            entry.update(
                status="ok",
                median_ms=timing.median_ms,
                min_ms=timing.min_ms,
                samples_ms=timing.samples_ms,
                gbps=nbytes / (timing.median_ms * 1e-3) / 1e9,
                limit_ms=limit,
                x_limit=None if not limit else timing.median_ms / limit,
            )
            base = row.split(":")[0]
            if row.endswith(":bare"):
                bare_ms[base] = timing.median_ms
            elif base in bare_ms:
                entry["x_bare"] = timing.median_ms / bare_ms[base]
            results.append(entry)
            print(
                f"{row:<22} {n_q:>5} {timing.median_ms:>10.4f} {timing.min_ms:>9.4f} {entry['gbps']:>8.1f}  "
                f"{gather_ms or float('nan'):>13.4f} {fp64_ms or float('nan'):>11.4f} {entry['x_limit'] or float('nan'):>8.1f}"
                f" {entry['x_bare'] if 'x_bare' in entry else float('nan'):>7.2f}",
                flush=True,
            )
        del inputs
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print("x limit: median / (gather + fp64 limit) for the oracle, median / gather limit for the others")
    print(
        "x bare: median / the bare kernel's median (same n_q); NAME reuses the index layout across calls (same index "
        "tensors: the next layer of a step), NAME:new-index gets fresh index tensors each call (a new batch)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"device": name, "peak_bandwidth": peak_bw, "fp64_peak": peak_fp64, "results": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
