"""Speed of the emulated kernel and the float64 oracle on a GPU (device events), issue 3's shape:
n_q = 4096, H = 16, 2048 keys per row, uniform indices into a 1M-row pow2 cache."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: runs from a clone without an install

from kernel.backends.emulated import run_emulated
from kernel.record import encode_records
from oracle.reference import reference


def timed(fn, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return sorted(times)[len(times) // 2]


def main() -> None:
    device = "cuda"
    generator = torch.Generator(device=device).manual_seed(0)
    rows, n_q, heads, keys = 1 << 20, 4096, 16, 2048
    latent = torch.randn(rows, 512, device=device, generator=generator).to(torch.bfloat16)
    rope = torch.randn(rows, 64, device=device, generator=generator).to(torch.bfloat16)
    cache = encode_records(latent, rope, "pow2")
    del latent, rope
    q = torch.randn(n_q, heads, 576, device=device, generator=generator).to(torch.bfloat16)
    indices = torch.randint(0, rows, (n_q * keys,), device=device, generator=generator, dtype=torch.int32)
    indptr = torch.arange(0, n_q * keys + 1, keys, device=device, dtype=torch.int32)
    scale = 576**-0.5
    print(torch.cuda.get_device_name(), f"n_q={n_q} H={heads} keys/row={keys}")
    emulated = timed(lambda: run_emulated(q, cache, indices, indptr, scale, return_lse=True))
    print(f"emulated: {emulated:.3f} s")
    small = slice(0, 1024)
    oracle = timed(lambda: reference(q[small], cache, indices[: 1024 * keys], indptr[:1025], scale), repeats=1)
    print(f"oracle (float64), n_q=1024: {oracle:.3f} s")


if __name__ == "__main__":
    main()
