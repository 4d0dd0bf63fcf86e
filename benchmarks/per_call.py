"""Per-call cost of the references, the emulated kernel and the peer adapters: torch ops, host
syncs, time, peak memory; with --profile, where a call's time goes (torch.profiler).

Rows, on the bench's inputs (conformance.tools.bench: n_q rows of --keys uniform keys from a pow2
cache, --heads heads), for each of --kernels:
- `oracle` (oracle.reference.reference) and `bound` (oracle.bound.evaluate_modes, gfx950 profile);
- a built-in or external kernel spec through its Backend (skipped, with the reason on stderr, where
  it cannot run on the device);
- for a peer adapter (kernel.registry.adapter): `NAME:bare-kept`, its bare kernel (PreparedCall.run)
  on inputs prepared from a kept state (the index layout and dequantised cache a serving engine
  keeps between layers: prepared twice, the second timed), `NAME` the contract call on the same
  tensors (the state kept), and `NAME:new-cache` on a fresh copy of the cache each call (a first
  call: the per-slot gather, plus the clone); "x bare" is a row's median over its bare kernel's;
- with --against REV: `emulated@REV`, kernel/emulated/gfx950.py as committed at REV (its imports
  resolve to this tree's modules: benchmarks.revisions), with a bits column against `emulated`.

Per row: aten ops of one call (on a GPU about one kernel launch each) and host synchronisations
(ops that read device data back: conformance.tools.op_count.SYNC_OPS), the median ms per call of
--iters calls (CUDA events on a GPU, process CPU time on the CPU), the device memory one call
allocates at its peak (CUDA). --profile adds, per row, the top operators by self device and host
time (us per call over --calls profiled calls) and, with --trace-dir, a Chrome trace each.

    python -m benchmarks per_call [--kernels oracle,emulated,torch-sdpa] [--n-q 1,64] [--device cuda]
        [--against REV] [--profile [--calls 3] [--top 25] [--trace-dir DIR]] [--json PATH]

Exit codes: 0 measured; 1 `emulated@REV` differs from `emulated` in some bit; 2 a bad option or
a revision that cannot be loaded.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import add_against, add_device, add_json, add_shape, cache_rows, parse, positive, resolve_device, write_json
from benchmarks.revisions import module_at
from conformance.tools.bench import build_cache, build_inputs, call_ms
from conformance.tools.op_count import count_ops
from kernel.bits import same_bits

Row = tuple[str, Callable[[], Any]]


def peak_gb(fn: Callable[[], object], device: torch.device) -> float | None:
    """GB of device memory one call of fn allocates above what was allocated before it (CUDA's
    peak counter), None on a CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 1e9


def runs_on(backend: Any, device: torch.device) -> bool:
    """Whether the backend runs on the device (its declared devices)."""
    return device.type in backend.devices


def bare_on_kept_state(name: str, args: tuple[Any, ...]) -> Callable[[], None] | None:
    """The adapter's bare kernel on inputs prepared from a kept state (module docstring), or None
    for a kernel that is no peer adapter."""
    from kernel.peers.protocol import CallArgs
    from kernel.registry import adapter

    peer = adapter(name)
    if peer is None:
        return None
    engine = peer.load()
    state = peer.new_state(engine, kept=True)
    peer.prepare(engine, state, CallArgs(*args))
    return peer.prepare(engine, state, CallArgs(*args)).run


def kernel_rows(name: str, args: tuple[Any, ...], device: torch.device) -> list[Row]:
    """(row, callable) for kernel `name` on the call `args`; [] (the reason on stderr) where it cannot run."""
    if name == "oracle":
        from oracle.reference import reference

        return [("oracle", lambda: reference(*args))]
    if name == "bound":
        from oracle.bound import evaluate_modes
        from oracle.profiles import load_profile

        profile = load_profile("gfx950")
        return [("bound", lambda: evaluate_modes(*args, profile=profile))]
    from kernel.registry import BackendUnavailable, resolve

    try:
        backend = resolve(name)
    except BackendUnavailable as err:
        print(f"per_call: {name} unavailable: {err}", file=sys.stderr)
        return []
    if not runs_on(backend, device):
        print(f"per_call: {name} does not run on {device.type} (devices {', '.join(backend.devices)})", file=sys.stderr)
        return []
    rows: list[Row] = []
    bare = bare_on_kept_state(name, args)
    if bare is not None:
        rows.append((name + ":bare-kept", bare))
    rows.append((name, lambda: backend(*args, return_lse=True)))
    if bare is not None:
        q, kv, idx, ptr, scale = args
        rows.append((name + ":new-cache", lambda: backend(q, kv.clone(), idx, ptr, scale, return_lse=True)))
    return rows


def _outputs(fn: Callable[[], Any]) -> tuple[torch.Tensor, ...] | str:
    try:
        got = fn()
    except Exception as err:  # noqa: BLE001 - compared as text
        return f"{type(err).__name__}: {err}"
    return tuple(t for t in got if t is not None)


def bits_verdict(a: tuple[torch.Tensor, ...] | str, b: tuple[torch.Tensor, ...] | str) -> str:
    """'same bits' or 'DIFFERS ...' between two calls' outputs (or their errors)."""
    if isinstance(a, str) or isinstance(b, str):
        return "same bits (both raise)" if a == b else f"DIFFERS: {str(a)[:100]!r} vs {str(b)[:100]!r}"
    bad = [n for n, x, y in zip(("out", "lse"), a, b, strict=False) if not same_bits(x, y)]
    return "same bits" if not bad and len(a) == len(b) else f"DIFFERS in {bad or ['outputs']}"


def profile_table(fn: Callable[[], Any], device: torch.device, calls: int, top: int, trace: Path | None) -> list[str]:
    """torch.profiler over `calls` calls: the top operators by self device (CUDA) and host time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    lines: list[str] = []
    averages = prof.key_averages()
    for key, attr in (("device", "self_device_time_total"), ("host", "self_cpu_time_total")):
        if key == "device" and device.type != "cuda":
            continue
        total = sum(getattr(e, attr, 0.0) for e in averages)
        lines.append(f"  top by self {key} time (us per call; total {total / calls:.0f} us per call)")
        for e in sorted(averages, key=lambda e: getattr(e, attr, 0.0), reverse=True)[:top]:
            value = getattr(e, attr, 0.0) / calls
            if value <= 0:
                break
            lines.append(f"    {value:>10.1f}  {e.count // calls:>6} x  {e.key[:100]}")
    return lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks per_call", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kernels", default="oracle,emulated,torch-sdpa", metavar="K,K,...", help="oracle, bound or kernel specs")
    add_device(p)
    add_shape(p, n_q=(1, 64))
    p.add_argument("--iters", type=positive, default=5, metavar="N", help="timed calls per row (default 5)")
    add_against(p, "kernel/emulated/gfx950.py")
    p.add_argument("--profile", action="store_true", help="also torch.profiler's top operators per row")
    p.add_argument("--calls", type=positive, default=3, metavar="N", help="profiled calls per row (default 3)")
    p.add_argument("--top", type=positive, default=25, metavar="N", help="operators listed per table (default 25)")
    p.add_argument("--trace-dir", type=Path, default=None, metavar="DIR", help="with --profile: a Chrome trace per row here")
    add_json(p)
    return p


def main(argv: list[str]) -> int:
    """The routine (module docstring)."""
    args = parse(parser(), argv)
    if isinstance(args, int):
        return args
    device = resolve_device(args)
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    older = None
    if args.against:
        try:
            older = module_at(args.against, "kernel/emulated/gfx950.py", "emulated_at_revision")
        except (OSError, subprocess.SubprocessError, ImportError) as err:
            print(f"per_call: --against {args.against}: kernel/emulated/gfx950.py cannot be loaded ({err})", file=sys.stderr)
            return 2
    rows_total = cache_rows(args, device)
    cache = build_cache(rows_total, device)
    results: list[dict[str, Any]] = []
    all_same = True
    print(f"device {device}; keys {args.keys}, H {args.heads}, cache {rows_total} rows")
    print(f"{'KERNEL':<26} {'N_Q':>5} {'OPS':>6} {'SYNCS':>6} {'MEDIAN ms':>10} {'x bare':>7} {'PEAK GB':>8}  sync ops / bits")
    for n_q in args.n_q:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
        rows = [row for name in kernels for row in kernel_rows(name, call, device)]
        if older is not None:
            rows.append((f"emulated@{args.against}", lambda call=call: older.run_emulated(*call, return_lse=True)))
        bare_ms: dict[str, float] = {}
        for row, fn in rows:
            fn()  # warm: caches filled, lazy imports done
            fn()
            counter = count_ops(fn)
            ms = statistics.median(call_ms(fn, device) for _ in range(args.iters))
            peak = peak_gb(fn, device)
            base = row.split(":")[0]
            if row.endswith(":bare-kept"):
                bare_ms[base] = ms
            x_bare = ms / bare_ms[base] if base in bare_ms and not row.endswith(":bare-kept") else None
            entry: dict[str, Any] = {"kernel": row, "n_q": n_q, "ops": counter.total, "syncs": counter.syncs, "median_ms": ms}
            entry.update(x_bare=x_bare, peak_gb=peak, top_ops=counter.ops.most_common(12))
            detail = str(counter.syncs or "")
            if row.startswith("emulated@"):
                from kernel.emulated.gfx950 import run_emulated

                entry["bits"] = bits_verdict(_outputs(fn), _outputs(lambda call=call: run_emulated(*call, return_lse=True)))
                all_same &= entry["bits"].startswith("same")
                detail = f"{detail} {entry['bits']}".strip()
            ratio = f"{x_bare:>7.2f}" if x_bare is not None else f"{'':>7}"
            mem = f"{peak:>8.2f}" if peak is not None else f"{'':>8}"
            print(f"{row:<26} {n_q:>5} {counter.total:>6} {sum(counter.syncs.values()):>6} {ms:>10.3f} {ratio} {mem}  {detail}", flush=True)
            if args.profile:
                trace = None if args.trace_dir is None else args.trace_dir / f"{row.replace(':', '_').replace('@', '_at_')}_{n_q}.json"
                entry["profile"] = profile_table(fn, device, args.calls, args.top, trace)
                print("\n".join(entry["profile"]), flush=True)
            results.append(entry)
        del inputs, call
    write_json(args.json, {"device": str(device), "results": results})
    return 0 if all_same else 1
