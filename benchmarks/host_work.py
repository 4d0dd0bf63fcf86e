"""The peer adapters' host work per call, without their kernels: each adapter through the adapter
protocol (kernel.peers.protocol.run_peer, with the state its Backend keeps between calls) around a
stand-in engine whose kernels return preallocated outputs (no work), on the CPU.

    python -m benchmarks host_work [--adapters flashmla,flashmla-prefill,sglang-decode,vllm-decode,vllm-sparse]
        [--n-q 1,64,1024] [--keys 2048] [--heads 16] [--cache-rows N] [--calls 200] [--json PATH]

For each adapter and n_q: a repeated call (the same index tensors and cache: the next layer of a
step) and a call on fresh index tensors (a new batch): aten ops dispatched (about one device
launch each on a GPU; views and allocations without a fill are not counted), host syncs
(conformance.tools.op_count), and the host CPU time per call (time.process_time, median of --calls
calls in interleaved rounds, one torch thread). The inputs are conformance.tools.bench's (uniform
keys from a pow2 cache). The stand-ins: FlashMLA's module (scheduler metadata, the decode, the
sparse prefill), sglang's decode kernel and reader, vLLM's decode and sparse kernels; torch-sdpa
has no engine to stand in for (its kernel is PyTorch's own), so it is not measured here.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.common import add_json, add_shape, parse, positive, write_json
from conformance.tools.bench import build_cache, build_inputs
from conformance.tools.op_count import count_ops
from kernel.record import HEAD_DIM, LATENT_DIM

ADAPTERS = ("flashmla", "flashmla-prefill", "sglang-decode", "vllm-decode", "vllm-sparse")


class _Outputs:
    """Outputs allocated once per key (the stand-ins' only work)."""

    def __init__(self) -> None:
        self._made: dict[tuple[Any, ...], Any] = {}

    def get(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]


class NoopFlashMLA(types.ModuleType):
    """`flash_mla` stand-in: get_mla_metadata an empty holder, as FlashMLA's own; the decode and the
    sparse prefill return outputs allocated once per shape."""

    def __init__(self) -> None:
        super().__init__("flash_mla")
        self.outs = _Outputs()

    def get_mla_metadata(self, *args: Any, **kwargs: Any) -> tuple[Any, None]:
        return types.SimpleNamespace(), None

    def flash_mla_with_kvcache(self, q: torch.Tensor, k_cache: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        b, s_q, h_q, _ = q.shape
        return self.outs.get(
            ("decode", b, s_q, h_q),
            lambda: (torch.zeros(b, s_q, h_q, LATENT_DIM, dtype=torch.bfloat16), torch.zeros(b, h_q, s_q, dtype=torch.float32)),
        )

    def flash_mla_sparse_fwd(
        self, q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512, **kwargs: Any
    ) -> Any:
        s_q, h_q, _ = q.shape
        return self.outs.get(
            ("prefill", s_q, h_q),
            lambda: (
                torch.zeros(s_q, h_q, d_v, dtype=torch.bfloat16),
                torch.zeros(s_q, h_q, dtype=torch.float32),
                torch.ones(s_q, h_q, dtype=torch.float32),
            ),
        )


class NoopSglang(types.ModuleType):
    """sglang's decode kernel (writes nothing) and reader (preallocated bf16 keys per row count)."""

    def __init__(self) -> None:
        super().__init__("sglang_stand_in")
        self.outs = _Outputs()

    def dequantize_k_cache_paged(self, quant_k_cache: torch.Tensor, page_table_1_flattened: torch.Tensor) -> torch.Tensor:
        n = page_table_1_flattened.shape[0]
        return self.outs.get(("keys", n), lambda: torch.zeros(n, 1, HEAD_DIM, dtype=torch.bfloat16))

    def decode_attention_fwd(self, *args: Any, **kwargs: Any) -> None:
        return None


class NoopVllm(types.ModuleType):
    """vLLM's decode kernel (writes nothing) and sparse kernel (preallocated outputs per shape)."""

    def __init__(self) -> None:
        super().__init__("vllm_stand_in")
        self.outs = _Outputs()

    def decode_attention_fwd(self, *args: Any, **kwargs: Any) -> None:
        return None

    def triton_bf16_mla_sparse_interface(
        self, q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, **kwargs: Any
    ) -> Any:
        n, heads, _ = q.shape
        return self.outs.get(
            ("sparse", n, heads),
            lambda: (torch.zeros(n, heads, LATENT_DIM, dtype=q.dtype), None, torch.zeros(n, heads, dtype=torch.float32)),
        )


def stand_in(name: str) -> tuple[Any, Any]:
    """(adapter, engine with a stand-in module) of peer `name`."""
    if name in ("flashmla", "flashmla-prefill"):
        from kernel.peers import flashmla, flashmla_prefill

        module = NoopFlashMLA()
        chosen = flashmla if name == "flashmla" else flashmla_prefill
        return chosen.ADAPTER, flashmla.FlashMLAEngine(module)
    if name == "sglang-decode":
        from kernel.peers import sglang_decode

        module = NoopSglang()
        return sglang_decode.ADAPTER, sglang_decode.SglangEngine(kernel=module, reader=module)
    if name == "vllm-decode":
        from kernel.peers import vllm_decode

        return vllm_decode.ADAPTER, vllm_decode.VllmDecodeEngine(kernel=NoopVllm(), sm_count=132)
    from kernel.peers import vllm_sparse

    return vllm_sparse.ADAPTER, vllm_sparse.VllmSparseEngine(kernel=NoopVllm())


def measure(name: str, n_q: int, keys: int, heads: int, cache_rows: int, calls: int) -> dict[str, Any]:
    """One adapter at one n_q (module docstring)."""
    from kernel.peers.protocol import run_peer

    cache = build_cache(cache_rows, torch.device("cpu"), seed=0)
    inputs = build_inputs(cache, n_q, keys, heads, seed=1)
    adapter, engine = stand_in(name)
    state = adapter.new_state(engine)
    q, kv, idx, ptr, scale = inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale

    def call(indices: torch.Tensor, pointers: torch.Tensor) -> object:
        return run_peer(adapter, q, kv, indices, pointers, scale, return_lse=True, engine=engine, state=state)

    def pair(kind: str) -> tuple[torch.Tensor, torch.Tensor]:  # a new batch: new index tensors (copied outside what is measured)
        return (idx, ptr) if kind == "repeated" else (idx.clone(), ptr.clone())

    for _ in range(3):
        call(idx, ptr)
    result: dict[str, Any] = {"adapter": name, "n_q": n_q}
    for kind in ("repeated", "new-index"):
        args = pair(kind)
        counter = count_ops(lambda args=args: call(*args))
        launched = counter.launched
        result[kind] = {"ops": sum(launched.values()), "launched": dict(sorted(launched.items())), "syncs": counter.syncs}
    samples: dict[str, list[float]] = {"repeated": [], "new-index": []}
    for _ in range(calls):  # interleaved: a load change hits both alike
        for kind in samples:
            args = pair(kind)
            start = time.process_time()
            call(*args)
            samples[kind].append(time.process_time() - start)
    for kind, values in samples.items():
        result[kind]["host_us"] = round(statistics.median(values) * 1e6, 1)
    return result


def _adapters(text: str) -> list[str]:
    names = [a.strip() for a in text.split(",") if a.strip()]
    unknown = sorted(set(names) - set(ADAPTERS))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown adapter(s) {unknown}; choose among {', '.join(ADAPTERS)}")
    return names


def main(argv: list[str]) -> int:
    """The routine (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks host_work", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--adapters", type=_adapters, default=list(ADAPTERS), metavar="A,A,...", help=f"(default {','.join(ADAPTERS)})")
    add_shape(parser, n_q=(1, 64, 1024))
    parser.add_argument("--calls", type=positive, default=200, metavar="N", help="timed calls per row (default 200)")
    add_json(parser)
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    torch.set_num_threads(1)
    rows = args.cache_rows or 1 << 16
    results = []
    for name in args.adapters:
        for n_q in args.n_q:
            r = measure(name, n_q, args.keys, args.heads, rows, args.calls)
            results.append(r)
            for kind in ("repeated", "new-index"):
                e = r[kind]
                head = f"{name:<16} n_q {n_q:>5} {kind:<10} ops {e['ops']:>3} syncs {sum(e['syncs'].values()):>2}"
                print(f"{head} host {e['host_us']:>8.1f} us  {e['launched']}", flush=True)
    write_json(args.json, results)
    return 0
