"""emulated's fused kernels on a GPU: run_emulated with every Triton kernel on against the torch
paths that kernel/backends/emulated_qk.py (EMULATED_TRITON_QK) and emulated_pv.py
(EMULATED_TRITON_PV) replace, switched off by their environment variables one at a time and
both: same bits (out and lse) on the bench's inputs and on the bit-exact snapshot's problems,
and the median device ms of each configuration.

Prints (flushed): which QK and PV variants passed their self-checks on the device; per n_q a row
`N_Q  all-on  qk-only  pv-only  both-off  bits`; then the snapshot problems whose bits differ and
a count. Exit status 1 when any comparison differs.

Usage: python3 scripts/emu_qk_check.py [--n-q 4096,1024,64] [--keys 2048] [--heads 16]
       [--cache-rows N] [--iters 5] [--snapshot-cases] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from conformance.tools.bench import build_cache, build_inputs, call_ms  # noqa: E402
from kernel.backends import emulated, emulated_pv, emulated_qk  # noqa: E402

QK, PV = emulated_qk.ENV_SWITCH, emulated_pv.ENV_SWITCH
# a kernel "on": its switch as EMU_CHECK_QK_ON / EMU_CHECK_PV_ON say (default: unset, the
# module's default kernel on the device, e.g. the CUDA DMMA one; "1": the Triton variants)
QK_ON, PV_ON = os.environ.get("EMU_CHECK_QK_ON") or None, os.environ.get("EMU_CHECK_PV_ON") or None
CONFIGS: dict[str, dict[str, str | None]] = {
    "all-on": {QK: QK_ON, PV: PV_ON},
    "qk-only": {QK: QK_ON, PV: "0"},
    "pv-only": {QK: "0", PV: PV_ON},
    "both-off": {QK: "0", PV: "0"},
}


def switched(setting: dict[str, str | None], fn: Callable[[], Any]) -> Any:
    """fn() with the environment switches set as in `setting` (None: unset)."""
    before = {name: os.environ.get(name) for name in setting}
    for name, value in setting.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        return fn()
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def outcome(call: tuple[Any, ...], has_invalid: bool) -> tuple[torch.Tensor, torch.Tensor] | str:
    try:
        out, lse = emulated.run_emulated(*call, has_invalid=has_invalid, return_lse=True)
    except Exception as err:  # noqa: BLE001 - compared as text
        return f"{type(err).__name__}: {err}"
    return out.view(torch.int16).clone(), lse.view(torch.int32).clone()


def same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-q", default="4096,1024,64")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--snapshot-cases", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    report: dict[str, Any] = {"device": str(device), "rows": [], "cases": []}
    ok = True
    for name, module, check in (
        ("QK", emulated_qk, lambda v: emulated_qk.self_check(device, emulated.group_scores_torch, v)),
        ("PV", emulated_pv, lambda v: emulated_pv.self_check(device, emulated.group_pv_terms, emulated.lane_sums, v)),
    ):
        for variant in module.VARIANTS:
            began = time.monotonic()
            try:
                passed, error = check(variant), ""
            except Exception as err:  # noqa: BLE001 - reported
                passed, error = False, f" ({type(err).__name__}: {str(err)[:300]})"
            took = time.monotonic() - began
            print(f"{name} self-check on {device}, variant {variant}: {'PASSES' if passed else 'FAILS'}{error} in {took:.1f} s", flush=True)
            report[f"{name.lower()}_{variant}"] = passed
    report["qk_variant"] = switched(CONFIGS["all-on"], lambda: emulated_qk.kernel_variant(device, emulated.group_scores_torch))
    report["pv_variant"] = switched(
        CONFIGS["all-on"], lambda: emulated_pv.kernel_variant(device, emulated.group_pv_terms, emulated.lane_sums)
    )
    print(f"QK variant in use: {report['qk_variant']}; PV variant in use: {report['pv_variant']}", flush=True)
    print(f"{'N_Q':>5} " + " ".join(f"{name:>9}" for name in CONFIGS) + "  bits (each against both-off)", flush=True)
    cache = build_cache(args.cache_rows, device)
    for n_q in [int(x) for x in args.n_q.split(",") if x]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
        results = {name: switched(off, lambda call=call: outcome(call, False)) for name, off in CONFIGS.items()}
        verdict = {name: same(results[name], results["both-off"]) for name in CONFIGS}
        ok &= all(verdict.values())
        del results
        samples: dict[str, list[float]] = {name: [] for name in CONFIGS}
        for _ in range(args.iters):
            for name, off in CONFIGS.items():
                samples[name].append(
                    switched(off, lambda call=call: call_ms(lambda: emulated.run_emulated(*call, return_lse=True), device))
                )
        med = {name: statistics.median(v) for name, v in samples.items()}
        bits = "same bits" if all(verdict.values()) else "DIFFERS: " + ",".join(n for n, v in verdict.items() if not v)
        print(f"{n_q:>5} " + " ".join(f"{med[name]:>9.3f}" for name in CONFIGS) + f"  {bits}", flush=True)
        report["rows"].append({"n_q": n_q, "median_ms": med, "samples": samples, "bits": bits})
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
        del inputs, call
    if args.snapshot_cases:
        from oracle_bitexact_snapshot import cases

        from strategies.materialize import materialize

        n_same = n = 0
        for name, recipe in cases():
            try:
                p = materialize(recipe, str(device))
            except Exception as err:  # noqa: BLE001 - reported
                print(f"-- {name}: materialise failed: {type(err).__name__}: {err}", flush=True)
                continue
            call = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
            on = switched(CONFIGS["all-on"], lambda call=call, p=p: outcome(call, p.has_invalid))
            off = switched(CONFIGS["both-off"], lambda call=call, p=p: outcome(call, p.has_invalid))
            n += 1
            if same(on, off):
                n_same += 1
            else:
                ok = False
                print(f"-- {name}: DIFFERS", flush=True)
            report["cases"].append({"name": name, "same": same(on, off)})
        print(f"snapshot cases: {n_same}/{n} same bits (all kernels on vs QK and PV off)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
