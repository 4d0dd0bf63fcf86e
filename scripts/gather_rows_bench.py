"""Device time of the torch-sdpa adapter's key gather, by way of gathering.

The adapter's one cost beyond its bare kernel is building the dense bf16 keys of the selected
slots (kernel.backends.torch_sdpa.prepare_sdpa). Ways timed on the bench's shapes
(conformance.tools.bench: n_q rows of KEYS uniform slots of a 1,048,576-record pow2 cache):
- bf16 / int32 / int64: `index_select` of 1152-byte rows from the whole cache kept dequantised
  (kernel.backends.dequant_cache), the rows copied as 576 bf16, 288 int32 or 144 int64 elements
  (views of the same bytes); 1152 bytes read and 1152 written per slot;
- fused: kernel.backends.bf16_key_decode (one Triton pass from the fp8 records: 656 bytes read,
  1152 written per slot), when its self-check passes on the device.
Every way is checked against the bf16 gather's bits.

Printed per way and n_q: median device ms (CUDA events, conformance.tools.bench.time_calls),
bytes moved (read + write per slot, times the slots) and the rate they imply (TB/s).

Usage: python3 scripts/gather_rows_bench.py [--n-q 64,1024,4096] [--keys 2048]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: runs from a clone without an install

from conformance.tools.bench import build_cache, time_calls  # noqa: E402
from kernel.backends import bf16_key_decode  # noqa: E402
from kernel.backends.dequant_cache import dequantise_whole  # noqa: E402
from kernel.record import HEAD_DIM, RECORD_BYTES  # noqa: E402

WAYS = {"bf16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="64,1024,4096")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gather_rows_bench: needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(0)
    cache = build_cache(args.cache_rows, device)
    whole = dequantise_whole(cache)
    variant = bf16_key_decode.available(device)
    print(f"fused decode: {variant or 'unavailable (self-check failed or no Triton)'}")
    print(f"{'way':<6} {'n_q':>5} {'median ms':>10} {'GB moved':>9} {'TB/s':>6}  same bits")
    for n_q in [int(x) for x in args.n_q.split(",")]:
        idx = torch.randint(0, args.cache_rows, (n_q * args.keys,), generator=gen, device=device)
        ref = whole.index_select(0, idx)
        moved = 2 * ref.numel() * ref.element_size()
        for way, dtype in WAYS.items():
            src = whole.view(dtype)
            got = src.index_select(0, idx).view(torch.bfloat16)
            same = bool(torch.equal(got.view(torch.int16), ref.view(torch.int16)))
            timing = time_calls(lambda src=src: src.index_select(0, idx), device, warmup=3, iters=args.iters, max_seconds=5.0)
            ms = timing.median_ms
            print(f"{way:<6} {n_q:>5} {ms:>10.4f} {moved / 1e9:>9.2f} {moved / (ms * 1e-3) / 1e12:>6.2f}  {same}")
            del got
        if variant is not None:
            keys = torch.empty_like(ref)
            bf16_key_decode.launch(cache, idx, keys, variant)
            same = bool(torch.equal(keys.view(torch.int16), ref.view(torch.int16)))
            fused = lambda: bf16_key_decode.launch(cache, idx, keys, variant)  # noqa: E731
            timing = time_calls(fused, device, warmup=3, iters=args.iters, max_seconds=5.0)
            ms = timing.median_ms
            fused_moved = idx.numel() * (RECORD_BYTES + HEAD_DIM * 2)
            print(f"{'fused':<6} {n_q:>5} {ms:>10.4f} {fused_moved / 1e9:>9.2f} {fused_moved / (ms * 1e-3) / 1e12:>6.2f}  {same}")
            del keys
        del ref
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
