"""Time of the bf16-KV adapters' key gather, by way of gathering.

The torch-sdpa adapter's one cost beyond its bare kernel is building the dense bf16 keys of the
selected slots. Ways timed on the bench's shapes (conformance.tools.bench: n_q rows of --keys
uniform slots of a --cache-rows pow2 cache):
- bf16 / int32 / int64: `index_select` of 1152-byte rows from the whole cache kept dequantised
  (kernel.peers.dequant_cache), the rows copied as 576 bf16, 288 int32 or 144 int64 elements
  (views of the same bytes); 1152 bytes read and 1152 written per slot;
- fused: kernel.peers.bf16_key_decode (one Triton pass from the fp8 records: 656 bytes read, 1152
  written per slot), where its fast path peers.bf16-keys gives a variant (kernel.fastpath: CUDA,
  its self-check passed on the device, CONFORMANCE_FAST_PATHS not turning it off).
Every way is checked against the bf16 gather's bits.

    python -m benchmarks gather [--device cuda] [--n-q 64,1024,4096] [--keys 2048] [--json PATH]

Printed per way and n_q: median ms (CUDA events on a GPU, process CPU time on the CPU:
conformance.tools.bench.time_calls), bytes moved (read + write per slot, times the slots) and the
rate they imply (TB/s), and whether the bits equal the bf16 gather's. Exit 1 when a way's bits
differ, 2 for a bad option.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import add_device, add_json, add_shape, add_timing, cache_rows, parse, resolve_device, write_json
from conformance.tools.bench import build_cache, time_calls
from kernel import fastpath
from kernel.peers import bf16_key_decode
from kernel.peers.dequant_cache import dequantise_whole
from kernel.record import HEAD_DIM, RECORD_BYTES

WAYS = {"bf16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64}


def main(argv: list[str]) -> int:
    """The routine (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks gather", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_device(parser)
    add_shape(parser, n_q=(64, 1024, 4096), heads=16)
    add_timing(parser)
    parser.add_argument("--max-seconds", type=float, default=5.0, metavar="S", help="timing budget per case (default 5)")
    add_json(parser)
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    device = resolve_device(args)
    rows = cache_rows(args, device)
    gen = torch.Generator(device=device).manual_seed(0)
    cache = build_cache(rows, device)
    whole = dequantise_whole(cache)
    variant = fastpath.choose(bf16_key_decode.FAST_PATH, device)
    print(f"fused decode: {variant or 'not chosen here (no CUDA or Triton, its self-check failed, or switched off)'}")
    print(f"{'way':<6} {'n_q':>5} {'median ms':>10} {'GB moved':>9} {'TB/s':>6}  same bits")
    results: list[dict[str, object]] = []
    same_everywhere = True

    def report(way: str, n_q: int, ms: float, moved: int, same: bool) -> None:
        nonlocal same_everywhere
        same_everywhere &= same
        print(f"{way:<6} {n_q:>5} {ms:>10.4f} {moved / 1e9:>9.2f} {moved / (ms * 1e-3) / 1e12:>6.2f}  {same}", flush=True)
        results.append({"way": way, "n_q": n_q, "median_ms": ms, "bytes_moved": moved, "same_bits": same})

    for n_q in args.n_q:
        idx = torch.randint(0, rows, (n_q * args.keys,), generator=gen, device=device)
        ref = whole.index_select(0, idx)
        moved = 2 * ref.numel() * ref.element_size()
        for way, dtype in WAYS.items():
            src = whole.view(dtype)
            got = src.index_select(0, idx).view(torch.bfloat16)
            same = bool(torch.equal(got.view(torch.int16), ref.view(torch.int16)))
            timing = time_calls(
                lambda src=src: src.index_select(0, idx), device, warmup=args.warmup, iters=args.iters, max_seconds=args.max_seconds
            )
            report(way, n_q, timing.median_ms, moved, same)
            del got
        if variant is not None:
            keys = torch.empty_like(ref)
            bf16_key_decode.launch(cache, idx, keys, variant)
            same = bool(torch.equal(keys.view(torch.int16), ref.view(torch.int16)))
            fused = lambda: bf16_key_decode.launch(cache, idx, keys, variant)  # noqa: E731
            timing = time_calls(fused, device, warmup=args.warmup, iters=args.iters, max_seconds=args.max_seconds)
            report("fused", n_q, timing.median_ms, idx.numel() * (RECORD_BYTES + HEAD_DIM * 2), same)
            del keys
        del ref
    write_json(args.json, {"device": str(device), "cache_rows": rows, "keys": args.keys, "fused_variant": variant, "results": results})
    return 0 if same_everywhere else 1
