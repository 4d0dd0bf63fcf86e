"""Device time of gathering bf16 key rows from a dequantised cache, by element width of the copy.

The torch-sdpa adapter's one cost beyond its bare kernel is the gather of the selected keys
(kernel.backends.torch_sdpa.prepare_sdpa: `whole.index_select(0, row_index)` from the bf16
[rows + 1, 576] cache of kernel.backends.dequant_cache). A row is 1152 bytes; the copy can move
it as 576 bf16, 288 int32 or 144 int64 elements (a view of the same bytes: the same bits).
This script times each way on the bench's shapes (conformance.tools.bench: n_q rows of KEYS
uniform slots of a 1,048,576-record cache) and checks that every way gives the bf16 gather's bits.

Printed per way and n_q: median device ms (CUDA events, conformance.tools.bench.time_calls),
bytes moved (read + write of the gathered rows, bytes) and the rate they imply (TB/s).

Usage: python3 scripts/gather_rows_bench.py [--n-q 64,1024,4096] [--keys 2048]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: runs from a clone without an install

from conformance.tools.bench import time_calls  # noqa: E402
from kernel.record import HEAD_DIM  # noqa: E402

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
    whole = torch.randn(args.cache_rows + 1, HEAD_DIM, generator=gen, device=device).to(torch.bfloat16)
    print(f"{'way':<6} {'n_q':>5} {'median ms':>10} {'GB moved':>9} {'TB/s':>6}  same bits")
    for n_q in [int(x) for x in args.n_q.split(",")]:
        idx = torch.randint(0, args.cache_rows + 1, (n_q * args.keys,), generator=gen, device=device)
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
        del ref
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
