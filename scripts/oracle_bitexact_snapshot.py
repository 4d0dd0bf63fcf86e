"""Bit-for-bit snapshot of the oracle, the bound and the emulated kernel over a fixed set of problems.

    python scripts/oracle_bitexact_snapshot.py --write FILE.pt     # record today's outputs
    python scripts/oracle_bitexact_snapshot.py --check FILE.pt     # recompute, compare bit for bit

The problems (`cases()`) are a fixed, diverse set of recipes: empty and negative-length rows,
has_invalid (scattered, tail, leading tile, all), duplicates, long rows (> 2048 keys), every
latent / rope / q distribution, every writer, scale corruptions (judged under the "gfx950" scale
model), NaN codes (a precondition error, recorded as its message). For each problem it records
evaluate_modes under every shipped profile (oracle/profile_files/), at the default key budget and,
for some, a tiny one (many chunks); the reference under both scale models and with the gfx950
Q representation; and the emulated kernel's out / lse. Errors are recorded by type and message.

`--check` compares every tensor with torch.equal (NaN positions compared as equal: NaN == NaN
bits are what torch.equal rejects, so tensors are compared through their integer bit views) and
exits 1 on any difference, naming it. Used to prove that an optimisation of oracle/bound.py,
oracle/rows.py, oracle/reference.py or kernel/backends/emulated.py left every bit unchanged.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.tools.bits import same_bits  # noqa: E402
from kernel.backends.emulated import run_emulated  # noqa: E402
from oracle import q_representation as qrep  # noqa: E402
from oracle.bound import evaluate_modes  # noqa: E402
from oracle.profiles import PROFILE_DIR, load_profile  # noqa: E402
from oracle.reference import reference  # noqa: E402
from strategies.materialize import materialize  # noqa: E402
from strategies.recipe import Recipe  # noqa: E402

PROFILE_NAMES = tuple(sorted(p.stem for p in PROFILE_DIR.glob("*.toml")))


def cases() -> list[tuple[str, Recipe]]:
    """(name, recipe) of every problem of the snapshot."""
    out: list[tuple[str, Recipe]] = []

    def add(name: str, **kw: object) -> None:
        out.append((name, Recipe(**kw)))  # type: ignore[arg-type]

    add("prof", seed=3, n_q=16, heads=16, row_lengths=(512,) * 16, cache_rows=4096)
    add("empty_rows", seed=1, n_q=5, heads=4, row_lengths=(0, 7, -3, 20, 0), cache_rows=64, stream_offset=3)
    add("all_empty", seed=2, n_q=3, heads=2, row_lengths=(0, 0, 0), cache_rows=8)
    add("single_key", seed=4, n_q=2, heads=1, row_lengths=(1, 1), cache_rows=8)
    add("mixed_lengths", seed=5, n_q=9, heads=8, row_lengths=(1, 130, 0, 257, 64, 3, 129, 500, 2), cache_rows=2048)
    for n, pattern in enumerate(("scattered", "tail", "leading_tile", "all")):
        add(
            f"invalid_{pattern}",
            seed=10 + n,
            n_q=4,
            heads=3,
            row_lengths=(200, 40, 0, 300),
            cache_rows=1024,
            invalid_pattern=pattern,
            invalid_permille=300,
            has_invalid=True,
        )
    add(
        "invalid_poison",
        seed=15,
        n_q=3,
        heads=5,
        row_lengths=(150, 90, 260),
        cache_rows=700,
        invalid_pattern="scattered",
        invalid_permille=500,
        has_invalid=True,
        poison=True,
    )
    for n, pattern in enumerate(("clustered", "duplicates", "sorted", "reversed", "tail")):
        add(f"pattern_{pattern}", seed=20 + n, n_q=3, heads=6, row_lengths=(300, 129, 64), cache_rows=512, index_pattern=pattern)
    add("long_rows", seed=30, n_q=2, heads=16, row_lengths=(3000, 2200), cache_rows=8192)
    add("long_dup", seed=31, n_q=3, heads=2, row_lengths=(2600, 5, 2049), cache_rows=300, index_pattern="duplicates")
    for n, latent in enumerate(("heavy", "outliers", "zero_blocks", "tiny_blocks", "max57344", "large", "above_cap")):
        add(f"latent_{latent}", seed=40 + n, n_q=3, heads=4, row_lengths=(180, 33, 128), cache_rows=512, latent=latent)
    for n, rope in enumerate(("large", "tiny", "zero")):
        add(f"rope_{rope}", seed=50 + n, n_q=3, heads=4, row_lengths=(100, 260, 7), cache_rows=512, rope=rope)
    for n, q in enumerate(("large", "tiny", "zero_blocks", "tiny_blocks")):
        add(f"q_{q}", seed=60 + n, n_q=3, heads=7, row_lengths=(140, 70, 256), cache_rows=512, q=q)
    for n, scale in enumerate(("peaked", "flat", 0.37, -0.05)):
        add(f"scale_{n}", seed=70 + n, n_q=3, heads=4, row_lengths=(90, 300, 17), cache_rows=512, softmax_scale=scale)
    for n, writer in enumerate(("pow2-floor", "raw")):
        add(f"writer_{writer}", seed=80 + n, n_q=3, heads=4, row_lengths=(120, 60, 250), cache_rows=512, writer=writer)
    add(
        "exact",
        seed=90,
        n_q=4,
        heads=16,
        row_lengths=(256, 100, 1, 0),
        cache_rows=400,
        q="exact",
        latent="exact",
        rope="exact",
        softmax_scale="exact",
    )
    add("strided", seed=91, n_q=3, heads=4, row_lengths=(77, 200, 5), cache_rows=300, q_pad=(5, 3))
    for n, kind in enumerate(("scale_not_pow2", "scale_above_cap", "zero_scale")):
        add(
            f"corrupt_{kind}",
            seed=100 + n,
            n_q=3,
            heads=4,
            row_lengths=(150, 40, 260),
            cache_rows=512,
            corruptions=({"kind": kind, "count": 6},),
        )
    add(
        "corrupt_nan_codes",
        seed=110,
        n_q=2,
        heads=2,
        row_lengths=(50, 20),
        cache_rows=128,
        corruptions=({"kind": "nan_codes", "count": 2},),
    )
    for seed in range(120, 126):
        add(
            f"random_{seed}",
            seed=seed,
            n_q=6,
            heads=1 + seed % 16,
            row_lengths=tuple((seed * 37 + 11 * i) % 700 - 40 for i in range(6)),
            cache_rows=1500,
            has_invalid=seed % 2 == 0,
            invalid_pattern="scattered" if seed % 2 == 0 else "none",
            invalid_permille=100,
        )
    return out


def _run(fn, results: dict[str, object], key: str) -> None:  # type: ignore[no-untyped-def]
    try:
        values = fn()
    except Exception as err:  # noqa: BLE001 - a recorded outcome
        results[key] = f"{type(err).__name__}: {err}"
        return
    for name, tensor in values.items():
        results[f"{key}/{name}"] = tensor.detach().clone()


def compute(name: str, recipe: Recipe, *, quick: bool = False) -> dict[str, object]:
    """Every recorded output of one problem, keyed by what produced it."""
    p = materialize(recipe, "cpu")
    res: dict[str, object] = {}
    args = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)

    def modes(profile_name: str, **kw: object):  # type: ignore[no-untyped-def]
        def go():  # type: ignore[no-untyped-def]
            ev = evaluate_modes(*args, profile=load_profile(profile_name), has_invalid=p.has_invalid, **kw)  # type: ignore[arg-type]
            return {f"{m}/{f}": getattr(e, f) for m, e in ev.items() for f in ("out", "lse", "out_bound", "lse_bound", "window")}

        return go

    profiles = ("gfx950",) if quick else PROFILE_NAMES
    for prof in profiles:
        _run(modes(prof), res, f"eval/{prof}")
    _run(modes("gfx950", scale_model="gfx950"), res, "eval/gfx950/scale_gfx950")
    if not quick:
        _run(modes("gfx950", key_budget=700), res, "eval/gfx950/budget700")
        _run(modes("bf16-q-bf16-p", key_budget=1), res, "eval/bf16-q-bf16-p/budget1")
    ref_keys = ("out", "lse")
    _run(lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid), k) for k in ref_keys}, res, "ref/stored")
    _run(lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid, scale_model="gfx950"), k) for k in ref_keys}, res, "ref/gfx950")
    if not quick:
        _run(lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid, key_budget=300), k) for k in ref_keys}, res, "ref/budget300")
        _run(
            lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid, q_ref=qrep.fp8_hi_lo(p.q).q_hat), k) for k in ref_keys},
            res,
            "ref/q_hat",
        )

    def emu():  # type: ignore[no-untyped-def]
        o, lse = run_emulated(*args, has_invalid=p.has_invalid, return_lse=True)
        return {"out": o, "lse": lse}

    _run(emu, res, "emulated")
    if not quick:

        def emu_small():  # type: ignore[no-untyped-def]
            o, lse = run_emulated(*args, has_invalid=p.has_invalid, return_lse=True, row_key_budget=256)
            return {"out": o, "lse": lse}

        _run(emu_small, res, "emulated/budget256")
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="record the snapshot into this .pt file")
    group.add_argument("--check", type=Path, help="recompute and compare with this .pt file")
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    stored = torch.load(args.check, weights_only=True) if args.check else {}
    snapshot: dict[str, object] = {}
    bad = 0
    compared = 0
    start = time.perf_counter()
    for name, recipe in cases():
        if args.k not in name:
            continue
        t0 = time.perf_counter()
        res = compute(name, recipe)
        for key, value in res.items():
            full = f"{name}/{key}"
            snapshot[full] = value
            if args.check:
                if full not in stored:
                    print(f"NEW     {full}")
                    bad += 1
                    continue
                old = stored[full]
                ok = same_bits(old, value) if isinstance(value, torch.Tensor) and isinstance(old, torch.Tensor) else old == value
                compared += 1
                if not ok:
                    bad += 1
                    print(f"DIFFERS {full}: {old if isinstance(old, str) else ''} {value if isinstance(value, str) else ''}")
        print(f"{name}: {len(res)} outputs, {time.perf_counter() - t0:.2f} s", flush=True)
    if args.check:
        missing = [k for k in stored if k not in snapshot and k.split("/")[0] in {n for n, _ in cases() if args.k in n}]
        for key in missing:
            print(f"MISSING {key}")
        bad += len(missing)
        print(f"compared {compared} outputs: {bad} differences ({time.perf_counter() - start:.1f} s)")
        return 1 if bad else 0
    torch.save(snapshot, args.write)
    n_err = sum(isinstance(v, str) for v in snapshot.values())
    print(f"wrote {len(snapshot)} outputs ({n_err} recorded errors) to {args.write} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
