"""The bf16-KV adapters give the same bits through the kept dequantised cache as through the
per-slot gather, on the bench's inputs (conformance bench shapes). Exit 1 on any difference.

Usage: python scripts/speed21_same.py [--n-q 1,64,1024] [--keys 2048] [--heads 16] [--cache-rows 1048576]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    from conformance.tools.bench import build_cache, build_inputs
except ImportError:  # before the conformance/tools move
    from conformance.bench import build_cache, build_inputs  # type: ignore[no-redef]

from kernel.backends.dequant_cache import DequantCache  # noqa: E402


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="1,64,1024")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cache = build_cache(args.cache_rows, device)
    runs = []
    from kernel.backends.torch_sdpa import run_torch_sdpa

    runs.append(("torch-sdpa", run_torch_sdpa, {}))
    if device.type == "cuda":
        try:
            from kernel.backends.flashmla import load_flash_mla
            from kernel.backends.flashmla_prefill import run_flashmla_prefill

            runs.append(("flashmla-prefill", run_flashmla_prefill, {"module": load_flash_mla()}))
        except Exception as err:  # noqa: BLE001 - reported, the others still run
            print(f"flashmla-prefill: unavailable: {type(err).__name__}: {err}")
    bad = 0
    for n_q in [int(x) for x in args.n_q.split(",")]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
        for name, fn, kw in runs:
            slot_out, slot_lse = fn(*call, return_lse=True, **kw)
            kept = DequantCache()
            fn(*call, return_lse=True, dequant_cache=kept, **kw)
            out, lse = fn(*call, return_lse=True, dequant_cache=kept, **kw)
            same = kept.builds == 1 and torch.equal(_bits(out), _bits(slot_out)) and torch.equal(_bits(lse), _bits(slot_lse))
            bad += not same
            print(f"{name:<18} n_q {n_q:>5}: kept cache {'same bits' if same else 'DIFFERS'} (builds {kept.builds})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
