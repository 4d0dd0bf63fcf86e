"""Numerics profiles: what a kernel's arithmetic does, as data, for the a-priori error bound.

Each field names one step of the forward pass and the error it may add; TOLERANCES.md derives how
`oracle.bound` turns them into a per-element bound. Unit roundoffs are u = 2^-p for a p-bit
significand (f32: 2^-24, f16: 2^-11, bf16: 2^-8). Where a hardware step's rounding is not
documented (MFMA / tensor-core accumulation), the profile takes the larger error of round-to-
nearest and round-toward-zero (2u).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

U32 = 2.0**-24
U64 = 2.0**-53


@dataclass(frozen=True)
class NumericsProfile:
    """The declared numerics of a kernel.

    q_representation: how Q enters QK: "exact" (as stored, bf16), "fp8_hi_lo" (gfx950 hi + lo,
        oracle.q_representation.fp8_hi_lo).
    qk_acc_u: unit roundoff of each addition in the QK accumulation.
    qk_roundings: most roundings any product of q . K goes through on its way into the score
        (TOLERANCES.md: MMA instructions sum their terms in a tree or fused adder, so a term sees
        at most ceil(log2(terms + 1)) roundings per instruction; with softmax_tile None the
        accumulation is sequential and this is the number of products).
    score_roundings: f32 roundings between the accumulated score and the exp argument that scale
        with |x| (x = s * c_log2 with c_log2 itself rounded: 2), each of relative size `arith_u`.
    arith_u: unit roundoff of the kernel's scalar f32 arithmetic (subtractions, products, 1/l;
        2^-23 where 1/l is an approximate division such as CUDA's __fdividef).
    exp_rel_err: relative error of each exp / exp2 evaluation.
    exp_floor: absolute error of exp / exp2 near underflow, in P units (2^-126 where subnormal
        results may be flushed).
    softmax_tile: keys per online-softmax tile (rescales of o and l happen between tiles).
    p_shift: log2 of the largest P in a tile (gfx950: P = exp2(x - m + 8) <= 2^8), 0 for P <= 1.
    p_format: rounding of P before the PV product: "exact", "fp16_scaled" (P' = fp16(P * scale_v),
        exact V codes), "bf16" (P rounded to bf16, V exact).
    p_rounded_in_l: whether l sums the rounded P ("no", "yes", or "unknown": bound both).
    p_u / p_floor: relative rounding of P and half its smallest subnormal, in P units (f16:
        2^-11 and 2^-25; bf16: 2^-8 and 2^-134).
    pv_acc_u / l_acc_u: unit roundoff of the PV and l accumulations.
    pv_roundings_per_tile / l_roundings_per_tile: most roundings a key's term sees per tile in o
        and in l (the rescale by alpha included); l_final_roundings: the final reduction of l.
        With softmax_tile None they are per key (sequential accumulation).
    out_format: "bf16" (the contract's output type).
    lse_extra_u: relative error of the log evaluation and the lse arithmetic.
    scale_cap: largest KV scale the kernel's numerics hold to (None: no cap).
    needs_pow2_scales: whether KV scales must be powers of two for the bound to hold.
    score_limit: largest |softmax_scale * q . K| (natural units) for which the bound is promised
        (gfx950 masks with -1e30 and clamps the running max at -1e20 in log2 units).
    """

    name: str
    description: str
    q_representation: Literal["exact", "fp8_hi_lo"]
    qk_acc_u: float
    qk_roundings: int
    score_roundings: int
    arith_u: float
    exp_rel_err: float
    exp_floor: float
    softmax_tile: int | None
    p_shift: int
    p_format: Literal["exact", "fp16_scaled", "bf16"]
    p_rounded_in_l: Literal["no", "yes", "unknown"]
    p_u: float
    p_floor: float
    pv_acc_u: float
    pv_roundings_per_tile: int
    l_acc_u: float
    l_roundings_per_tile: int
    l_final_roundings: int
    out_format: Literal["bf16"]
    lse_extra_u: float
    scale_cap: float | None
    needs_pow2_scales: bool
    score_limit: float


GFX950 = NumericsProfile(
    name="gfx950",
    description=(
        "FlyDSL gfx950 kernel: Q as fp8 hi + lo (E8M0 per head and 128 dims), scaled fp8 MFMA "
        "for QK with the record scale's exponent, bf16 rope MFMA, f32 online softmax over "
        "128-key tiles with P = exp2(x - m + 8), P' = fp16(P * scale_v), exact fp8 V, f32 PV "
        "and l, out = bf16(o * (1 / l)), lse in natural log"
    ),
    q_representation="fp8_hi_lo",
    qk_acc_u=2 * U32,
    qk_roundings=8 * 8 + 2 * 6,
    score_roundings=2,
    arith_u=U32,
    exp_rel_err=2.0**-23,
    exp_floor=2.0**-126,
    softmax_tile=128,
    p_shift=8,
    p_format="fp16_scaled",
    p_rounded_in_l="no",
    p_u=2.0**-11,
    p_floor=2.0**-25,
    pv_acc_u=2 * U32,
    pv_roundings_per_tile=4 * 6 + 1,
    l_acc_u=U32,
    l_roundings_per_tile=8 + 1,
    l_final_roundings=2 + 3,
    out_format="bf16",
    lse_extra_u=4 * U32,
    scale_cap=2.0**7,
    needs_pow2_scales=True,
    score_limit=1e18,
)

BF16_Q_BF16_P = NumericsProfile(
    name="bf16-q-bf16-p",
    description=(
        "Q kept in bf16, K dequantised exactly (pow2 scales), tensor-core f32 accumulation, "
        "online softmax with exp2 (ex2.approx), l summed from the f32 P, P rounded to bf16 for "
        "PV, f32 PV, split-KV partial results combined in f32, bf16 out (FlashMLA's Hopper "
        "sparse fp8 decode)"
    ),
    q_representation="exact",
    qk_acc_u=2 * U32,
    qk_roundings=36 * 5,
    score_roundings=2,
    arith_u=2 * U32,
    exp_rel_err=2.0**-21,
    exp_floor=2.0**-126,
    softmax_tile=64,
    p_shift=0,
    p_format="bf16",
    p_rounded_in_l="unknown",
    p_u=2.0**-8,
    p_floor=2.0**-134,
    pv_acc_u=2 * U32,
    pv_roundings_per_tile=4 * 5 + 1,
    l_acc_u=2 * U32,
    l_roundings_per_tile=64 + 1,
    l_final_roundings=8,
    out_format="bf16",
    lse_extra_u=2.0**-20,
    scale_cap=None,
    needs_pow2_scales=True,
    score_limit=1e30,
)

EXACT = NumericsProfile(
    name="exact",
    description="float64 throughout (a reference implementation); out rounded to bf16, lse to f32",
    q_representation="exact",
    qk_acc_u=U64,
    qk_roundings=576,
    score_roundings=0,
    arith_u=U64,
    exp_rel_err=4 * U64,
    exp_floor=2.0**-1074,
    softmax_tile=None,
    p_shift=0,
    p_format="exact",
    p_rounded_in_l="no",
    p_u=0.0,
    p_floor=0.0,
    pv_acc_u=U64,
    pv_roundings_per_tile=1,
    l_acc_u=U64,
    l_roundings_per_tile=1,
    l_final_roundings=1,
    out_format="bf16",
    lse_extra_u=U32,
    scale_cap=None,
    needs_pow2_scales=False,
    score_limit=1e300,
)

PROFILES: dict[str, NumericsProfile] = {p.name: p for p in (GFX950, BF16_Q_BF16_P, EXACT)}


def get_profile(name: str) -> NumericsProfile:
    """The profile called `name`; KeyError naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown numerics profile {name!r}; known: {', '.join(PROFILES)}") from None
