"""Standalone check of sglang's row offsets past 2^31 elements (sglang 0.5.10.post1, CUDA + Triton).

sglang's fp8_ds_mla reader `dequantize_k_cache_paged` (srt/layers/attention/nsa/dequant_k_cache.py)
addresses record `token` at `token * 656` and its Triton decode kernel `decode_attention_fwd`
(srt/layers/attention/triton_ops/decode_attention.py) addresses key `kv_loc` at `kv_loc * 576`,
both products of int32 values. This reproducer calls each directly (no adapter) on a buffer just past
those limits (3,273,603 records; 3,728,270 bf16 keys) and compares the row it reads with the row
asked for, in a child process each, so an illegal-address fault is reported instead of killing
the check. Prints one line per check: "ok" (the right row), "wrong row" (max |diff|), or the
child's error. Needs about 7 GB of GPU memory.

Usage (CUDA, sglang's wheel importable, the project installed): python repro/sglang_int32_offsets.py
"""

from __future__ import annotations

import subprocess
import sys

READER_ROWS = 2**31 // 656 + 64  # first token whose offset token * 656 leaves int32: 3,273,603
DECODE_ROWS = 2**31 // 576 + 64  # first key whose offset kv_loc * 576 leaves int32: 3,728,270


def check_reader() -> str:
    import torch

    from kernel.engines import load_sglang
    from kernel.peers.sglang_decode import READER_MODULE
    from kernel.record import decode_records, encode_records

    reader = load_sglang(READER_MODULE, "repro")[0]
    cache = torch.zeros(READER_ROWS, 656, dtype=torch.uint8, device="cuda")
    gen = torch.Generator().manual_seed(0)
    token = READER_ROWS - 1
    cache[token] = encode_records(torch.randn(1, 512, generator=gen), torch.randn(1, 64, generator=gen).to(torch.bfloat16), "pow2")[
        0
    ].cuda()
    got = reader.dequantize_k_cache_paged(cache.view(torch.float8_e4m3fn), torch.tensor([token], dtype=torch.int32, device="cuda"))
    torch.cuda.synchronize()
    want = decode_records(cache[token : token + 1].cpu())
    diff = (got.view(1, 576)[:, :512].double().cpu() - want.latent).abs().max().item()
    return "ok" if diff == 0 else f"wrong row: max |diff| {diff:.4g} over the latent of token {token}"


def check_decode() -> str:
    import torch

    from kernel.engines import load_sglang
    from kernel.peers.sglang_decode import KERNEL_MODULE

    kernel = load_sglang(KERNEL_MODULE, "repro")[0]
    k = torch.zeros(DECODE_ROWS, 1, 576, dtype=torch.bfloat16, device="cuda")
    loc = DECODE_ROWS - 1
    k[loc, 0, :512] = 3.0  # the only key: out must be exactly its V = 3
    q = torch.ones(1, 16, 576, dtype=torch.bfloat16, device="cuda")
    o = torch.empty(1, 16, 512, dtype=torch.bfloat16, device="cuda")
    logits = torch.empty(1, 16, 8, 512, dtype=torch.float32, device="cuda")
    lse = torch.empty(1, 16, 8, dtype=torch.float32, device="cuda")
    indptr = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    indices = torch.tensor([loc], dtype=torch.int32, device="cuda")
    splits = torch.full((1,), 8, dtype=torch.int32, device="cuda")
    kernel.decode_attention_fwd(q, k, k[..., :512], o, indptr, indices, logits, lse, splits, 8, 0.05, 1.0, 1.0)
    torch.cuda.synchronize()
    diff = (o.float() - 3.0).abs().max().item()
    return "ok" if diff == 0 else f"wrong row: max |out - 3| {diff:.4g} for the key at {loc}"


def main() -> int:
    if len(sys.argv) == 2:
        print({"reader": check_reader, "decode": check_decode}[sys.argv[1]]())
        return 0
    for name, rows, unit in (("reader", READER_ROWS, "records x 656 B"), ("decode", DECODE_ROWS, "keys x 576")):
        try:
            run = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=150)
        except subprocess.TimeoutExpired:
            print(f"sglang {name} at {rows} {unit}: no answer within 150 s", flush=True)
            continue
        if run.returncode == 0:
            tail = (run.stdout.strip().splitlines() or [""])[-1]
        else:
            tail = f"child exit {run.returncode}: {run.stderr.strip()[-300:]}"
        print(f"sglang {name} at {rows} {unit}: {tail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
