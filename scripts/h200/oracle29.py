"""The float64 oracle's new code (the fused key decode, oracle.key_decode) against the code
before it (ORACLE_FUSED_DECODE=0: the torch decode) on one device: same bits, time per call.

Sections, in this order (each prints its lines; exit status 1 when any bits differ):
  selfcheck  each kernel variant's probe (oracle.key_decode.self_check) and the one kept
  keys       gather_keys' key tensors, fused vs torch, on the bench's inputs (bits)
  bench      reference() per n_q under old / new: median (min) ms over
             --iters calls (CUDA events), and whether out / lse have the old code's bits
  snapshot   every problem of scripts/oracle_bitexact_snapshot.py's cases() on the device:
             reference (default budget, key_budget 300, the gfx950 q representation), new vs
             old (bits)
  same       speed28_same's oracle check with the new code (the CPU's key budget vs the
             device's: same bits)
  parts      the fused decode (each variant, six launch shapes), the QK and PV bmm's and the
             softmax of one chunk alone (ms): where the remaining time goes

Usage: python3 scripts/h200/oracle29.py [--n-q 1,64,1024,4096] [--keys 2048] [--heads 16]
       [--cache-rows 1048576] [--iters 10] [--sections selfcheck,keys,bench,snapshot,same,parts]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "scripts" / "h200"))

from conformance.tools.bench import build_cache, build_inputs, call_ms  # noqa: E402
from conformance.tools.bits import same_bits  # noqa: E402
from oracle import key_decode, rows  # noqa: E402
from oracle import q_representation as qrep  # noqa: E402
from oracle.reference import block_reference, reference  # noqa: E402

CONFIGS = {"old": False, "new": True}  # the fused decode used where available


def set_fused(on: bool) -> None:
    os.environ[key_decode.ENV_SWITCH] = "1" if on else "0"


def configure(name: str) -> None:
    """old: the code before (the torch decode); new: the fused decode where available."""
    set_fused(CONFIGS[name])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def times_ms(fn: Callable[[], object], device: torch.device, iters: int, warmup: int = 2) -> list[float]:
    """Per-call ms (CUDA events on a GPU, process time on a CPU) after `warmup` calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    return [call_ms(fn, device) for _ in range(iters)]


def both(fn: Callable[[], dict[str, torch.Tensor]]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """fn's outputs with the old code, then with the new one (configure)."""
    configure("old")
    old = fn()
    configure("new")
    return old, fn()


def report(label: str, old: dict[str, torch.Tensor], new: dict[str, torch.Tensor]) -> bool:
    bad = [k for k in old if not same_bits(old[k], new[k])]
    if bad:
        worst = max(float((old[k].double() - new[k].double()).abs().nan_to_num(0.0).max()) for k in bad)
        print(f"{label}: DIFFERS in {bad} (max |a - b| {worst:.3g})", flush=True)
        return False
    print(f"{label}: same bits", flush=True)
    return True


def ref_outputs(args: tuple, has_invalid: bool = False, **kw: object) -> Callable[[], dict[str, torch.Tensor]]:  # type: ignore[type-arg]
    def go() -> dict[str, torch.Tensor]:
        ref = reference(*args, has_invalid=has_invalid, **kw)  # type: ignore[arg-type]
        return {"out": ref.out, "lse": ref.lse}

    return go


def section_selfcheck(device: torch.device) -> bool:
    """The probe for each kernel variant, then available() (the variant it keeps)."""
    for variant in key_decode.VARIANTS:
        t = time.perf_counter()
        try:
            ok = key_decode.self_check(device, rows._probe_decode, variant)
        except Exception as err:  # noqa: BLE001 - reported
            print(f"selfcheck {variant}: error {type(err).__name__}: {str(err)[:300]}")
            continue
        sync(device)
        print(f"selfcheck {variant}: {'same bits' if ok else 'DIFFERS'} ({time.perf_counter() - t:.2f} s incl. compile)", flush=True)
        if not ok:
            flat, slots = key_decode.probe_records(device)
            want = rows._probe_decode(flat, slots)
            got = torch.empty_like(want)
            key_decode.launch(flat, slots, got, key_decode.Decoder(key_decode.code_table(device), variant))
            diff = got.view(torch.int64) != want.view(torch.int64)
            cols = diff.any(0).nonzero().flatten().tolist()
            print(f"  {int(diff.sum())} values differ in {len(cols)} columns: {cols[:6]} ... {cols[-6:]}")
            for n, c in diff.nonzero()[:6].tolist():
                s = slots[n].item()
                code = flat[s, c].item() if 0 <= s and c < 512 else None
                scale = flat[s, 512:528].view(torch.float32)[c // 128].item() if 0 <= s and c < 512 else None
                print(
                    f"  key {n} col {c} (slot {s}, code {code}, scale {scale}): got {got[n, c].item()!r} "
                    f"({got.view(torch.int64)[n, c].item():#x}) want {want[n, c].item()!r} ({want.view(torch.int64)[n, c].item():#x})",
                    flush=True,
                )
    decoder = key_decode.available(device, rows._probe_decode)
    print(f"selfcheck: fused decode {'available, variant ' + decoder.variant if decoder is not None else 'NOT available'}", flush=True)
    return decoder is not None


def section_keys(cache: torch.Tensor, n_qs: list[int], keys: int, heads: int) -> bool:
    ok = True
    for n_q in n_qs:
        inp = build_inputs(cache, n_q, keys, heads)
        start, length = rows.row_bounds(inp.indptr)
        plan = torch.arange(min(n_q, 256), device=cache.device)

        def go(inp=inp, start=start, length=length, plan=plan) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
            return {"keys": rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False, width=keys, full=True).keys}

        old, new = both(go)
        ok &= report(f"keys n_q {n_q:>5} (first {plan.numel()} rows)", old, new)

        # the masked path (slots -1, the zeroing pass of the torch decode)
        def masked(inp=inp, start=start, length=length, plan=plan) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
            return {"keys": rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False).keys}

        old, new = both(masked)
        ok &= report(f"keys n_q {n_q:>5} (unplanned width, masked path)", old, new)
    return ok


def section_bench(cache: torch.Tensor, n_qs: list[int], keys: int, heads: int, iters: int) -> bool:
    """reference() per n_q under each configuration: median (min) ms, bits of each against old."""
    ok = True
    device = cache.device
    print("N_Q    " + "".join(f"{name + ' ms':>12} {'(min)':>8}" for name in CONFIGS) + "  old/new  bits vs old")
    for n_q in n_qs:
        inp = build_inputs(cache, n_q, keys, heads)
        args = (inp.q, inp.kv_cache, inp.indices, inp.indptr, inp.softmax_scale)
        fn = ref_outputs(args)
        configure("old")
        want = fn()
        medians, cells, verdict = [], "", []
        for name in CONFIGS:
            configure(name)
            got = fn()
            if name != "old":
                same = all(same_bits(want[k], got[k]) for k in want)
                ok &= same
                verdict.append(f"{name} {'same' if same else 'DIFFER'}")
            del got
            t = times_ms(fn, device, iters)
            medians.append(statistics.median(t))
            cells += f"{medians[-1]:>12.3f} {min(t):>8.3f}"
        del want
        print(f"{n_q:<6} {cells} {medians[0] / medians[-1]:>7.2f}x  {', '.join(verdict)}", flush=True)
    configure("new")
    return ok


def section_parts(cache: torch.Tensor, n_q: int, keys: int, heads: int, iters: int) -> None:
    """One chunk of the device's plan (REFERENCE_KEY_BUDGET rows) at n_q: its pieces alone."""
    device = cache.device
    inp = build_inputs(cache, n_q, keys, heads)
    budget = rows.REFERENCE_KEY_BUDGET.get(device.type, rows.REFERENCE_KEY_BUDGET["cpu"])
    n_rows = max(1, min(n_q, budget // keys))
    start, length = rows.row_bounds(inp.indptr)
    plan = torch.arange(n_rows, device=device)
    q64 = inp.q.to(torch.float64)
    set_fused(True)
    block = rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False, width=keys, full=True)
    scores = torch.bmm(q64[plan], block.keys.transpose(1, 2))
    gb_keys = block.keys.numel() * 8 / 1e9
    lines = []

    def timed(name: str, fn: Callable[[], object], gb: float) -> None:
        m = statistics.median(times_ms(fn, device, iters))
        lines.append(f"  {name:<28} {m:>9.3f} ms  {gb:>7.2f} GB  {gb / m:>6.2f} TB/s")

    decoder = key_decode.available(device, rows._probe_decode)
    for variant in key_decode.VARIANTS:
        if decoder is not None:  # the variant timed here (both give the same bits where the probe passed)
            key_decode._AVAILABLE[device] = key_decode.Decoder(decoder.table, variant)
        timed(
            f"fused gather_keys {variant}",
            lambda: rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False, width=keys, full=True),
            gb_keys * 656 / 4608 + gb_keys,
        )
    key_decode._AVAILABLE[device] = decoder
    if decoder is not None:  # launch shapes of the kernel: time, and bits against the torch decode
        set_fused(False)
        want = rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False, width=keys, full=True).keys
        set_fused(True)
        shape = (key_decode.BLOCK_KEYS, key_decode.NUM_WARPS)
        for block_keys, warps in ((8, 4), (16, 4), (32, 4), (16, 8), (32, 8), (64, 8)):
            key_decode.BLOCK_KEYS, key_decode.NUM_WARPS = block_keys, warps
            got = rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False, width=keys, full=True).keys
            same = same_bits(got, want)
            del got
            timed(
                f"fused {decoder.variant} {block_keys} keys/{warps} warps {'same' if same else 'DIFFERS'}",
                lambda: rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False, width=keys, full=True),
                gb_keys * 656 / 4608 + gb_keys,
            )
        key_decode.BLOCK_KEYS, key_decode.NUM_WARPS = shape
        del want
    set_fused(False)
    timed(
        "torch gather_keys",
        lambda: rows.gather_keys(plan, start, length, inp.indices, inp.kv_cache, has_invalid=False, width=keys, full=True),
        gb_keys * 656 / 4608 + gb_keys,
    )
    set_fused(True)
    timed("QK bmm", lambda: torch.bmm(q64[plan], block.keys.transpose(1, 2)), gb_keys)
    timed("PV bmm", lambda: torch.bmm(scores, block.keys[..., :512]), gb_keys * 512 / 576)

    def softmax() -> None:
        s = scores.clone()
        s.mul_(inp.softmax_scale)
        peak = s.amax(dim=-1, keepdim=True)
        s.sub_(peak).exp_()
        s.sum(dim=-1, keepdim=True)

    timed("clone + softmax passes", softmax, scores.numel() * 8 * 10 / 1e9)
    timed("block_reference", lambda: block_reference(q64, block, inp.softmax_scale), gb_keys * (1 + 512 / 576))
    print(f"parts: one chunk of {n_rows} rows x {keys} keys x {heads} heads (n_q {n_q}; a call has {max(1, n_q // n_rows)} such chunks)")
    print("\n".join(lines), flush=True)
    configure("new")


def section_same(cache: torch.Tensor, n_qs: list[int], keys: int, heads: int) -> bool:
    from speed28_same import compare

    ok = True
    configure("new")
    for n_q in n_qs:
        inp = build_inputs(cache, n_q, keys, heads)
        args = (inp.q, inp.kv_cache, inp.indices, inp.indptr, inp.softmax_scale)

        def oracle(budget: int | None, args=args) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
            ref = reference(*args, key_budget=budget)
            return {"out": ref.out, "lse": ref.lse}

        ok &= compare("oracle", n_q, oracle, rows.REFERENCE_KEY_BUDGET["cpu"])
    return ok


def section_snapshot(device: torch.device) -> bool:
    from oracle_bitexact_snapshot import cases

    from strategies.materialize import materialize

    ok = True
    n = 0
    for name, recipe in cases():
        p = materialize(recipe, str(device))
        args = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
        variants = {
            "stored": {},
            "budget300": {"key_budget": 300},
            "q_hat": {"q_ref": qrep.fp8_hi_lo(p.q).q_hat},
        }
        for label, kw in variants.items():
            try:
                old, new = both(ref_outputs(args, p.has_invalid, **kw))
            except Exception as err:  # noqa: BLE001 - both paths raise the same precondition errors
                print(f"snapshot {name} {label}: error {type(err).__name__}: {str(err)[:120]}")
                continue
            same = all(same_bits(old[k], new[k]) for k in old)
            n += 1
            if not same:
                report(f"snapshot {name} {label}", old, new)
            ok &= same
    print(f"snapshot: {n} reference outputs compared on {device}, {'all same bits' if ok else 'SOME DIFFER'}", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="1,64,1024,4096")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--sections", default="selfcheck,keys,bench,snapshot,same,parts")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    sections = set(args.sections.split(","))
    n_qs = [int(x) for x in args.n_q.split(",")]
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}); torch {torch.__version__}", flush=True
    )
    ok = True
    if "selfcheck" in sections:
        ok &= section_selfcheck(device)
    cache = build_cache(args.cache_rows, device)
    if "keys" in sections:
        ok &= section_keys(cache, [n for n in n_qs if n >= 64][:2] or n_qs[:1], args.keys, args.heads)
    if "bench" in sections:
        ok &= section_bench(cache, n_qs, args.keys, args.heads, args.iters)
    if "snapshot" in sections:
        ok &= section_snapshot(device)
    if "same" in sections:
        ok &= section_same(cache, [n for n in n_qs if 64 <= n <= 1024] or n_qs[:1], args.keys, args.heads)
    if "parts" in sections:
        section_parts(cache, max(n_qs), args.keys, args.heads, args.iters)
    print("ALL SAME BITS" if ok else "SOME BITS DIFFER (or the fused decode is unavailable)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
