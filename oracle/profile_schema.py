"""The numerics profile: what a kernel's arithmetic may do, as data, for the a-priori error bound.

Each field names one step of the forward pass and the error it may add; TOLERANCES.md derives how
`oracle.bound` turns them into a per-element bound, and docs/how-to/write-a-profile.md shows how to write one.
Unit roundoffs are u = 2^-p for a p-bit significand (f32: 2^-24, f16: 2^-11, bf16: 2^-8).
Logarithms: scores are natural-log units; `p_shift` is a log base 2. A profile describes what a
kernel's arithmetic *may* do: where hardware is undocumented (MMA accumulation order and rounding)
it declares the conservative model (`Accumulation(order="unknown")`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from oracle.accumulation import Accumulation, unit_roundoff

QRepresentationName = Literal["exact", "fp8_hi_lo"]
PFormat = Literal["exact", "fp16_scaled", "bf16", "f32", "f64", "any16"]
PInL = Literal["no", "yes", "unknown"]
OutCast = Literal["direct", "via_f32", "toward_zero"]

Q_REPRESENTATIONS = ("exact", "fp8_hi_lo")
P_FORMATS = ("exact", "fp16_scaled", "bf16", "f32", "f64")
P_IN_L = ("no", "yes", "unknown")
OUT_CASTS = ("direct", "via_f32")
#: P in some 16-bit format, bf16's precision with f16's range (P' = f16 or bf16 of P or of P * scale_v,
#: scale_v <= 2^7): the P step of the coarsest rounding model (conformance.judging.triage,
#: TOLERANCES.md section 14), not declarable in a profile file
ANY16_P = "any16"
#: out converted to bf16 toward zero (truncation of the computed f32 or f64 value): the output step
#: of the coarsest rounding model, not declarable in a profile file
TOWARD_ZERO_CAST = "toward_zero"
SCORE_FORMATS = ("f32", "f64")
Subnormals = Literal["preserve", "flush", "unknown"]
SUBNORMALS = ("preserve", "flush", "unknown")
SplitRows = Literal["never", "above", "any", "unknown"]
SPLIT_ROWS = ("never", "above", "any", "unknown")
LSE_BASES = ("2", "e")
LSE_FORMATS = ("f32", "f64")
#: smallest positive normal f32 (and bf16): a flushed f32 or bf16 result errs by less than this
F32_MIN_NORMAL = 2.0**-126

#: (relative rounding u, absolute underflow floor in P units) of P before PV, per format and rounding:
#: nearest errs by half a unit (u = 2^-p, half the smallest subnormal), toward zero by a whole one.
_P_ROUNDING: dict[str, tuple[float, float]] = {
    "fp16_scaled": (2.0**-11, 2.0**-25),
    "bf16": (2.0**-8, 2.0**-134),
    "f32": (2.0**-24, 2.0**-150),
    "f64": (2.0**-53, 2.0**-1074),  # half the subnormal spacing is not an f64: take all of it
    "exact": (0.0, 0.0),
    # bf16's u with f16's floor in P' units (half the smallest f16 subnormal 2^-24): TOLERANCES.md section 14
    ANY16_P: (2.0**-8, 2.0**-25),
}


@dataclass(frozen=True)
class SplitModel:
    """How a kernel may split one query row's keys into partitions and merge the partial results.

    rows: "never" (one pass owns the row), "above" (only rows of more than `min_keys` keys may be
        split), "any" (any row, however short), "unknown" (treated as "any").
    min_keys: with "above", rows of at most this many keys (the row's length, padding included)
        are never split; ignored otherwise.
    max_partials: the most partitions one row is split into (None: any number, at most one per
        valid key).
    lse_base: the base of the partial log-sum-exps the merge works with ("2": log2 domain, as
        exp2 / log2 kernels do; "e").
    lse_format: the format the partial lse values and the merge arithmetic are held in: its unit
        roundoff u_c sets the merge's error term, which grows with |lse| (TOLERANCES.md section 13).
    exp_rel_err: relative error of each exp (exp2) of the merge; log_abs_err: absolute error of
        each log (log2) of the merge, in lse_base units.
    """

    rows: SplitRows = "unknown"
    min_keys: int = 0
    max_partials: int | None = None
    lse_base: Literal["2", "e"] = "2"
    lse_format: Literal["f32", "f64"] = "f32"
    exp_rel_err: float = 2.0**-20
    log_abs_err: float = 2.0**-20

    @property
    def may_split(self) -> bool:
        """Whether any row may be split at all."""
        return self.rows != "never"


@dataclass(frozen=True)
class NumericsProfile:
    """The declared numerics of a kernel (see docs/reference/profile-format.md for each field).

    q_representation: how Q enters QK: "exact" (as stored, bf16), "fp8_hi_lo" (gfx950 hi + lo,
        oracle.q_representation.fp8_hi_lo).
    score_format: format of the score and softmax arithmetic ("f32" or "f64"): the preconditions
        require softmax_scale * log2(e) and every partial sum of q . K to be finite in it.
    qk: accumulation of the q . K products (oracle.accumulation.Accumulation); qk_instructions:
        chained instructions per full 576-dim dot (gfx950: 8 scaled fp8 MFMA + 2 bf16 MFMA = 10).
    score_roundings: roundings between the accumulated score and the exp argument that scale with
        |x| (x = s * c_log2 with c_log2 itself rounded: 2), each of relative size `arith_u`.
    arith_u: unit roundoff of the kernel's scalar arithmetic (subtractions, products, 1/l;
        2^-23 where 1/l is an approximate division such as CUDA's __fdividef).
    exp_rel_err: relative error of each exp / exp2 evaluation.
    exp_floor: absolute error of exp / exp2 near underflow, in P units (2^-126 where subnormal
        results may be flushed).
    softmax_tile: keys per online-softmax tile (rescales of o and l happen between tiles); the
        smallest tile the kernel may use when it varies (1: any tiling); None: one pass.
    p_shift: log2 of the largest P in a tile (gfx950: P = exp2(x - m + 8) <= 2^8), 0 for P <= 1.
    p_format: rounding of P before the PV product: "exact", "fp16_scaled" (P' = fp16(P * scale_v),
        exact V codes), "bf16" (P rounded to bf16, V exact), "f32" (normalised P = e / l rounded
        to f32, as torch.softmax does; "f64" likewise; "any16": any 16-bit format, bf16's precision
        with f16's range, the coarsest rounding model's only); p_rounding: "nearest" or "toward_zero".
    p_rounded_in_l: whether l sums the rounded P ("no", "yes", or "unknown": bound both).
    pv: accumulation of one tile's P V products per output element (terms: the tile's keys);
        pv_rescale_roundings: roundings of o per tile for the rescale by alpha.
    l: accumulation of P into l within a tile, per partial accumulator; l_partials: independent
        partial sums a tile's keys are spread over (the seed: 4 waves x 4 lane groups = 16; 1: one
        accumulator); l_final_roundings: roundings that combine the partials at the end.
    out_casts: conversions to bf16 the output may take: "direct" (one round-to-nearest-even of the
        computed value, f32 -> bf16), "via_f32" (f64 -> f32 -> bf16, what torch and ml_dtypes do),
        "toward_zero" (truncation of the computed value or of its f32 rounding: the coarsest
        rounding model's only).
    lse_extra_u: relative error of the log evaluation and the lse arithmetic.
    scale_cap: largest KV scale the kernel's numerics hold to (None: no cap).
    needs_pow2_scales: whether KV scales must be powers of two for the bound to hold.
    score_limit: largest |softmax_scale * q . K| (natural units) for which the bound is promised.
    subnormals: what the kernel's f32 (and bf16) arithmetic does with subnormal results:
        "preserve" (IEEE gradual underflow), "flush" (every result below 2^-126 may become a
        signed zero: CUDA's --use_fast_math, an AMD wave in flush mode), "unknown" (bounded as
        "flush"). f16 P' (fp16_scaled) is bounded by its own floor (p_floor) either way.
    split: how a row may be split into partitions merged through their lse (SplitModel).
    """

    name: str
    description: str
    q_representation: QRepresentationName
    score_format: Literal["f32", "f64"]
    qk: Accumulation
    qk_instructions: int
    score_roundings: int
    arith_u: float
    exp_rel_err: float
    exp_floor: float
    softmax_tile: int | None
    p_shift: int
    p_format: PFormat
    p_rounding: Literal["nearest", "toward_zero"]
    p_rounded_in_l: PInL
    pv: Accumulation
    pv_rescale_roundings: int
    l: Accumulation
    l_partials: int
    l_final_roundings: int
    out_casts: tuple[OutCast, ...]
    lse_extra_u: float
    scale_cap: float | None
    needs_pow2_scales: bool
    score_limit: float
    subnormals: Subnormals = "unknown"
    split: SplitModel = field(default_factory=SplitModel)
    source: str = field(default="", compare=False)

    @property
    def p_u(self) -> float:
        """Relative rounding error of P before PV (nearest: 2^-p; toward zero: 2^(1-p))."""
        base = _P_ROUNDING[self.p_format][0]
        return base * (2 if self.p_rounding == "toward_zero" else 1)

    @property
    def p_floor(self) -> float:
        """Absolute error of P before PV at underflow, in P units (half or all of the smallest subnormal)."""
        base = _P_ROUNDING[self.p_format][1] * (2 if self.p_rounding == "toward_zero" else 1)
        if self.p_format in ("bf16", "f32"):
            # a P below 2^-126 in a flushing pipeline becomes 0 (bf16 shares f32's exponent range)
            return max(base, self.flush_floor)
        return base

    @property
    def exp_floor_effective(self) -> float:
        """Absolute error of exp / exp2 near underflow in P units, a flush of the result included."""
        return max(self.exp_floor, self.flush_floor)

    @property
    def flush_floor(self) -> float:
        """Absolute error a flushed f32 / bf16 result may carry: 2^-126 unless subnormals are
        preserved (then 0)."""
        return 0.0 if self.subnormals == "preserve" else F32_MIN_NORMAL

    @property
    def score_u(self) -> float:
        """Unit roundoff of the score format."""
        return unit_roundoff(self.score_format)
