"""How a profile represents Q inside QK, computed exactly from Q alone (float64).

`fp8_hi_lo` (gfx950): per (row, head, 128-dim latent block) with amax = max |q| over the block,
e = the f32 biased exponent of amax (0 for zero or subnormal amax), the E8M0 byte
s = max(e - 7, 5) (so the lo part's byte s - 5 is never below 0), x = q * 2^(127 - s),
hi = e4m3(RNE(x)), lo = e4m3(RNE((x - hi) * 32)), q_hat = (hi + lo / 32) * 2^(s - 127).
The 64 rope dims stay bf16 (exact). Written independently of kernel.emulated; both use the
exhaustively tested codec in kernel.fp8 (the oracle its value rounding round_e4m3, held to the codec).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel.fp8 import round_e4m3
from kernel.record import LATENT_DIM, N_SCALE_BLOCKS, SCALE_BLOCK

LO_FACTOR = 32.0
LO_E8M0_OFFSET = 5
MIN_HI_E8M0 = LO_E8M0_OFFSET  # keeps s - 5 >= 0


@dataclass(frozen=True)
class QRepresentation:
    """q_hat: f64 [n_q, H, 576] the value QK sees; magnitude: f64 [n_q, H, 576] = |hi| + |lo|
    (scaled to q units, what the accumulation bound multiplies); e8m0: int64 [n_q, H, 4] hi bytes
    (latent blocks), or None when the representation has no per-block scale; terms: f64
    [n_q, H, 576] the number of nonzero products each dim contributes to q . K (hi and lo are
    separate products: 0, 1 or 2), what the accumulation bound counts as roundings."""

    q_hat: torch.Tensor
    magnitude: torch.Tensor
    e8m0: torch.Tensor | None
    terms: torch.Tensor | None = None


def pow2_from_field(field: torch.Tensor) -> torch.Tensor:
    """2^(field - 1023) (f64) for an int64 biased exponent `field` in [1, 2046] (a normal power of
    two), built from its bits in one integer op: the bits of oracle.binary.pow2(field - 1023)
    (outside that range the result is meaningless)."""
    return (field << 52).view(torch.float64)


def hi_e8m0(block_amax: torch.Tensor) -> torch.Tensor:
    """E8M0 byte s = max(exp_field(amax) - 7, 5) of f64 block amaxes (exact bf16 values): int64
    in [5, 247] (the field of a bf16 value, or of inf, is at most 254; a NaN amax gives 5), so
    2^(127 - s) and 2^(s - 127) are normal (pow2_from_field)."""
    _mantissa, exponent = torch.frexp(block_amax)  # amax = mantissa * 2^exponent, mantissa in [0.5, 1)
    field = (exponent.to(torch.int64) + 126) * (block_amax >= 2.0**-126)  # 0 below the normal range
    return torch.clamp_min(field - 7, MIN_HI_E8M0)


def fp8_hi_lo(q: torch.Tensor) -> QRepresentation:
    """The gfx950 hi + lo representation of a bf16 q [n_q, H, 576] (see module docstring); q may
    also be given widened to f64 (exact: the same result)."""
    q64 = q.to(torch.float64)
    lead = q64.shape[:-1]
    latent = q64[..., :LATENT_DIM].reshape(*lead, N_SCALE_BLOCKS, SCALE_BLOCK)
    s = hi_e8m0(latent.abs().amax(dim=-1))
    up = pow2_from_field((127 + 1023) - s).unsqueeze(-1)  # 2^(127 - s)
    x = latent * up
    hi = round_e4m3(x.to(torch.float32))
    lo = round_e4m3(((x - hi) * LO_FACTOR).to(torch.float32)) / LO_FACTOR
    latent_hat = ((hi + lo) / up).reshape(*lead, LATENT_DIM)
    latent_mag = ((hi.abs() + lo.abs()) / up).reshape(*lead, LATENT_DIM)
    latent_terms = ((hi != 0).to(torch.float64) + (lo != 0)).reshape(*lead, LATENT_DIM)  # 0, 1 or 2
    rope = q64[..., LATENT_DIM:]
    return QRepresentation(
        q_hat=torch.cat((latent_hat, rope), dim=-1),
        magnitude=torch.cat((latent_mag, rope.abs()), dim=-1),
        e8m0=s,
        terms=torch.cat((latent_terms, (rope != 0).to(torch.float64)), dim=-1),
    )


def exact(q: torch.Tensor) -> QRepresentation:
    """Q used as stored (bf16 widened exactly; q may be given widened, then q_hat is q itself)."""
    q64 = q.to(torch.float64)
    return QRepresentation(q_hat=q64, magnitude=q64.abs(), e8m0=None, terms=(q64 != 0).to(torch.float64))
