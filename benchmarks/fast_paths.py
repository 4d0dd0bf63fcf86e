"""Each registered fast path (kernel.fastpath) on against off: its self-checks on the device, the
same bits on the bench's inputs and on the snapshot's fixed problems, and the time per call.

    python -m benchmarks fast_paths [--path emulated.pv ...] [--device cuda] [--n-q 64,1024,4096]
        [--snapshot-cases] [--sweep 64,4096] [--json PATH]

For each path (default: every registered one):
- the self-check of each of its variants (default and opt-in) on the device, with its seconds, or
  why the variant cannot run there (`FastPath.eligible`); then the variant `choose` gives under
  the current CONFORMANCE_FAST_PATHS (None: the path is off or nothing passed: on = off);
- per n_q of the bench's inputs (conformance.tools.bench: n_q rows of --keys uniform keys from a
  pow2 cache, --heads heads): the outputs of the code the path sits in (emulated.*: the emulated
  kernel; oracle.*: the float64 reference; peers.bf16-keys: the torch-sdpa adapter) with the path
  on and with `PATH=off` added to the setting, compared bit for bit, and the median ms of each
  (CUDA events, process CPU time on the CPU; calls alternating);
- with --snapshot-cases: every fixed problem of conformance.tools.snapshot.cases on the device, on
  against off (an error on either side compared by type and message);
- with --sweep N_Q,...: for emulated.pv, the median ms at each launch config (BLOCK_D, warps) of
  its chosen variant (emulated.pv's launch_config forced; timing only).
oracle.products is checked within the reference's rounding, not bit for bit (its products are
float64 in another order): its differences are reported, not failed.

Exit codes: 0 on and off agree; 1 a bit-exact path's outputs differ (or a snapshot case fails on
one side only); 2 a bad option or an unknown path.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from benchmarks.common import add_device, add_json, add_shape, cache_rows, int_list, parse, positive, resolve_device, write_json
from conformance.tools.bench import build_cache, build_inputs, call_ms
from kernel import fastpath
from kernel.bits import same_bits

Outcome = tuple[torch.Tensor, ...] | str
WITHIN_ROUNDING = {"oracle.products"}  # self-checked within the reference's rounding, not bit for bit
OWNERS = ("kernel.emulated.gfx950", "kernel.peers.bf16_key_decode", "oracle.rows", "oracle.fused_products")


def register_all() -> dict[str, fastpath.FastPath]:
    """Import the modules that register the fast paths; the registry."""
    import importlib

    for module in OWNERS:
        importlib.import_module(module)
    return fastpath.registered()


def consumer(name: str) -> Callable[[tuple[Any, ...], bool], tuple[torch.Tensor, ...]]:
    """The code path `name` sits in, as (call args, has_invalid) -> its outputs."""
    if name.startswith("emulated."):
        from kernel.emulated.gfx950 import run_emulated

        return lambda args, hi: tuple(t for t in run_emulated(*args, has_invalid=hi, return_lse=True) if t is not None)
    if name.startswith("oracle."):
        from oracle.reference import reference

        def ref(args: tuple[Any, ...], hi: bool) -> tuple[torch.Tensor, ...]:
            r = reference(*args, has_invalid=hi)
            return r.out, r.lse

        return ref
    from kernel.peers import torch_sdpa
    from kernel.peers.protocol import run_peer

    engine = torch_sdpa.ADAPTER.load()
    return lambda args, hi: tuple(
        t for t in run_peer(torch_sdpa.ADAPTER, *args, has_invalid=hi, return_lse=True, engine=engine) if t is not None
    )


@contextlib.contextmanager
def switched_off(name: str) -> Iterator[None]:
    """The block with `name=off` added to CONFORMANCE_FAST_PATHS."""
    before = os.environ.get(fastpath.SETTING)
    os.environ[fastpath.SETTING] = f"{before},{name}=off" if before and before.strip() else f"{name}=off"
    try:
        yield
    finally:
        if before is None:
            del os.environ[fastpath.SETTING]
        else:
            os.environ[fastpath.SETTING] = before


def outcome(run: Callable[[tuple[Any, ...], bool], tuple[torch.Tensor, ...]], args: tuple[Any, ...], hi: bool) -> Outcome:
    try:
        return run(args, hi)
    except Exception as err:  # noqa: BLE001 - compared as text
        return f"{type(err).__name__}: {err}"


def compare(on: Outcome, off: Outcome) -> str:
    """'same bits' or 'DIFFERS ...' (with the largest |on - off| where both are tensors)."""
    if isinstance(on, str) or isinstance(off, str):
        return "same bits (both raise)" if on == off else f"DIFFERS: on {str(on)[:120]!r} off {str(off)[:120]!r}"
    bad = [(n, a, b) for n, a, b in zip(("out", "lse"), on, off, strict=False) if not same_bits(a, b)]
    if not bad:
        return "same bits"
    worst = {n: float((a.double() - b.double()).abs().nan_to_num(0.0).max()) for n, a, b in bad}
    return "DIFFERS: max |on - off| " + ", ".join(f"{n} {v:.3g}" for n, v in worst.items())


def self_checks(path: fastpath.FastPath, device: torch.device) -> list[dict[str, Any]]:
    """Each variant's self-check on the device (or why it cannot run there), printed."""
    rows = []
    for variant in (*path.variants, *path.opt_in):
        why = path.eligible(device, variant)
        if why:
            rows.append({"variant": variant, "runs_here": False, "why": why})
            print(f"  {variant}: cannot run on {device}: {why}", flush=True)
            continue
        began = time.monotonic()
        passed = fastpath.self_check(path.name, device, variant)
        rows.append({"variant": variant, "runs_here": True, "passes": passed, "seconds": round(time.monotonic() - began, 2)})
        print(f"  {variant}: self-check {'PASSES' if passed else 'FAILS'} in {time.monotonic() - began:.1f} s", flush=True)
    return rows


def sweep_pv(n_qs: list[int], cache: torch.Tensor, args: argparse.Namespace, device: torch.device, variant: str) -> list[dict[str, Any]]:
    """emulated.pv's launch configs of `variant`, timed (module docstring)."""
    from kernel.emulated import pv
    from kernel.emulated.gfx950 import run_emulated

    chosen, rows = pv.launch_config, []
    try:
        for n_q in n_qs:
            inputs = build_inputs(cache, n_q, args.keys, args.heads)
            call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
            cells = []
            for config in pv.CONFIGS.get(variant, ()):
                pv.launch_config = lambda rows, variant=variant, config=config: config  # type: ignore[assignment]
                run_emulated(*call, return_lse=True)  # compile / warm
                ms = statistics.median(call_ms(lambda call=call: run_emulated(*call, return_lse=True), device) for _ in range(3))
                cells.append(f"{config}: {ms:.3f}")
                rows.append({"n_q": n_q, "config": list(config), "ms": ms})
            print(f"  sweep n_q {n_q}, ms at (BLOCK_D, warps): " + ", ".join(cells), flush=True)
    finally:
        pv.launch_config = chosen  # type: ignore[assignment]
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks fast_paths", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--path", action="append", default=None, metavar="NAME", help=f"a fast path (repeatable; default all: {', '.join(fastpath.PATHS)})"
    )
    add_device(p)
    add_shape(p, n_q=(64, 1024, 4096))
    p.add_argument("--iters", type=positive, default=6, metavar="N", help="timed calls on and off per n_q (default 6)")
    p.add_argument("--max-seconds", type=float, default=10.0, metavar="S", help="stop timing an n_q after S seconds (default 10)")
    p.add_argument("--snapshot-cases", action="store_true", help="also every fixed problem of the snapshot, on against off")
    p.add_argument("--sweep", type=int_list, default=None, metavar="N_Q,...", help="emulated.pv: time every launch config at these n_q")
    add_json(p)
    return p


def main(argv: list[str]) -> int:
    """The routine (module docstring)."""
    p = parser()
    args = parse(p, argv)
    if isinstance(args, int):
        return args
    registry = register_all()
    names = args.path or list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        print(f"fast_paths: unknown fast path(s) {unknown}; registered: {', '.join(registry)}", file=sys.stderr)
        return 2
    device = resolve_device(args)
    rows_total = cache_rows(args, device)
    cache = build_cache(rows_total, device)
    report: dict[str, Any] = {"device": str(device), "setting": os.environ.get(fastpath.SETTING, ""), "paths": {}}
    ok = True
    for name in names:
        path = registry[name]
        print(f"{name}: {fastpath.PATHS[name]}", flush=True)
        entry: dict[str, Any] = {"self_checks": self_checks(path, device), "rows": [], "cases": []}
        entry["variant"] = variant = fastpath.choose(name, device)
        print(f"  chosen on {device}: {variant or 'none (the torch path: on = off)'}", flush=True)
        run = consumer(name)
        exact = name not in WITHIN_ROUNDING
        print(f"  {'N_Q':>5} {'ON ms':>10} {'OFF ms':>10} {'x':>6}  bits", flush=True)
        for n_q in args.n_q:
            inputs = build_inputs(cache, n_q, args.keys, args.heads)
            call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
            on = outcome(run, call, False)
            with switched_off(name):
                off = outcome(run, call, False)
            verdict = compare(on, off)
            ok &= verdict.startswith("same") or not exact
            del on, off
            samples: dict[str, list[float]] = {"on": [], "off": []}
            began = time.monotonic()
            for _ in range(args.iters):
                samples["on"].append(call_ms(lambda call=call: run(call, False), device))
                with switched_off(name):
                    samples["off"].append(call_ms(lambda call=call: run(call, False), device))
                if time.monotonic() - began > args.max_seconds:
                    break
            on_ms, off_ms = statistics.median(samples["on"]), statistics.median(samples["off"])
            print(f"  {n_q:>5} {on_ms:>10.3f} {off_ms:>10.3f} {off_ms / on_ms:>6.2f}  {verdict}", flush=True)
            entry["rows"].append({"n_q": n_q, "on_ms": on_ms, "off_ms": off_ms, "bits": verdict})
            del inputs, call
        if args.snapshot_cases:
            entry["cases"] = snapshot_cases(name, run, device)
            same = sum(c["bits"].startswith("same") for c in entry["cases"])
            ok &= same == len(entry["cases"]) or not exact
            print(f"  snapshot cases: {same}/{len(entry['cases'])} same bits", flush=True)
        if args.sweep and name == "emulated.pv" and variant is not None:
            entry["sweep"] = sweep_pv(args.sweep, cache, args, device, variant)
        report["paths"][name] = entry
        write_json(args.json, report)
    print("ALL AGREE" if ok else "SOME DIFFER", flush=True)
    write_json(args.json, report)
    return 0 if ok else 1


def snapshot_cases(
    name: str, run: Callable[[tuple[Any, ...], bool], tuple[torch.Tensor, ...]], device: torch.device
) -> list[dict[str, str]]:
    """Every fixed problem of the snapshot on the device, on against off (the differing ones printed)."""
    from conformance.tools.snapshot.cases import cases
    from strategies.materialize import materialize

    found = []
    for case, recipe in cases():
        try:
            p = materialize(recipe, device)
        except Exception as err:  # noqa: BLE001 - reported
            found.append({"name": case, "bits": f"materialize failed: {type(err).__name__}: {err}"})
            continue
        call = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
        on = outcome(run, call, p.has_invalid)
        with switched_off(name):
            off = outcome(run, call, p.has_invalid)
        verdict = compare(on, off)
        if not verdict.startswith("same"):
            print(f"  -- {case}: {verdict}", flush=True)
        found.append({"name": case, "bits": verdict})
    return found
