"""The emulated kernel of this tree against an older revision's: same bits, time and ops per call.

The old kernel is kernel/backends/emulated.py at --old-rev (read with `git show`, or from
--old-file), loaded as a separate module next to the tree's. For each n_q of the bench's inputs
(conformance.tools.bench: n_q rows of KEYS uniform keys, H heads, a CACHE_ROWS pow2 cache) it
prints whether old and new give the same bits (out and lse, NaN payloads included), the median
time per call of each (CUDA: device events; CPU: process time), calls alternating old / new, and
the aten ops and host syncs of one call (conformance.tools.op_count). With --snapshot-cases, every
problem of scripts/oracle_bitexact_snapshot.py's cases() is materialised on the device and run
through both (an error on either side is compared by type and message).

Each line: ... same bits | DIFFERS (where). Exit status 1 when any differs or a case fails.

Usage: python3 scripts/emu_old_new.py [--n-q 1,64] [--keys 2048] [--heads 16] [--cache-rows N]
       [--iters 10] [--old-rev 36a56b6 | --old-file PATH] [--snapshot-cases] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from conformance.tools.bench import build_cache, build_inputs, call_ms  # noqa: E402
from conformance.tools.bits import same_bits  # noqa: E402
from conformance.tools.old_module import module_at, module_from_file  # noqa: E402
from conformance.tools.op_count import count_ops  # noqa: E402
from kernel.backends import emulated as new_module  # noqa: E402

Run = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


def load_old(rev: str | None, path: str | None) -> ModuleType:
    """kernel/backends/emulated.py of `rev` (git show) or the file `path`, as module emulated_old."""
    if path is not None:
        return module_from_file(path, "emulated_old")
    if rev is None:
        raise SystemExit("give --old-rev or --old-file")
    try:
        return module_at(rev, "kernel/backends/emulated.py", "emulated_old")
    except (OSError, subprocess.SubprocessError) as err:
        raise SystemExit(f"cannot read kernel/backends/emulated.py at {rev} with git show: {err}") from err


def outcome(run: Run, args: tuple[Any, ...], has_invalid: bool) -> tuple[torch.Tensor, torch.Tensor] | str:
    """(out, lse) of one call, or 'ErrorType: message'."""
    try:
        out, lse = run(*args, has_invalid=has_invalid, return_lse=True)
    except Exception as err:  # noqa: BLE001 - compared as text
        return f"{type(err).__name__}: {err}"
    assert lse is not None
    return out, lse


def compare(a: tuple[torch.Tensor, torch.Tensor] | str, b: tuple[torch.Tensor, torch.Tensor] | str) -> str:
    """'same bits' or 'DIFFERS ...'."""
    if isinstance(a, str) or isinstance(b, str):
        return "same bits (both raise)" if a == b else f"DIFFERS: old {str(a)[:120]!r} new {str(b)[:120]!r}"
    bad = [name for name, x, y in zip(("out", "lse"), a, b, strict=True) if not same_bits(x, y)]
    return "same bits" if not bad else f"DIFFERS in {bad}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="1,64")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--max-seconds", type=float, default=20.0, help="stop timing an n_q after this many seconds")
    parser.add_argument("--old-rev", default="36a56b6")
    parser.add_argument("--old-file", default=None)
    parser.add_argument("--snapshot-cases", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.iters < 1:
        parser.error("--iters must be >= 1")
    device = torch.device(args.device)
    old_module = load_old(args.old_rev, args.old_file)
    runs: dict[str, Run] = {"old": old_module.run_emulated, "new": new_module.run_emulated}
    old = args.old_file or args.old_rev
    print(f"device {device}; old = {old}; keys {args.keys}, H {args.heads}, cache {args.cache_rows} rows", flush=True)
    from kernel.backends import emulated_decode, emulated_scores, emulated_state

    state_kernel = emulated_state.kernel_available(device, new_module.lane_sums)
    scores_kernel = emulated_scores.kernel_available(device)
    decode_kernel = emulated_decode.kernel_available(device)
    by = {True: "the Triton kernel", False: "torch operations"}
    paths = f"running-state updates by {by[state_kernel]}, QK accumulation by {by[scores_kernel]}, K/V decode by {by[decode_kernel]}"
    print(f"new: {paths}", flush=True)
    print(f"{'N_Q':>5} {'OLD ms':>10} {'NEW ms':>10} {'x':>6} {'OLD ops/syncs':>14} {'NEW ops/syncs':>14}  bits", flush=True)
    report: dict[str, Any] = {"device": str(device), "old": old, "rows": [], "cases": []}
    report.update(state_kernel=state_kernel, scores_kernel=scores_kernel, decode_kernel=decode_kernel)
    ok = True
    cache = build_cache(args.cache_rows, device)
    for n_q in [int(x) for x in args.n_q.split(",")]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
        results = {name: outcome(run, call, False) for name, run in runs.items()}  # also the warm-up
        verdict = compare(results["old"], results["new"])
        ok &= verdict.startswith("same")
        del results
        counts = {}
        for name, run in runs.items():
            c = count_ops(lambda run=run: run(*call, return_lse=True))
            counts[name] = f"{c.total}/{sum(c.syncs.values())}"
        samples: dict[str, list[float]] = {"old": [], "new": []}
        began = time.monotonic()
        for _ in range(args.iters):
            for name, run in runs.items():
                samples[name].append(call_ms(lambda run=run: run(*call, return_lse=True), device))
            if time.monotonic() - began > args.max_seconds:
                break
        old_ms, new_ms = (statistics.median(samples[k]) for k in ("old", "new"))
        ops = f"{counts['old']:>14} {counts['new']:>14}"
        print(f"{n_q:>5} {old_ms:>10.3f} {new_ms:>10.3f} {old_ms / new_ms:>6.2f} {ops}  {verdict}", flush=True)
        report["rows"].append({"n_q": n_q, "old_ms": old_ms, "new_ms": new_ms, "samples": samples, "ops": counts, "bits": verdict})
        del inputs, call
    if args.snapshot_cases:
        from oracle_bitexact_snapshot import cases

        from strategies.materialize import materialize

        for name, recipe in cases():
            try:
                p = materialize(recipe, str(device))
            except Exception as err:  # noqa: BLE001 - reported
                print(f"-- {name}: materialise failed: {type(err).__name__}: {err}", flush=True)
                continue
            call = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
            verdict = compare(*(outcome(run, call, p.has_invalid) for run in runs.values()))
            ok &= verdict.startswith("same")
            print(f"-- {name}: {verdict}", flush=True)
            report["cases"].append({"name": name, "bits": verdict})
    print("ALL SAME BITS" if ok else "SOME DIFFER", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
