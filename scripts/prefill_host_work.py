"""flashmla-prefill's host work per call, without its kernel: the adapter (run_flashmla_prefill with
its LayoutCache, DequantCache and PaddedQ, as the backend calls it) around a stand-in `flash_mla` module
whose flash_mla_sparse_fwd returns preallocated outputs (no work), on the CPU.

    python scripts/prefill_host_work.py [--n-q 1,64,1024] [--keys 2048] [--heads 16] [--calls 200]

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
from kernel.backends import flashmla_prefill  # noqa: E402
from kernel.backends.dequant_cache import DequantCache  # noqa: E402
from kernel.backends.flashmla import LayoutCache  # noqa: E402

HOST_ONLY = {"view", "slice", "alias", "squeeze", "select", "empty", "as_strided", "unsqueeze", "expand", "detach", "_reshape_alias", "t"}


class NoopPrefill(types.ModuleType):
    """flash_mla stand-in: flash_mla_sparse_fwd returns outputs allocated once per shape (no work)."""

    def __init__(self) -> None:
        super().__init__("flash_mla")
        self._outs: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def flash_mla_sparse_fwd(self, q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, use_legacy=False):  # type: ignore[no-untyped-def]
        s_q, h_q, _ = q.shape
        if (s_q, h_q) not in self._outs:
            self._outs[(s_q, h_q)] = (
                torch.zeros(s_q, h_q, d_v, dtype=torch.bfloat16, device=q.device),
                torch.zeros(s_q, h_q, dtype=torch.float32, device=q.device),
                torch.ones(s_q, h_q, dtype=torch.float32, device=q.device),
            )
        return self._outs[(s_q, h_q)]


def measure(n_q: int, keys: int, heads: int, cache_rows: int, calls: int) -> dict[str, Any]:
    from conformance.tools.bench import build_cache, build_inputs

    cache = build_cache(cache_rows, torch.device("cpu"), seed=0)
    inputs = build_inputs(cache, n_q, keys, heads, seed=1)
    module, layouts, kept, padded = NoopPrefill(), LayoutCache(), DequantCache(), flashmla_prefill.PaddedQ()
    q, kv, idx, ptr, scale = inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale

    def call(indices: torch.Tensor, pointers: torch.Tensor) -> object:
        return flashmla_prefill.run_flashmla_prefill(
            q, kv, indices, pointers, scale, return_lse=True, module=module, layout_cache=layouts, dequant_cache=kept, padded_q=padded
        )

    def fresh_pair() -> tuple[torch.Tensor, torch.Tensor]:  # a new batch: new index tensors (copied outside what is measured)
        return idx.clone(), ptr.clone()

    for _ in range(3):
        call(idx, ptr)
    result: dict[str, Any] = {"n_q": n_q}
    for name in ("repeated", "new-index"):
        pair = (idx, ptr) if name == "repeated" else fresh_pair()
        counter = count_ops(lambda pair=pair: call(*pair))
        launched = {op: n for op, n in counter.ops.items() if op not in HOST_ONLY}
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
    parser.add_argument("--n-q", default="1,64,1024")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 16)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for n_q in (int(x) for x in args.n_q.split(",")):
        r = measure(n_q, args.keys, args.heads, args.cache_rows, args.calls)
        for name in ("repeated", "new-index"):
            e = r[name]
            syncs = sum(e["syncs"].values())
            print(f"n_q {n_q:>5} {name:<10} ops {e['ops']:>3} syncs {syncs:>2} host {e['host_us']:>8.1f} us  {e['launched']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
