"""Do the oracle, the bound and the emulated kernel give the same bits at the CPU's chunk sizes
as at the device's defaults? The bound: batches of chunks (oracle.bound.BOUND_BATCH_SLOTS, the
CPU's vs the device's: the chunks are the same, only how many run as one batch differs, so the
bits must agree); the oracle (oracle.rows.REFERENCE_KEY_BUDGET) and the emulator
(DEFAULT_ROW_KEY_BUDGET): chunks of other sizes (whether the device's GEMMs and reductions give
the same bits for other batch shapes: informative). On the bench's inputs
(conformance.tools.bench: n_q rows of KEYS uniform keys, H heads) and on every problem of
scripts/oracle_bitexact_snapshot.py's cases() that fits (materialised on the device).

Each line: NAME n_q: same bits | DIFFERS (max |a - b|) | error. Exit status 1 when any differs.

Usage: python3 scripts/h200/speed28_same.py [--n-q 64,1024] [--keys 2048] [--heads 16]
       [--cache-rows 1048576] [--snapshot-cases]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from conformance.tools.bench import build_cache, build_inputs  # noqa: E402
from kernel.backends.emulated import DEFAULT_ROW_KEY_BUDGET, run_emulated  # noqa: E402
from oracle.bound import BOUND_BATCH_SLOTS, evaluate_modes  # noqa: E402
from oracle.profiles import load_profile  # noqa: E402
from oracle.reference import reference  # noqa: E402
from oracle.rows import REFERENCE_KEY_BUDGET  # noqa: E402

Outputs = dict[str, torch.Tensor]


def _bits(t: torch.Tensor) -> torch.Tensor:
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.contiguous().view(view)


def compare(name: str, n_q: int, run: Callable[[int | None], Outputs], cpu_budget: int) -> bool:
    """Run at the CPU's budget and at the default (None); print and return whether every output has the same bits."""
    try:
        a, b = run(cpu_budget), run(None)
    except Exception as err:  # noqa: BLE001 - reported
        print(f"{name:<10} n_q {n_q:>5}: error {type(err).__name__}: {str(err)[:200]}", flush=True)
        return True
    bad = [key for key in a if not torch.equal(_bits(a[key]), _bits(b[key]))]
    if not bad:
        print(f"{name:<10} n_q {n_q:>5}: same bits", flush=True)
        return True
    worst = max(float((a[k].double() - b[k].double()).abs().nan_to_num(0.0).max()) for k in bad)
    print(f"{name:<10} n_q {n_q:>5}: DIFFERS in {bad} (max |a - b| {worst:.3g})", flush=True)
    return False


def check(args: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float], has_invalid: bool, label: str) -> bool:
    """The three comparisons on one problem."""
    n_q = args[0].shape[0]
    profile = load_profile("gfx950")
    ok = True

    def bound(budget: int | None) -> Outputs:
        kw = {} if budget is None else {"batch_budget": budget}
        ev = evaluate_modes(*args, profile=profile, has_invalid=has_invalid, **kw)
        return {f"{m}/{f}": getattr(e, f) for m, e in ev.items() for f in ("out", "lse", "out_bound", "lse_bound", "window")}

    def oracle(budget: int | None) -> Outputs:
        ref = reference(*args, has_invalid=has_invalid, key_budget=budget)
        return {"out": ref.out, "lse": ref.lse}

    def emulated(budget: int | None) -> Outputs:
        out, lse = run_emulated(*args, has_invalid=has_invalid, return_lse=True, row_key_budget=budget)
        assert lse is not None
        return {"out": out, "lse": lse}

    ok &= compare(f"{label}bound", n_q, bound, BOUND_BATCH_SLOTS["cpu"])
    ok &= compare(f"{label}oracle", n_q, oracle, REFERENCE_KEY_BUDGET["cpu"])
    ok &= compare(f"{label}emulated", n_q, emulated, DEFAULT_ROW_KEY_BUDGET["cpu"])
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="64,1024")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--snapshot-cases", action="store_true", help="also every problem of the bit-exact snapshot")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device {device}")
    ok = True
    cache = build_cache(args.cache_rows, device)
    for n_q in [int(x) for x in args.n_q.split(",")]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        ok &= check((inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale), False, "")
    if args.snapshot_cases:
        from oracle_bitexact_snapshot import cases

        from strategies.materialize import materialize

        for name, recipe in cases():
            p = materialize(recipe, str(device))
            print(f"-- {name}")
            ok &= check((p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale), p.has_invalid, "")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
