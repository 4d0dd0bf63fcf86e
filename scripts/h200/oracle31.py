"""The float64 oracle's fused products (oracle.fused_products: q . K and exp-weights @ V straight
from the records) against the bmm's over decoded keys (ORACLE_FUSED_PRODUCTS=0) on one device.

Sections, in this order (exit status 1 when the self-check fails or a product leaves its bound):
  selfcheck  fused_products.self_check at 5, 16 and 128 heads (max |fused - bmm| / bound of each
             product), then available()
  products   every block of one reference call per n_q (bench problem: 16 heads, 2048 uniform keys,
             2^20-record cache; at n_q 4096 the first --max-blocks blocks), scores and
             weighted sums, fused vs bmm on the same inputs: max |diff| / bound (bound:
             gamma_576(2^-53) sum |q||K| per score, gamma_L(2^-53) sum |w||V| per output), in
             ulps of the bmm's value and in ulps of its row's largest |value| (row-ulps); then
             block_reference's out / lse (fused vs old): ulps, row-ulps
  bench      reference() per n_q, old (bmm's) / fused: median (min) ms over --iters calls (CUDA
             events); out / lse max ulps against old
  snapshot   every problem of scripts/oracle_bitexact_snapshot.py's cases() on the device
             (reference at the default budget, key_budget 300, the gfx950 q representation):
             product-level ratios over every block, out / lse ulps, NaN / inf placement
  shapes     launch shapes of the two kernels on one chunk at the largest n_q: ms and ratio

Usage: python3 scripts/h200/oracle31.py [--n-q 64,1024,4096] [--keys 2048] [--heads 16]
       [--cache-rows 1048576] [--iters 10] [--sections selfcheck,products,bench,snapshot,shapes]
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

from conformance.tools.bench import build_cache, build_inputs, call_ms  # noqa: E402
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES  # noqa: E402
from oracle import fused_products as fp  # noqa: E402
from oracle import key_decode, rows  # noqa: E402
from oracle import q_representation as qrep  # noqa: E402
from oracle.accumulation import gamma  # noqa: E402
from oracle.reference import block_reference, reference  # noqa: E402

U64 = 2.0**-53


IMPL = os.environ.get("ORACLE31_IMPL", "dmma")  # which fused products: "dmma" (oracle.dmma_products) or "triton"


def set_fused(on: bool) -> None:
    os.environ[fp.ENV_SWITCH] = ("cuda" if IMPL == "dmma" else "triton") if on else "0"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ulps(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| in ulps of max(|got|, |want|) over entries finite in both (NaN / inf
    placement checked by same_special)."""
    fin = torch.isfinite(got) & torch.isfinite(want)
    if not bool(fin.any()):
        return 0.0
    a, b = got[fin], want[fin]
    diff = (a - b).abs()
    mag = torch.maximum(a.abs(), b.abs())
    ulp = torch.pow(2.0, torch.floor(torch.log2(torch.where(mag > 0, mag, 1.0)))) * 2.0**-52
    ulp = torch.where(mag >= 2.0**-1022, ulp, 2.0**-1074)
    return float((diff / ulp).max())


def row_ulps(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| in ulps of the largest finite |want| of its row (last dim)."""
    fin = torch.isfinite(got) & torch.isfinite(want)
    mag = torch.where(fin, want.abs(), 0.0).amax(dim=-1, keepdim=True)
    ulp = torch.pow(2.0, torch.floor(torch.log2(torch.where(mag > 0, mag, 1.0)))) * 2.0**-52
    ulp = torch.where(mag >= 2.0**-1022, ulp, 2.0**-1074)
    diff = torch.where(fin, (got - want).abs(), 0.0)
    return float((diff / ulp).max()) if diff.numel() else 0.0


def same_special(got: torch.Tensor, want: torch.Tensor) -> bool:
    """NaN at the same places, infinities equal."""
    inf = want.isinf()
    return torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), inf) and torch.equal(got[inf], want[inf])


def ratio(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor) -> float:
    """max |got - want| / bound over finite entries (0 where equal)."""
    fin = torch.isfinite(got) & torch.isfinite(want)
    diff = (got[fin] - want[fin]).abs()
    r = torch.where(diff == 0, 0.0, diff / bound[fin])
    return float(r.max()) if r.numel() else 0.0


class Stats:
    def __init__(self) -> None:
        self.v: dict[str, float] = {}
        self.special_ok = True

    def add(self, key: str, value: float) -> None:
        self.v[key] = max(self.v.get(key, 0.0), value)

    def line(self) -> str:
        return " ".join(f"{k} {v:.3g}" for k, v in self.v.items()) + ("" if self.special_ok else " NaN/inf DIFFER")


def compare_block(
    q64: torch.Tensor, kb: rows.KeyBlock, sb: rows.KeyBlock, products: fp.ProductsLike, softmax_scale: float, st: Stats
) -> None:
    """The two products of one block, fused vs bmm on the same inputs, then block_reference's results."""
    assert kb.keys is not None and sb.slots is not None
    qr = q64[kb.rows]
    want = torch.bmm(qr, kb.keys.transpose(1, 2))
    got = products.scores(q64, sb.rows, sb.slots)
    bound = gamma(HEAD_DIM, U64) * torch.bmm(qr.abs(), kb.keys.abs().transpose(1, 2))
    st.special_ok &= same_special(got, want)
    st.add("z/bound", ratio(got, want, bound))
    st.add("z ulps", ulps(got, want))
    del got, bound
    z = want.mul_(softmax_scale).masked_fill_(~kb.valid.unsqueeze(1), float("-inf"))
    w = z.sub_(z.amax(dim=-1, keepdim=True)).exp_()
    values = kb.keys[..., :LATENT_DIM]
    want_o = torch.bmm(w, values)
    got_o = products.weighted(w, sb.slots)
    bound_o = gamma(kb.valid.shape[1], U64) * torch.bmm(w.abs(), values.abs())
    st.special_ok &= same_special(got_o, want_o)
    st.add("o/bound", ratio(got_o, want_o, bound_o))
    st.add("o ulps", ulps(got_o, want_o))
    st.add("o row-ulps", row_ulps(got_o, want_o))
    del w, z, want_o, got_o, bound_o
    old_out, old_lse = block_reference(q64, kb, softmax_scale)
    new_out, new_lse = block_reference(q64, sb, softmax_scale, products)
    st.special_ok &= same_special(new_out, old_out) and same_special(new_lse, old_lse)
    st.add("out ulps", ulps(new_out, old_out))
    st.add("out row-ulps", row_ulps(new_out, old_out))
    st.add("lse ulps", ulps(new_lse, old_lse))


def blocks_both(args: tuple, has_invalid: bool, budget: int):  # type: ignore[no-untyped-def,type-arg]
    _, kv, ind, ptr, _ = args
    decoded = rows.iter_key_blocks(ind, ptr, kv, has_invalid=has_invalid, key_budget=budget)
    slotted = rows.iter_key_blocks(ind, ptr, kv, has_invalid=has_invalid, key_budget=budget, decode=False)
    return zip(decoded, slotted, strict=True)


def section_selfcheck(device: torch.device) -> bool:
    ok = True
    for heads in (5, 16, 128):
        t = time.perf_counter()
        try:
            res = fp.self_check(device, heads=heads, impl=IMPL)
        except Exception as err:  # noqa: BLE001 - reported
            print(f"selfcheck heads {heads}: error {type(err).__name__}: {str(err)[:400]}", flush=True)
            ok = False
            continue
        sync(device)
        print(
            f"selfcheck heads {heads:>3}: {'PASS' if res.ok else 'FAIL'}  scores {res.scores_ratio:.3g} x bound, "
            f"out {res.out_ratio:.3g} x bound ({time.perf_counter() - t:.2f} s incl. compile)",
            flush=True,
        )
        ok &= res.ok
    set_fused(True)
    maker = fp.available(device)
    print(f"selfcheck: fused products {'available' if maker is not None else 'NOT available'}", flush=True)
    return ok and maker is not None


def products_for(kv: torch.Tensor) -> fp.ProductsLike:
    return fp.make_products(IMPL, kv.reshape(-1, RECORD_BYTES), key_decode.code_table(kv.device))


def section_products(cache: torch.Tensor, n_qs: list[int], keys: int, heads: int, max_blocks: int) -> bool:
    ok = True
    budget = rows.REFERENCE_KEY_BUDGET["cuda"]
    for n_q in n_qs:
        inp = build_inputs(cache, n_q, keys, heads)
        args = (inp.q, inp.kv_cache, inp.indices, inp.indptr, inp.softmax_scale)
        q64 = inp.q.to(torch.float64)
        st = Stats()
        n = 0
        for kb, sb in blocks_both(args, False, budget):
            compare_block(q64, kb, sb, products_for(inp.kv_cache), inp.softmax_scale, st)
            n += 1
            del kb, sb
            if n >= max_blocks:
                break
        good = st.special_ok and st.v.get("z/bound", 0) <= 1 and st.v.get("o/bound", 0) <= 1
        ok &= good
        print(f"products n_q {n_q:>5} ({n} blocks): {st.line()} {'ok' if good else 'BEYOND BOUND'}", flush=True)
    return ok


def section_bench(cache: torch.Tensor, n_qs: list[int], keys: int, heads: int, iters: int) -> None:
    device = cache.device
    print("N_Q      old ms   (min)  fused ms   (min)  old/fused  out ulps  lse ulps  special")
    for n_q in n_qs:
        inp = build_inputs(cache, n_q, keys, heads)
        args = (inp.q, inp.kv_cache, inp.indices, inp.indptr, inp.softmax_scale)
        res, cells = {}, []
        for on in (False, True):
            set_fused(on)
            ref = reference(*args)
            res[on] = (ref.out, ref.lse)
            for _ in range(2):
                reference(*args)
            sync(device)
            t = [call_ms(lambda: reference(*args), device) for _ in range(iters)]
            cells.append((statistics.median(t), min(t)))
        (oo, ol), (no, nl) = res[False], res[True]
        special = same_special(no, oo) and same_special(nl, ol)
        print(
            f"{n_q:<6} {cells[0][0]:>8.3f} {cells[0][1]:>7.3f} {cells[1][0]:>9.3f} {cells[1][1]:>7.3f} {cells[0][0] / cells[1][0]:>9.2f}x"
            f" {ulps(no, oo):>9.3g} {ulps(nl, ol):>9.3g}  {'same' if special else 'DIFFER'}",
            flush=True,
        )
        del res, oo, ol, no, nl
    set_fused(True)


def section_snapshot(device: torch.device) -> bool:
    from oracle_bitexact_snapshot import cases

    from strategies.materialize import materialize

    ok = True
    total = Stats()
    n = 0
    for name, recipe in cases():
        p = materialize(recipe, str(device))
        args = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)
        for label, kw in {"stored": {}, "budget300": {"key_budget": 300}, "q_hat": {"q_ref": qrep.fp8_hi_lo(p.q).q_hat}}.items():
            try:
                set_fused(False)
                old = reference(*args, has_invalid=p.has_invalid, **kw)  # type: ignore[arg-type]
                set_fused(True)
                new = reference(*args, has_invalid=p.has_invalid, **kw)  # type: ignore[arg-type]
            except Exception as err:  # noqa: BLE001 - both paths raise the same precondition errors
                print(f"snapshot {name} {label}: error {type(err).__name__}: {str(err)[:100]}")
                continue
            st = Stats()
            q64 = (kw.get("q_ref") if "q_ref" in kw else p.q.to(torch.float64)).contiguous()  # type: ignore[union-attr]
            budget = int(kw.get("key_budget", rows.REFERENCE_KEY_BUDGET["cuda"]))  # type: ignore[call-overload]
            for kb, sb in blocks_both(args, p.has_invalid, budget):
                compare_block(q64, kb, sb, products_for(p.kv_cache), p.softmax_scale, st)
            st.special_ok &= same_special(new.out, old.out) and same_special(new.lse, old.lse)
            st.add("ref out ulps", ulps(new.out, old.out))
            st.add("ref out row-ulps", row_ulps(new.out, old.out))
            st.add("ref lse ulps", ulps(new.lse, old.lse))
            good = st.special_ok and st.v.get("z/bound", 0) <= 1 and st.v.get("o/bound", 0) <= 1
            if not good:
                print(f"snapshot {name} {label}: {st.line()} BEYOND BOUND", flush=True)
            ok &= good
            for k, v in st.v.items():
                total.add(k, v)
            total.special_ok &= st.special_ok
            n += 1
        print(f"snapshot so far ({n} after {name}): {total.line()}", flush=True)
    print(f"snapshot: {n} problems on {device}: {total.line()} {'all within bound' if ok else 'SOME BEYOND BOUND'}", flush=True)
    return ok


SCORE_SHAPES = ((64, 64, 4), (128, 32, 4), (128, 64, 8), (32, 64, 4), (64, 32, 4), (128, 32, 8), (64, 64, 8))
OUT_SHAPES = ((32, 128, 4), (64, 128, 8), (32, 64, 4), (16, 128, 4), (64, 64, 4), (32, 128, 8), (16, 64, 4))


def section_shapes(cache: torch.Tensor, n_q: int, keys: int, heads: int, iters: int) -> None:
    device = cache.device
    inp = build_inputs(cache, n_q, keys, heads)
    args = (inp.q, inp.kv_cache, inp.indices, inp.indptr, inp.softmax_scale)
    budget = rows.REFERENCE_KEY_BUDGET["cuda"]
    kb, sb = next(iter(blocks_both(args, False, budget)))
    assert kb.keys is not None and sb.slots is not None
    q64 = inp.q.to(torch.float64)
    products = products_for(inp.kv_cache)
    qr = q64[kb.rows]
    want = torch.bmm(qr, kb.keys.transpose(1, 2))
    bound = gamma(HEAD_DIM, U64) * torch.bmm(qr.abs(), kb.keys.abs().transpose(1, 2))
    w = torch.softmax(want * inp.softmax_scale, dim=-1).contiguous()
    values = kb.keys[..., :LATENT_DIM]
    want_o = torch.bmm(w, values)
    bound_o = gamma(keys, U64) * torch.bmm(w.abs(), values.abs())
    n_rows = kb.rows.numel()
    flop = 2 * n_rows * heads * keys
    print(f"shapes: one block of {n_rows} rows x {keys} keys x {heads} heads")

    def timed(fn: Callable[[], object]) -> float:
        fn()
        sync(device)
        return statistics.median(call_ms(fn, device) for _ in range(iters))

    print(
        f"  bmm scores {timed(lambda: torch.bmm(qr, kb.keys.transpose(1, 2))):.3f} ms, bmm out {timed(lambda: torch.bmm(w, values)):.3f} ms"
    )
    for bl, bd, warps in SCORE_SHAPES:
        s = fp.Shapes(score_keys=bl, score_dims=bd, score_warps=warps)
        try:
            got = products.scores(q64, sb.rows, sb.slots, s)
            r = ratio(got, want, bound)
            del got
            ms = timed(lambda s=s: products.scores(q64, sb.rows, sb.slots, s))
            print(
                f"  scores keys {bl:>3} dims {bd:>3} warps {warps}: {ms:8.3f} ms {flop * HEAD_DIM / ms / 1e9:6.1f} TF/s  {r:.3g} x bound",
                flush=True,
            )
        except Exception as err:  # noqa: BLE001 - reported
            print(f"  scores keys {bl} dims {bd} warps {warps}: error {type(err).__name__}: {str(err)[:200]}", flush=True)
    for bl, bc, warps in OUT_SHAPES:
        s = fp.Shapes(out_keys=bl, out_cols=bc, out_warps=warps)
        try:
            got = products.weighted(w, sb.slots, s)
            r = ratio(got, want_o, bound_o)
            del got
            ms = timed(lambda s=s: products.weighted(w, sb.slots, s))
            print(
                f"  out keys {bl:>3} cols {bc:>3} warps {warps}: {ms:8.3f} ms {flop * LATENT_DIM / ms / 1e9:6.1f} TF/s  {r:.3g} x bound",
                flush=True,
            )
        except Exception as err:  # noqa: BLE001 - reported
            print(f"  out keys {bl} cols {bc} warps {warps}: error {type(err).__name__}: {str(err)[:200]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="64,1024,4096")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--max-blocks", type=int, default=2)
    parser.add_argument("--sections", default="selfcheck,products,bench,snapshot,shapes")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # a CPU dry run: Triton's interpreter
    sections = set(args.sections.split(","))
    n_qs = [int(x) for x in args.n_q.split(",")]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}); torch {torch.__version__}; fused products {IMPL}; shapes {fp.SHAPES}", flush=True)
    ok = True
    if "selfcheck" in sections:
        ok &= section_selfcheck(device)
    cache = build_cache(args.cache_rows, device)
    if "products" in sections:
        ok &= section_products(cache, n_qs, args.keys, args.heads, args.max_blocks)
    if "bench" in sections:
        section_bench(cache, n_qs, args.keys, args.heads, args.iters)
    if "snapshot" in sections:
        ok &= section_snapshot(device)
    if "shapes" in sections and IMPL == "triton":
        section_shapes(cache, max(n_qs), args.keys, args.heads, max(3, args.iters // 2))
    print("ALL WITHIN THE REFERENCE'S ROUNDING" if ok else "SELF-CHECK FAILED OR SOME RESULT BEYOND THE BOUND", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
