"""The emulated kernel with its fused PV kernel (kernel/backends/emulated_pv.py) against the same
tree with EMULATED_TRITON_PV=0 (group_pv_terms and emulated_state.advance): same bits, time.

Prints, in order (flushed as it goes, so a cut run keeps what it did):
- with --check-variants dot,sum: the PV kernel's self-check on the device for each variant
  (seconds, verdict; with --diagnose, where one fails: which probe elements differ at each
  variant and config: o or l_parts, zeros, row 0 head 0's zero sign, finite ulps); then the
  variant kernel_available picks (its probe's seconds) and which other Triton kernels are on;
- for each n_q of the bench's inputs (conformance.tools.bench: n_q rows of KEYS uniform keys,
  H heads, a CACHE_ROWS pow2 cache): whether run_emulated's out and lse have the same bits with
  the kernel and without, how many kernel launches a call made, and the median ms per call of
  each (CUDA events; calls alternating);
- with --snapshot-cases: every problem of scripts/oracle_bitexact_snapshot.py's cases() on the
  device, with against without (an error on either side compared by type and message);
- with --sweep N_Q,..: median ms of run_emulated at each (BLOCK_D, num_warps) of SWEEP_CONFIGS
  (emulated_pv.launch_config forced; timing only: configs other than CONFIGS' are not probed).

Exit status 1 when any comparison differs or a case fails.

Usage: python3 scripts/emu_pv_check.py [--n-q 64,1024,4096] [--keys 2048] [--heads 16]
       [--cache-rows N] [--iters 6] [--check-variants dot,sum] [--diagnose] [--snapshot-cases]
       [--sweep 64,4096] [--json PATH]
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
from conformance.tools.bits import same_bits  # noqa: E402
from kernel.backends import emulated, emulated_decode, emulated_pv, emulated_scores, emulated_state  # noqa: E402

Outcome = tuple[torch.Tensor, torch.Tensor] | str
SWEEP_CONFIGS = ((32, 4), (64, 4), (128, 4), (128, 8))  # (BLOCK_D, num_warps); only the defaults are probed


def outcome(args: tuple[Any, ...], has_invalid: bool) -> Outcome:
    """(out, lse) of one run_emulated call, or 'ErrorType: message'."""
    try:
        out, lse = emulated.run_emulated(*args, has_invalid=has_invalid, return_lse=True)
    except Exception as err:  # noqa: BLE001 - compared as text
        return f"{type(err).__name__}: {err}"
    assert lse is not None
    return out, lse


def compare(a: Outcome, b: Outcome) -> str:
    """'same bits' or 'DIFFERS ...' (a: with the kernel, b: without)."""
    if isinstance(a, str) or isinstance(b, str):
        return "same bits (both raise)" if a == b else f"DIFFERS: with {str(a)[:120]!r} without {str(b)[:120]!r}"
    bad = [name for name, x, y in zip(("out", "lse"), a, b, strict=True) if not same_bits(x, y)]
    return "same bits" if not bad else f"DIFFERS in {bad}"


def pv_off(fn: Callable[[], Any]) -> Any:
    """fn() with EMULATED_TRITON_PV=0."""
    before = os.environ.get(emulated_pv.ENV_SWITCH)
    os.environ[emulated_pv.ENV_SWITCH] = "0"
    try:
        return fn()
    finally:
        if before is None:
            del os.environ[emulated_pv.ENV_SWITCH]
        else:
            os.environ[emulated_pv.ENV_SWITCH] = before


def diagnose(device: torch.device) -> list[str]:
    """Where advance_triton differs from advance_torch on the probe (one line per shape, BLOCK_D)."""
    lines = []
    for shape in emulated_pv.PROBE_SHAPES:
        buffer, alpha, p, records, masked, counts = emulated_pv.probe_inputs(device, *shape)
        expected = buffer.clone()
        emulated_pv.advance_torch(expected, alpha, p, records, masked, counts, emulated.group_pv_terms, emulated.lane_sums)
        for variant, config in ((v, c) for v in emulated_pv.VARIANTS for c in emulated_pv.CONFIGS[v]):
            got = buffer.clone()
            where = f"{shape} {variant} (BLOCK_D, warps) {config}"
            try:
                counts_dev = torch.tensor(counts, dtype=torch.int32, device=device)
                emulated_pv.advance_triton(got, alpha, p, records, masked, counts_dev, variant, config)
            except Exception as err:  # noqa: BLE001 - reported
                lines.append(f"  {where}: raises {type(err).__name__}: {str(err)[:300]}")
                continue
            nan_e, nan_g = torch.isnan(expected), torch.isnan(got)
            differ = (nan_e != nan_g) | (~nan_e & ~nan_g & (expected.view(torch.int32) != got.view(torch.int32)))
            o_d, l_d = int(differ[..., :512].sum()), int(differ[..., 512:].sum())
            zero = int((differ & (expected == 0)).sum())
            row0 = int(differ[0, 0, :64].sum())
            finite = differ & torch.isfinite(expected) & torch.isfinite(got) & (expected != 0)
            ulps = (expected.view(torch.int32) - got.view(torch.int32)).abs()[finite]
            worst = int(ulps.max()) if ulps.numel() else 0
            lines.append(f"  {where}: o {o_d} differ, l_parts {l_d}, zeros {zero}, row0 head0 {row0}, finite max ulps {worst}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="64,1024,4096")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--iters", type=int, default=6)
    parser.add_argument("--max-seconds", type=float, default=10.0, help="stop timing an n_q after this many seconds")
    parser.add_argument("--snapshot-cases", action="store_true")
    parser.add_argument("--sweep", default="", help="n_q values to time at every BLOCK_D")
    parser.add_argument("--check-variants", default="", help="variants to self-check one by one, e.g. dot,sum")
    parser.add_argument("--diagnose", action="store_true", help="where a checked variant fails: which probe elements differ")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    report: dict[str, Any] = {"device": str(device), "rows": [], "cases": [], "sweep": []}
    ok = True

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))

    report["self_check"] = {}
    failed = False
    for variant in [v for v in args.check_variants.split(",") if v]:
        began = time.monotonic()
        try:
            checked = emulated_pv.self_check(device, emulated.group_pv_terms, emulated.lane_sums, variant)
            error = ""
        except Exception as err:  # noqa: BLE001 - reported
            checked, error = False, f" ({type(err).__name__}: {str(err)[:300]})"
        verdict = "PASSES" if checked else "FAILS"
        print(f"PV kernel self-check on {device}, variant {variant}: {verdict}{error} in {time.monotonic() - began:.1f} s", flush=True)
        report["self_check"][variant] = checked
        failed |= not checked
    if failed and device.type == "cuda" and args.diagnose:
        for line in diagnose(device):
            print(line, flush=True)
    began = time.monotonic()
    available = emulated_pv.kernel_available(device, emulated.group_pv_terms, emulated.lane_sums)
    probed = time.monotonic() - began
    others = {
        "state": emulated_state.kernel_available(device, emulated.lane_sums),
        "scores": emulated_scores.kernel_available(device),
        "decode": emulated_decode.kernel_available(device),
    }
    variant = emulated_pv._CHOSEN.get(torch.empty(0, device=device).device)
    print(f"PV kernel available: {available} (variant {variant}, probed in {probed:.1f} s); other kernels: {others}", flush=True)
    report.update(available=available, variant=variant, others=others)
    save()

    launches: list[int] = []
    fused = emulated_pv.advance_triton

    def counted(*a: Any, **k: Any) -> None:
        launches.append(1)
        fused(*a, **k)

    emulated_pv.advance_triton = counted  # type: ignore[assignment]
    print(f"keys {args.keys}, H {args.heads}, cache {args.cache_rows} rows", flush=True)
    print(f"{'N_Q':>5} {'WITH ms':>10} {'WITHOUT ms':>10} {'x':>6} {'launches':>8}  bits", flush=True)
    cache = build_cache(args.cache_rows, device)
    for n_q in [int(x) for x in args.n_q.split(",") if x]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
        before = len(launches)
        with_k = outcome(call, False)
        n_launch = len(launches) - before
        verdict = compare(with_k, pv_off(lambda call=call: outcome(call, False)))
        ok &= verdict.startswith("same")
        del with_k
        samples: dict[str, list[float]] = {"with": [], "without": []}
        t0 = time.monotonic()
        for _ in range(args.iters):
            samples["with"].append(call_ms(lambda call=call: emulated.run_emulated(*call, return_lse=True), device))
            samples["without"].append(pv_off(lambda call=call: call_ms(lambda: emulated.run_emulated(*call, return_lse=True), device)))
            if time.monotonic() - t0 > args.max_seconds:
                break
        w, wo = statistics.median(samples["with"]), statistics.median(samples["without"])
        print(f"{n_q:>5} {w:>10.3f} {wo:>10.3f} {wo / w:>6.2f} {n_launch:>8}  {verdict}", flush=True)
        report["rows"].append({"n_q": n_q, "with_ms": w, "without_ms": wo, "samples": samples, "launches": n_launch, "bits": verdict})
        save()
        del inputs, call
    if args.snapshot_cases:
        from oracle_bitexact_snapshot import cases

        from strategies.materialize import materialize

        same = 0
        for name, recipe in cases():
            try:
                p = materialize(recipe, str(device))
            except Exception as err:  # noqa: BLE001 - reported
                print(f"-- {name}: materialise failed: {type(err).__name__}: {err}", flush=True)
                continue
            call = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
            verdict = compare(outcome(call, p.has_invalid), pv_off(lambda call=call, p=p: outcome(call, p.has_invalid)))
            ok &= verdict.startswith("same")
            same += verdict.startswith("same")
            if not verdict.startswith("same bits"):
                print(f"-- {name}: {verdict}", flush=True)
            report["cases"].append({"name": name, "bits": verdict})
        print(f"snapshot cases: {same}/{len(report['cases'])} same bits, {len(launches)} PV launches so far", flush=True)
        save()
    if args.sweep and available and variant == "dot":
        chosen = emulated_pv.launch_config
        for n_q in [int(x) for x in args.sweep.split(",") if x]:
            inputs = build_inputs(cache, n_q, args.keys, args.heads)
            call = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
            line = []
            for config in SWEEP_CONFIGS:
                emulated_pv.launch_config = lambda rows, variant="dot", config=config: config  # type: ignore[assignment]
                emulated.run_emulated(*call, return_lse=True)  # compile / warm
                ms = statistics.median(call_ms(lambda: emulated.run_emulated(*call, return_lse=True), device) for _ in range(3))
                line.append(f"{config}: {ms:.3f}")
                report["sweep"].append({"n_q": n_q, "config": config, "ms": ms})
            emulated_pv.launch_config = chosen  # type: ignore[assignment]
            print(
                f"sweep n_q {n_q}, ms at (BLOCK_D, warps) (default {chosen(min(n_q, 4096), variant or 'dot')}): " + ", ".join(line),
                flush=True,
            )
            save()
    print("ALL SAME BITS" if ok else "SOME DIFFER", flush=True)
    save()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
