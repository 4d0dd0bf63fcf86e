"""The FlashMLA adapters' host work per call, without their kernels: `flashmla` (run_flashmla with its
SchedCache, LayoutCache and PaddedQ) and `flashmla-prefill` (run_flashmla_prefill with its
LayoutCache, DequantCache and PaddedQ), as their backends call them, around a stand-in `flash_mla`
module whose kernels return preallocated outputs (no work), on the CPU.

    python scripts/adapter_host_work.py [--adapter flashmla,flashmla-prefill] [--n-q 1,64,1024]
        [--keys 2048] [--heads 16] [--calls 200]

For each n_q: a repeated call (the same index tensors and cache: the next layer of a step) and a
call on fresh index tensors (a new batch): aten ops dispatched (about one device launch each on
a GPU; views and other metadata-only ops listed apart), host syncs (conformance.tools.op_count),
and the host CPU time per call (time.process_time, median of --calls calls in interleaved
rounds). The inputs are conformance.tools.bench's (uniform keys from a pow2 cache of
--cache-rows records).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.tools.op_count import count_ops  # noqa: E402
from kernel.backends import flashmla, flashmla_prefill  # noqa: E402
from kernel.backends.dequant_cache import DequantCache  # noqa: E402
from kernel.backends.flashmla import LayoutCache  # noqa: E402


class NoopFlashMLA(types.ModuleType):
    """flash_mla stand-in: flash_mla_with_kvcache and flash_mla_sparse_fwd return outputs allocated
    once per shape (no work); get_mla_metadata an empty holder, as FlashMLA's own."""

    def __init__(self) -> None:
        super().__init__("flash_mla")
        self._outs: dict[tuple[int, ...], tuple[torch.Tensor, ...]] = {}

    def get_mla_metadata(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return types.SimpleNamespace(), None

    def flash_mla_with_kvcache(self, q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata, num_splits, **kwargs):  # type: ignore[no-untyped-def]
        b, s_q, h_q, _ = q.shape
        key = ("decode", b, s_q, h_q)
        if key not in self._outs:
            self._outs[key] = (
                torch.zeros(b, s_q, h_q, head_dim_v, dtype=torch.bfloat16, device=q.device),
                torch.zeros(b, h_q, s_q, dtype=torch.float32, device=q.device),
            )
        return self._outs[key]

    def flash_mla_sparse_fwd(self, q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, use_legacy=False):  # type: ignore[no-untyped-def]
        s_q, h_q, _ = q.shape
        if (s_q, h_q) not in self._outs:
            self._outs[(s_q, h_q)] = (
                torch.zeros(s_q, h_q, d_v, dtype=torch.bfloat16, device=q.device),
                torch.zeros(s_q, h_q, dtype=torch.float32, device=q.device),
                torch.ones(s_q, h_q, dtype=torch.float32, device=q.device),
            )
        return self._outs[(s_q, h_q)]


def measure(adapter: str, n_q: int, keys: int, heads: int, cache_rows: int, calls: int) -> dict[str, Any]:
    from conformance.tools.bench import build_cache, build_inputs

    cache = build_cache(cache_rows, torch.device("cpu"), seed=0)
    inputs = build_inputs(cache, n_q, keys, heads, seed=1)
    module, layouts, kept, padded = NoopFlashMLA(), LayoutCache(), DequantCache(), flashmla.PaddedQ()
    scheds = flashmla.SchedCache(module)
    q, kv, idx, ptr, scale = inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale

    def call(indices: torch.Tensor, pointers: torch.Tensor) -> object:
        if adapter == "flashmla":
            return flashmla.run_flashmla(
                q, kv, indices, pointers, scale, return_lse=True, module=module, sched_cache=scheds, layout_cache=layouts, padded_q=padded
            )
        return flashmla_prefill.run_flashmla_prefill(
            q, kv, indices, pointers, scale, return_lse=True, module=module, layout_cache=layouts, dequant_cache=kept, padded_q=padded
        )

    def fresh_pair() -> tuple[torch.Tensor, torch.Tensor]:  # a new batch: new index tensors (copied outside what is measured)
        return idx.clone(), ptr.clone()

    for _ in range(3):
        call(idx, ptr)
    result: dict[str, Any] = {"adapter": adapter, "n_q": n_q}
    for name in ("repeated", "new-index"):
        pair = (idx, ptr) if name == "repeated" else fresh_pair()
        counter = count_ops(lambda pair=pair: call(*pair))
        launched = counter.launched
        result[name] = {"ops": sum(launched.values()), "launched": dict(sorted(launched.items())), "syncs": counter.syncs}
    samples: dict[str, list[float]] = {"repeated": [], "new-index": []}
    for _ in range(calls):  # interleaved: a load change hits both alike
        for name in ("repeated", "new-index"):
            pair = (idx, ptr) if name == "repeated" else fresh_pair()
            start = time.process_time()
            call(*pair)
            samples[name].append(time.process_time() - start)
    for name, values in samples.items():
        result[name]["host_us"] = round(statistics.median(values) * 1e6, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", default="flashmla,flashmla-prefill", help="comma-separated: flashmla, flashmla-prefill")
    parser.add_argument("--n-q", default="1,64,1024")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 16)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    adapters = [a.strip() for a in args.adapter.split(",") if a.strip()]
    unknown = sorted(set(adapters) - {"flashmla", "flashmla-prefill"})
    if unknown:
        parser.error(f"--adapter: unknown adapter(s) {unknown}; choose among flashmla, flashmla-prefill")
    for adapter in adapters:
        for n_q in (int(x) for x in args.n_q.split(",")):
            r = measure(adapter, n_q, args.keys, args.heads, args.cache_rows, args.calls)
            for name in ("repeated", "new-index"):
                e = r[name]
                syncs = sum(e["syncs"].values())
                head = f"{adapter:<16} n_q {n_q:>5} {name:<10} ops {e['ops']:>3} syncs {syncs:>2}"
                print(f"{head} host {e['host_us']:>8.1f} us  {e['launched']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
