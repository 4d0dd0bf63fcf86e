"""Adapter and bare-kernel timings of the sglang / vLLM Triton peers (issue 23), as in
scripts/peers_bench.py: conformance.tools.bench's inputs (n_q rows of KEYS uniform keys from a
1,048,576-record pow2 cache, H heads), CUDA-event medians; `NAME:bare` is the kernel alone on the
buffers its adapter prepared (`prepare_*().run()`: sglang's / vLLM's entry point only), `NAME` the
whole contract call. Run beside other GPU work, the numbers are contended: read the ratio.

Usage: python3 scripts/h200/final_peers_bench.py [--n-q 1,1024,4096] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import torch

from conformance.tools.bench import build_cache, build_inputs, time_calls
from kernel.registry import BackendUnavailable, resolve

PEERS = ("sglang-decode", "vllm-decode", "vllm-sparse")


def bare(name: str, inputs: Any) -> Callable[[], object]:
    """The kernel alone on buffers its adapter prepared for these inputs."""
    args = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
    if name == "sglang-decode":
        from kernel.backends import sglang_decode as m
        from kernel.backends.triton_peers import load_sglang

        kernel, reader = load_sglang(m.KERNEL_MODULE, m.NAME)[0], load_sglang(m.READER_MODULE, m.NAME)[0]
        return m.prepare_sglang_decode(*args, out=None, kernel=kernel, reader=reader).run
    if name == "vllm-decode":
        from kernel.backends import vllm_decode as m
        from kernel.backends.triton_peers import load_vllm

        sms = torch.cuda.get_device_properties(inputs.q.device).multi_processor_count
        return m.prepare_vllm_decode(*args, out=None, kernel=load_vllm(m.KERNEL_MODULE, m.NAME)[0], sm_count=sms).run
    from kernel.backends import vllm_sparse as m
    from kernel.backends.triton_peers import load_vllm

    return m.prepare_vllm_sparse(*args, kernel=load_vllm(m.KERNEL_MODULE, m.NAME)[0]).run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="1,1024,4096")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    cache = build_cache(args.cache_rows, device)
    results: list[dict[str, Any]] = []
    print(f"{'KERNEL':<22} {'N_Q':>5} {'MEDIAN ms':>10} {'MIN ms':>9} {'x bare':>7}", flush=True)
    for n_q in [int(x) for x in args.n_q.split(",")]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        call_args = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
        for name in PEERS:
            try:
                backend = resolve(name)
                rows = [(name + ":bare", bare(name, inputs)), (name, lambda b=backend: b(*call_args, return_lse=True))]
            except (BackendUnavailable, Exception) as err:  # noqa: BLE001 - report and go on
                print(f"{name:<22} {n_q:>5} unavailable: {type(err).__name__}: {str(err)[:300]}", flush=True)
                results.append({"kernel": name, "n_q": n_q, "status": f"error: {err}"})
                continue
            bare_ms = None
            for row, fn in rows:
                try:
                    t = time_calls(fn, device, warmup=2, iters=args.iters, max_seconds=3.0)
                except Exception as err:  # noqa: BLE001
                    print(f"{row:<22} {n_q:>5} error: {type(err).__name__}: {str(err)[:300]}", flush=True)
                    results.append({"kernel": row, "n_q": n_q, "status": f"error: {err}"})
                    continue
                ratio = None
                if row.endswith(":bare"):
                    bare_ms = t.median_ms
                elif bare_ms:
                    ratio = t.median_ms / bare_ms
                results.append(
                    {"kernel": row, "n_q": n_q, "median_ms": t.median_ms, "min_ms": t.min_ms, "x_bare": ratio, "samples_ms": t.samples_ms}
                )
                print(f"{row:<22} {n_q:>5} {t.median_ms:>10.4f} {t.min_ms:>9.4f} {ratio or float('nan'):>7.2f}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"keys": args.keys, "heads": args.heads, "cache_rows": args.cache_rows, "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
