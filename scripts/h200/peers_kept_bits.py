"""The Triton peers' kept-cache path (issues 21, 23) on the real kernels: the same bits as the
per-slot path, and the adapter's cost beside the kernel on what the adapter prepared.

For each peer and problem: the contract call through the per-slot path (no kept caches) is the
reference; the backend's own calls (kept cache and layouts: first sight, build, hit), a call
after an in-place write to the cache, and a call on a fresh copy of the cache must give its bits
(out and lse). Then CUDA-event medians of the backend call and of the kernel alone on the
buffers the kept path prepared (`prepare_*(..., dequant_cache, layout_cache).run`).

Usage: python3 scripts/h200/peers_kept_bits.py [--cache-rows N] [--n-q 1,64,1024] [--json PATH]
       [--fake] (CPU, the test suite's fake kernels: checks this script's logic only)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from conformance.tools.bench import build_cache, build_inputs, time_calls
from kernel.backends import sglang_decode, vllm_decode, vllm_sparse
from kernel.backends.dequant_cache import DequantCache
from kernel.backends.flashmla import LayoutCache
from kernel.backends.triton_peers import LAYOUTS_KEPT, load_sglang, load_vllm

PEERS = ("sglang-decode", "vllm-decode", "vllm-sparse")


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def same(a: tuple[torch.Tensor, Any], b: tuple[torch.Tensor, Any]) -> bool:
    return bool(torch.equal(bits(a[0]), bits(b[0])) and torch.equal(bits(a[1]), bits(b[1])))


def modules(name: str, fake: bool) -> dict[str, Any]:
    """The engine modules a peer's run / prepare take (the fakes with --fake)."""
    if fake:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
        import test_peer_adapters as t  # noqa: PLC0415 - the CPU fakes, only for --fake

        made = {"sglang-decode": t.FakeSglang, "vllm-decode": t.FakeVllmDecode, "vllm-sparse": t.FakeVllmSparse}[name]()
        return {"kernel": made, "reader": made} if name == "sglang-decode" else {"kernel": made}
    if name == "sglang-decode":
        m = sglang_decode
        return {"kernel": load_sglang(m.KERNEL_MODULE, m.NAME)[0], "reader": load_sglang(m.READER_MODULE, m.NAME)[0]}
    m = vllm_decode if name == "vllm-decode" else vllm_sparse
    return {"kernel": load_vllm(m.KERNEL_MODULE, m.NAME)[0]}


def runner(name: str, mods: dict[str, Any], sms: int) -> tuple[Callable[..., Any], Callable[..., Any], DequantCache]:
    """(run with the contract's signature, prepare, a fresh kept cache) of a peer."""
    if name == "sglang-decode":
        return (
            lambda *a, **k: sglang_decode.run_sglang_decode(*a, **mods, **k),
            lambda *a, **k: sglang_decode.prepare_sglang_decode(*a, out=None, **mods, **k),
            sglang_decode.kept_cache(mods["reader"]),
        )
    if name == "vllm-decode":
        return (
            lambda *a, **k: vllm_decode.run_vllm_decode(*a, **mods, sm_count=sms, **k),
            lambda *a, **k: vllm_decode.prepare_vllm_decode(*a, out=None, **mods, sm_count=sms, **k),
            DequantCache(),
        )
    return (
        lambda *a, **k: vllm_sparse.run_vllm_sparse(*a, **mods, **k),
        lambda *a, **k: vllm_sparse.prepare_vllm_sparse(*a, **mods, **k),
        DequantCache(),
    )


def problems(cache: torch.Tensor, n_qs: list[int], keys: int, heads: int) -> list[tuple[str, tuple[Any, ...]]]:
    """Bench inputs per n_q, and one with empty rows, negatives and entries past the cache."""
    out = []
    for n_q in n_qs:
        b = build_inputs(cache, n_q, keys, heads)
        out.append((f"uniform n_q={n_q}", (b.q, cache, b.indices, b.indptr, b.softmax_scale)))
    b = build_inputs(cache, 8, keys, heads, seed=7)
    idx = b.indices.clone()
    idx[::5] = -1
    idx[1::7] = cache.shape[0] + 3
    ptr = torch.tensor([0, 0, 1, 33, 300, 300, 2000, 2048, 8 * keys], dtype=torch.int32, device=cache.device)
    out.append(("ragged+invalid n_q=8", (b.q, cache, idx, ptr, b.softmax_scale)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--n-q", default="1,64,1024")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--json", default=None)
    parser.add_argument("--fake", action="store_true")
    args = parser.parse_args(argv)
    device = torch.device("cpu" if args.fake else "cuda")
    sms = 132 if args.fake else torch.cuda.get_device_properties(device).multi_processor_count
    results: list[dict[str, Any]] = []
    failures = 0
    for name in PEERS:
        try:
            mods = modules(name, args.fake)
        except Exception as err:  # noqa: BLE001 - report and go on
            print(f"{name}: unavailable: {type(err).__name__}: {str(err)[:300]}", flush=True)
            results.append({"kernel": name, "status": f"unavailable: {err}"})
            continue
        cache = build_cache(args.cache_rows, device)
        for label, call_args in problems(cache, [int(x) for x in args.n_q.split(",")], args.keys, args.heads):
            run, prepare, kept = runner(name, mods, sms)
            layouts = LayoutCache(LAYOUTS_KEPT)
            kw: dict[str, Any] = {"has_invalid": True, "return_lse": True}
            want = run(*call_args, **kw)
            checks = {f"call{i}": same(run(*call_args, **kw, dequant_cache=kept, layout_cache=layouts), want) for i in range(3)}
            row: dict[str, Any] = {"kernel": name, "problem": label, "builds": kept.builds, **checks}
            if args.fake or label.startswith("uniform"):
                fn = lambda: run(*call_args, **kw, dequant_cache=kept, layout_cache=layouts)  # noqa: E731
                bare = prepare(*call_args[:5], dequant_cache=kept, layout_cache=layouts).run
                t_adapter = time_calls(fn, device, warmup=2, iters=args.iters, max_seconds=3.0)
                t_bare = time_calls(bare, device, warmup=2, iters=args.iters, max_seconds=3.0)
                row.update(adapter_ms=t_adapter.median_ms, bare_ms=t_bare.median_ms, ratio=t_adapter.median_ms / t_bare.median_ms)
            read = int(call_args[2][2])  # a record row 0 or 2 reads (valid in every problem)
            written = call_args[1].clone()
            written[read, 528:592:2] ^= 1  # a fresh cache tensor: rope mantissa bits of that record
            moved = (call_args[0], written, *call_args[2:])
            want_w = run(*moved, **kw)
            row["fresh_cache"] = all(same(run(*moved, **kw, dequant_cache=kept, layout_cache=layouts), want_w) for _ in range(2))
            written[read, 528:592:2] ^= 2  # the kept cache written in place
            want_w = run(*moved, **kw)
            row["written_in_place"] = all(same(run(*moved, **kw, dequant_cache=kept, layout_cache=layouts), want_w) for _ in range(2))
            row["builds"] = kept.builds
            ok = all(v for k, v in row.items() if k.startswith("call") or k in ("fresh_cache", "written_in_place"))
            failures += not ok
            timing = f" adapter {row['adapter_ms']:.3f} ms bare {row['bare_ms']:.3f} ms x{row['ratio']:.2f}" if "ratio" in row else ""
            print(f"{name:14} {label:22} same bits {'yes' if ok else 'NO ' + str(row)} builds {kept.builds}{timing}", flush=True)
            results.append(row)
            del written, moved
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"{failures} problem(s) with different bits", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
