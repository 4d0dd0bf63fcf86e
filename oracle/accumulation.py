"""Accumulation models: how a kernel sums a list of terms, and the rounding budget that implies.

An `Accumulation` declares one sum of a kernel (the q.K dot, a tile's P'V sum, the l sum) as data:
the accumulator's format, the order in which terms are combined, the rounding of each combination,
and (for matrix instructions) how many terms one instruction takes. `roundings` turns that into an
*equivalent rounding count* k: for terms t_j (exact products, or products rounded
`product_roundings` times), the computed sum s_hat satisfies

    |s_hat - sum_j t_j| <= gamma_k(u) * sum_j |t_j|,        u = 2^-p of `format` (f32: 2^-24),

with gamma_k(u) = k u / (1 - k u). TOLERANCES.md section 1 derives each order's count; in short,
with m nonzero terms (zero terms add exactly in every order and rounding mode), I chained
instructions of at most T terms each, r = 1 (round to nearest) or 2 (round toward zero):

- "sequential": each nonzero addition rounds once:                       k = r m
- "tree":       a term meets ceil(log2(T + 1)) rounded adders per
                instruction (the accumulator counted as a term):         k = r min(I, m) ceil(log2(T + 1))
- "fused":      an instruction aligns its (at most T + 1) terms to the
                largest exponent with G guard bits, truncating: each
                nonzero term loses < 2^(1 - G) u of the largest term; one
                rounding of the exact aligned sum follows:               k = (m + min(I, m)) 2^(1 - G) + r min(I, m)
- "unknown":    the largest of sequential and fused with 0 guard bits, both rounding toward zero
                (the conservative model for undocumented MMA hardware: docs/explanation/design.md section 3).

Units: counts are plain numbers of roundings (dimensionless), u is a unit roundoff (2^-p).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Format = Literal["f32", "f64", "f16", "bf16"]
Order = Literal["sequential", "tree", "fused", "unknown"]
Rounding = Literal["nearest", "toward_zero"]

FORMATS: tuple[str, ...] = ("f32", "f64", "f16", "bf16")
ORDERS: tuple[str, ...] = ("sequential", "tree", "fused", "unknown")
ROUNDINGS: tuple[str, ...] = ("nearest", "toward_zero")

#: significand bits p (hidden bit included) of each format; unit roundoff u = 2^-p
SIGNIFICAND_BITS: dict[str, int] = {"f64": 53, "f32": 24, "f16": 11, "bf16": 8}
#: largest finite value of each format
FORMAT_MAX: dict[str, float] = {
    "f64": 1.7976931348623157e308,
    "f32": 3.4028234663852886e38,
    "f16": 65504.0,
    "bf16": 3.3895313892515355e38,
}


def unit_roundoff(fmt: str) -> float:
    """u = 2^-p of a format (f32: 2^-24, f64: 2^-53, f16: 2^-11, bf16: 2^-8)."""
    return 2.0 ** -SIGNIFICAND_BITS[fmt]


def rounding_factor(rounding: str) -> int:
    """r: one rounding to nearest errs by <= u relative, toward zero by < 2u."""
    return 1 if rounding == "nearest" else 2


@dataclass(frozen=True)
class Accumulation:
    """One sum of a kernel, declared.

    format: the accumulator's format ("f32", "f64", ...): its unit roundoff is `u`.
    order: "sequential" | "tree" | "fused" | "unknown" (see the module docstring).
    rounding: "nearest" | "toward_zero": how each combination (or, for "fused", the final
        normalisation) rounds. Ignored by "unknown", which assumes toward zero.
    guard_bits: G, bits kept below the accumulator's precision when a fused adder aligns its terms
        ("fused" only).
    terms_per_instruction: T, the most terms one instruction adds (matrix instructions: the
        reduction dimension of one MFMA / MMA; 1 for scalar code).
    product_roundings: roundings each term went through before the sum (0 when the products are
        exact, e.g. fp8 x fp8 or bf16 x bf16 into f32; 1 for an f32 product of f32 operands).
    """

    format: Format = "f32"
    order: Order = "unknown"
    rounding: Rounding = "toward_zero"
    guard_bits: int = 0
    terms_per_instruction: int = 1
    product_roundings: int = 0

    @property
    def u(self) -> float:
        """Unit roundoff of the accumulator (2^-p)."""
        return unit_roundoff(self.format)

    def roundings(self, nonzero: torch.Tensor | float, instructions: torch.Tensor | float) -> torch.Tensor:
        """Equivalent rounding count k (f64 tensor, broadcast) of a sum of `nonzero` nonzero terms
        spread over `instructions` chained instructions; `product_roundings` not included."""
        m = torch.as_tensor(nonzero, dtype=torch.float64)
        r = rounding_factor(self.rounding)
        if self.order == "sequential":  # the only order that does not count instructions
            return r * m
        n_instr = torch.minimum(torch.as_tensor(instructions, dtype=torch.float64), m)
        if self.order == "unknown":
            # sequential and fused (no guard bits), both toward zero (r = 2), on the same m and n_instr
            return torch.maximum(2 * m, _fused(m, n_instr, 0, 2))
        if self.order == "tree":
            return r * n_instr * math.ceil(math.log2(self.terms_per_instruction + 1))
        return _fused(m, n_instr, self.guard_bits, r)

    def per_instruction(self) -> float:
        """Equivalent rounding count of one full instruction (T nonzero terms): a scale for docs."""
        return float(self.roundings(float(self.terms_per_instruction), 1.0))


def _fused(m: torch.Tensor, n_instr: torch.Tensor, guard_bits: int, r: int) -> torch.Tensor:
    """The "fused" order's count (m + I) 2^(1 - G) + r I (module docstring)."""
    return (m + n_instr) * 2.0 ** (1 - guard_bits) + r * n_instr


_SCALARS: dict[tuple[str, torch.device], torch.Tensor] = {}


def f64_scalar(value: float, device: torch.device) -> torch.Tensor:
    """0-dim f64 tensor holding `value` (-0.0 and 0.0 apart) on `device`, cached (read only): a
    constant operand of torch.where without building it (scalar_tensor, full_like) per call."""
    key = (float(value).hex(), device)
    scalar = _SCALARS.get(key)
    if scalar is None:
        scalar = _SCALARS[key] = torch.tensor(value, dtype=torch.float64, device=device)
    return scalar


_COLUMNS: dict[tuple[tuple[str, ...], int, torch.device], torch.Tensor] = {}


def gammas(ks: Sequence[torch.Tensor], us: Sequence[float]) -> torch.Tensor:
    """[N, *shape]: gamma(ks[i], us[i]) for each i, stacked on a new leading axis (`ks`: N tensors
    of one shape); each entry the bits gamma() gives it alone (the same elementwise arithmetic,
    in one pass: 6 launched ops for N counts, against 5 or 6 each). The column of u's is cached
    per device (read only)."""
    k = torch.stack([k.to(torch.float64) for k in ks])
    key = (tuple(float(u).hex() for u in us), k.dim(), k.device)
    column = _COLUMNS.get(key)
    if column is None:
        column = _COLUMNS[key] = torch.tensor([float(u) for u in us], dtype=torch.float64, device=k.device).view(-1, *(1,) * (k.dim() - 1))
    ku = k * column
    return torch.where(ku < 1, ku / (1 - ku), f64_scalar(float("inf"), ku.device))


def gamma(k: torch.Tensor | float, u: float) -> torch.Tensor | float:
    """Higham's gamma_k = k u / (1 - k u) (k roundings of unit roundoff u); inf when k u >= 1 (or NaN)."""
    if isinstance(k, torch.Tensor):
        ku = k.to(torch.float64) * u
        return torch.where(ku < 1, ku / (1 - ku), f64_scalar(float("inf"), ku.device))
    ku = k * u
    return ku / (1 - ku) if ku < 1 else float("inf")
