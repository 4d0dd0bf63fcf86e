"""Probe a matrix unit's f32 accumulation (bf16 inputs) with directed dot products, MMA-Sim style.

A candidate accumulation model (`MmaModel`) says how a dot product `c + sum_k a_k b_k` of exact
products is summed into f32:

- ``fused``: the products are taken `block` at a time with the running accumulator `c`; within a
  block every term is aligned to the largest exponent among them (exponent of a product = the sum
  of its operands' exponents, its significand in [1, 4)), keeping `frac_bits` bits below that
  exponent (``term_rounding``: "trunc" toward zero, "floor", or "nearest"), summed exactly, and the
  sum is rounded once to f32 (``out_rounding``: "rz" toward zero or "rn" nearest even). MMA-Sim's
  published Hopper wgmma model is fused, block 16 (k of one bf16 wgmma), 25 fraction bits,
  truncation, final RZ (`HOPPER_MMASIM`).
- ``sequential``: one f32 rounding per product (an FMA chain), "rn" or "rz".
- ``pairwise``: a balanced tree of f32 additions rounded to nearest.

Directed problems (`directed_problems`) are rows of A against B = ones, each built so that one
parameter decides the f32 bits: a large product followed by many small ones (fraction bits), two
half-ulp terms at positions p, p + 1 (instruction block: together they carry, apart they are
lost), 3/4 of an ulp above and below 1 (rounding), a negative term below the kept bits
(truncation vs floor), exact cancellation before a tiny term (alignment before summation).
`analyse` runs every candidate on every problem and reports which match bit for bit.

Device use: `python -m conformance.tools.probe.mma --device cuda --json out.json` (cuBLAS through
``torch.mm(..., out_dtype=torch.float32)``, Triton ``tl.dot`` when importable, plus a randomized
bit-exact validation of the surviving models). Units: `frac_bits` and `block` are counts; values
are f32 numbers carried in float64 tensors.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class MmaModel:
    """One candidate accumulation model (see the module docstring)."""

    kind: str  # "fused" | "sequential" | "pairwise"
    block: int = 1
    frac_bits: int = 24
    term_rounding: str = "trunc"  # "trunc" | "floor" | "nearest"
    out_rounding: str = "rn"  # "rz" | "rn"

    @property
    def label(self) -> str:
        if self.kind == "fused":
            return f"fused(block={self.block}, frac_bits={self.frac_bits}, terms={self.term_rounding}, out={self.out_rounding})"
        return f"{self.kind}({self.out_rounding})"


#: MMA-Sim's published model of Hopper bf16 wgmma (mmasim/simulator: WGMMASim, 25 fraction bits,
#: fused dot-add of the k = 16 products and C, truncated terms, final round toward zero).
HOPPER_MMASIM = MmaModel("fused", block=16, frac_bits=25, term_rounding="trunc", out_rounding="rz")


def round_f32(x: torch.Tensor, mode: str) -> torch.Tensor:
    """Round float64 values to f32 (returned as float64): "rn" nearest even, "rz" toward zero."""
    y = x.to(torch.float32)
    if mode == "rz":
        over = y.to(torch.float64).abs() > x.abs()
        y = torch.where(over, torch.nextafter(y, torch.zeros_like(y)), y)
    elif mode != "rn":
        raise ValueError(f"out_rounding: expected 'rn' or 'rz', got {mode!r}")
    return y.to(torch.float64)


def _exponent(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 |x|) of nonzero normal values (int64); a very negative number for zeros."""
    _, e = torch.frexp(x)
    return torch.where(x == 0, torch.full_like(e, -100000), e - 1).to(torch.int64)


def _fused_block(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, model: MmaModel) -> torch.Tensor:
    """c [R] + sum_j a[:, j] b[:, j] as one fused instruction under `model` (float64 in and out)."""
    prod = a * b  # exact: bf16 x bf16 products fit float64
    e_prod = torch.where(prod == 0, torch.full_like(prod, -100000, dtype=torch.int64), _exponent(a) + _exponent(b))
    e_c = _exponent(c)
    e_max = torch.maximum(e_prod.max(dim=1).values, e_c)
    e_max = torch.where(e_max < -50000, torch.zeros_like(e_max), e_max)
    shift = (model.frac_bits - e_max).to(torch.float64)
    terms = torch.cat([c[:, None], prod], dim=1) * torch.pow(2.0, shift)[:, None]
    if model.term_rounding == "trunc":
        terms = torch.trunc(terms)
    elif model.term_rounding == "floor":
        terms = torch.floor(terms)
    elif model.term_rounding == "nearest":
        terms = torch.round(terms)
    else:
        raise ValueError(f"term_rounding: expected 'trunc', 'floor' or 'nearest', got {model.term_rounding!r}")
    total = terms.sum(dim=1) * torch.pow(2.0, -shift)  # integers below 2^53: exact
    return round_f32(total, model.out_rounding)


def simulate(a: torch.Tensor, b: torch.Tensor, model: MmaModel, c: torch.Tensor | None = None) -> torch.Tensor:
    """Rows of `c + a @ b` for a [R, K] and b [K] (float64, exact bf16 values) under `model`: [R]."""
    a = a.to(torch.float64)
    bb = b.to(torch.float64)[None, :].expand_as(a)
    acc = torch.zeros(a.shape[0], dtype=torch.float64) if c is None else c.to(torch.float64).clone()
    k = a.shape[1]
    if model.kind == "fused":
        for start in range(0, k, model.block):
            acc = _fused_block(acc, a[:, start : start + model.block], bb[:, start : start + model.block], model)
        return acc
    prod = a * bb
    if model.kind == "sequential":
        for j in range(k):
            acc = round_f32(acc + prod[:, j], model.out_rounding)
        return acc
    if model.kind == "pairwise":
        level = [prod[:, j] for j in range(k)]
        while len(level) > 1:
            level = [round_f32(level[i] + level[i + 1], "rn") if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        return round_f32(acc + level[0], "rn")
    raise ValueError(f"kind: expected 'fused', 'sequential' or 'pairwise', got {model.kind!r}")


def candidate_models(blocks: Sequence[int] = (2, 4, 8, 16, 32, 64)) -> list[MmaModel]:
    """The model grid the probes decide between."""
    fused = [
        MmaModel("fused", blk, fb, tr, out)
        for blk, fb, tr, out in itertools.product(blocks, range(22, 29), ("trunc", "floor", "nearest"), ("rz", "rn"))
    ]
    return fused + [MmaModel("sequential", out_rounding="rn"), MmaModel("sequential", out_rounding="rz"), MmaModel("pairwise")]


@dataclass(frozen=True)
class Problem:
    """One directed dot product: row `a` against b = ones, what it decides."""

    name: str
    decides: str
    a: tuple[float, ...]


def directed_problems(k: int = 64) -> list[Problem]:
    """The directed rows (all values exact in bf16; products with b = 1 are the values)."""

    def row(entries: dict[int, float]) -> tuple[float, ...]:
        out = [0.0] * k
        for pos, value in entries.items():
            out[pos] = value
        return tuple(out)

    problems = []
    for j in range(22, 30):  # one large product, then 15 small ones of 2^-j in the same 16-block
        problems.append(
            Problem(f"frac_bits_j{j}", "fraction bits kept below the largest exponent", row({0: 1.0} | {p: 2.0**-j for p in range(1, 16)}))
        )
    for j in range(24, 29):  # 15 terms of 3/4 of the last kept bit: truncated away or rounded up
        problems.append(
            Problem(
                f"term_round_j{j}",
                "rounding of the aligned terms (truncation vs nearest)",
                row({0: 1.0} | {p: 1.5 * 2.0**-j for p in range(1, 16)}),
            )
        )
    for p in range(1, k - 1):  # two half-ulp terms: carried if in one block, lost if split (RZ)
        problems.append(Problem(f"block_pair_{p}", "products summed before one rounding", row({0: 1.0, p: 2.0**-24, p + 1: 2.0**-24})))
    problems.append(
        Problem("round_up_0.75", "final rounding (nearest vs toward zero)", row({0: 1.0, 1: 2.0**-25, 2: 2.0**-25, 3: 2.0**-25}))
    )
    problems.append(
        Problem("round_down_0.75", "final rounding of a negative sum", row({0: -1.0, 1: -(2.0**-25), 2: -(2.0**-25), 3: -(2.0**-25)}))
    )
    problems.append(Problem("round_tie_odd", "ties (nearest even vs away)", row({0: 1.0, 1: 2.0**-23, 2: 2.0**-24})))
    for j in (26, 27):
        problems.append(Problem(f"neg_below_kept_j{j}", "term truncation toward zero vs floor", row({0: 1.0, 1: -(2.0**-j)})))
    problems.append(Problem("cancel_then_tiny", "alignment before cancellation", row({0: 1.0, 1: -1.0, 2: 2.0**-30})))
    problems.append(Problem("tiny_then_cancel", "alignment before cancellation (order)", row({0: 2.0**-30, 1: 1.0, 2: -1.0})))
    problems.append(Problem("carry_16_near_two", "carry bits: 16 products near 2", row({p: 2.0 - 2.0**-7 for p in range(16)})))
    return problems


def analyse(problems: Sequence[Problem], observed: torch.Tensor, models: Sequence[MmaModel]) -> dict:
    """Which models reproduce every observed f32 bit pattern; per problem, the matching models.

    `observed` [len(problems)] holds the device's f32 results (as float64)."""
    a = torch.tensor([p.a for p in problems], dtype=torch.float64)
    ones = torch.ones(a.shape[1], dtype=torch.float64)
    obs32 = observed.to(torch.float32).view(torch.int32)
    matches = {}
    for model in models:
        pred = simulate(a, ones, model).to(torch.float32).view(torch.int32)
        matches[model] = pred == obs32
    consistent = [m for m in models if bool(matches[m].all())]
    per_problem = []
    for i, p in enumerate(problems):
        ok = [m.label for m in models if bool(matches[m][i])]
        per_problem.append(
            {
                "problem": p.name,
                "decides": p.decides,
                "observed": float(observed[i]),
                "observed_minus_1_ulps": float((observed[i] - torch.sign(observed[i])) / 2.0**-23) if observed[i] != 0 else 0.0,
                "models_matching": len(ok),
            }
        )
    ranked = sorted(models, key=lambda m: -int(matches[m].sum()))
    return {
        "consistent": [m.label for m in consistent],
        "consistent_models": [asdict(m) for m in consistent],
        "best": [(m.label, int(matches[m].sum()), len(problems)) for m in ranked[:5]],
        "mmasim_hopper_matches": int(matches[HOPPER_MMASIM].sum()) if HOPPER_MMASIM in matches else None,
        "problems": per_problem,
    }


def random_validation(
    run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], models: Sequence[MmaModel], *, k: int, rows: int = 64, seed: int = 0
) -> dict:
    """Random bf16 rows with spread exponents against one random bf16 column: fraction of outputs
    each model reproduces bit for bit (MMA-Sim's randomized validation, in small)."""
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(rows, k, generator=gen) * torch.pow(2.0, torch.randint(-10, 10, (rows, k), generator=gen).float())).to(torch.bfloat16)
    b = (torch.randn(k, generator=gen) * torch.pow(2.0, torch.randint(-4, 4, (k,), generator=gen).float())).to(torch.bfloat16)
    observed = run(a, b)
    obs32 = observed.to(torch.float32).view(torch.int32)
    out = {}
    for model in models:
        pred = simulate(a.to(torch.float64), b.to(torch.float64), model).to(torch.float32).view(torch.int32)
        out[model.label] = float((pred == obs32).double().mean())
    return out


# ---------------------------------------------------------------------------------------- device runners


def _cublas_runner(device: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Rows of A [R, K] bf16 against column b [K] bf16 through torch.mm with f32 output (cuBLAS).
    The column is repeated into a 128-wide B and A padded to 128 rows so cuBLAS takes a tensor-core
    GEMM rather than a GEMV."""

    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        r = a.shape[0]
        rows = max(128, -(-r // 128) * 128)
        aa = torch.zeros(rows, a.shape[1], dtype=torch.bfloat16)
        aa[:r] = a
        bb = b.to(torch.bfloat16)[:, None].expand(-1, 128).contiguous()
        out = torch.mm(aa.to(device), bb.to(device), out_dtype=torch.float32)
        return out[:r].cpu().to(torch.float64)  # every column is the same dot: take column 0 below

    def first_column(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = run(a, b)
        return out[:, 0]

    return first_column


def _triton_runner(device: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The same dots through one Triton tl.dot over the whole K (a chain of wgmma on Hopper)."""
    import triton
    import triton.language as tl

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, out_ptr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        rm = pid * BM + tl.arange(0, BM)
        rn = tl.arange(0, BN)
        rk = tl.arange(0, K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        acc = tl.dot(a, b, acc)
        tl.store(out_ptr + rm[:, None] * BN + rn[None, :], acc)

    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        r, k = a.shape
        bm, bn = 64, 64
        rows = -(-r // bm) * bm
        aa = torch.zeros(rows, k, dtype=torch.bfloat16)
        aa[:r] = a
        bb = b.to(torch.bfloat16)[:, None].expand(-1, bn).contiguous()
        out = torch.empty(rows, bn, dtype=torch.float32, device=device)
        dot_kernel[(rows // bm,)](aa.to(device), bb.to(device), out, K=k, BM=bm, BN=bn, num_warps=4)
        return out[:r, 0].cpu().to(torch.float64)

    return run


def probe_backend(name: str, run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *, k: int = 64, log=print) -> dict:
    """Directed problems, analysis and a randomized validation of the consistent models for one runner."""
    problems = directed_problems(k)
    a = torch.tensor([p.a for p in problems], dtype=torch.float64).to(torch.bfloat16)
    t0 = time.perf_counter()
    observed = run(a, torch.ones(k, dtype=torch.bfloat16))
    models = candidate_models()
    result = analyse(problems, observed, models)
    log(
        f"[{name}] {len(problems)} directed dots in {time.perf_counter() - t0:.1f}s; "
        f"{len(result['consistent'])} of {len(models)} models consistent"
    )
    for label in result["consistent"][:12]:
        log(f"[{name}]   consistent: {label}")
    for label, hit, total in result["best"][:3]:
        log(f"[{name}]   best: {label} ({hit}/{total})")
    log(f"[{name}]   MMA-Sim Hopper model: {result['mmasim_hopper_matches']}/{len(problems)} directed problems")
    by_label = {m.label: m for m in models}
    survivors = [by_label[label] for label in result["consistent"][:8]] or [by_label[label] for label, _, _ in result["best"][:3]]
    if HOPPER_MMASIM not in survivors:
        survivors.append(HOPPER_MMASIM)
    validation = {}
    for kk in (16, 64, 256):
        validation[kk] = random_validation(run, survivors, k=kk)
        for label, frac in validation[kk].items():
            log(f"[{name}]   random K={kk}: {label}: {frac:.4f} bit-exact")
    result["random_validation"] = validation
    result["observed_hex"] = [f"{int(v):08x}" for v in observed.to(torch.float32).view(torch.int32).tolist()]
    result["problem_names"] = [p.name for p in problems]
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.tools.probe.mma", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", default=None, help="write the analysis here")
    parser.add_argument("--k", type=int, default=64)
    args = parser.parse_args(argv)
    report: dict = {"device": args.device}
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name(args.device) if torch.cuda.is_available() else "none"
    runners: list[tuple[str, Callable[[], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]]] = [
        ("cublas", lambda: _cublas_runner(args.device)),
        ("triton", lambda: _triton_runner(args.device)),
    ]
    for name, make in runners:
        try:
            report[name] = probe_backend(name, make(), k=args.k)
        except Exception as exc:  # report and go on with the next runner
            first = (str(exc).splitlines() or [""])[0][:300]
            print(f"[{name}] unavailable: {type(exc).__name__}: {first}", file=sys.stderr)
            report[name] = {"error": f"{type(exc).__name__}: {first}"}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
