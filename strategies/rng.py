"""Counter-based random numbers that are bit-identical on every device and torch version.

Each value is a pure function of (seed, stream name, element id): splitmix64 on int64 with
wrapping multiplication and logical shifts, and floats formed with exact arithmetic only
(sums of dyadic rationals, correctly rounded division and square root), so a recipe builds the
same tensors on a laptop CPU and on a GPU.
"""

from __future__ import annotations

import hashlib

import torch

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def stream_key(seed: int, stream: str) -> int:
    """A 63-bit key for (seed, stream name), independent of Python's hash randomisation."""
    digest = hashlib.blake2b(f"{seed}:{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 62) - 1)


def hash64(seed: int, stream: str, ids: torch.Tensor) -> torch.Tensor:
    """splitmix64 of (stream key + id) for int64 ids; int64 bit patterns, same on every device.
    (In-place integer steps: two tensors of ids' size allocated, not one per step.)"""
    z = ids.to(torch.int64) * _GOLDEN
    z += stream_key(seed, stream)
    shifted = torch.empty_like(z)
    for bits, mix in ((30, _MIX1), (27, _MIX2), (31, None)):
        torch.bitwise_right_shift(z, bits, out=shifted)
        shifted &= (1 << (64 - bits)) - 1  # the logical shift (see _shr)
        z ^= shifted
        if mix is not None:
            z *= mix
    return z


def uniform(seed: int, stream: str, ids: torch.Tensor) -> torch.Tensor:
    """f64 uniforms in [0, 1) with 53 random bits."""
    return _shr(hash64(seed, stream, ids), 11).to(torch.float64) * 2.0**-53


def integers(seed: int, stream: str, ids: torch.Tensor, high: int | torch.Tensor) -> torch.Tensor:
    """int64 in [0, high) (high <= 2^40 keeps the modulo bias below 2^-23)."""
    return _shr(hash64(seed, stream, ids), 24) % high


def normal_like(seed: int, stream: str, ids: torch.Tensor) -> torch.Tensor:
    """f64 bell-shaped values, mean 0, variance 1, support [-3, 3]: Irwin-Hall of three 21-bit
    uniforms from one hash (exact arithmetic, hence identical everywhere: the three parts are
    summed as integers below 2^23, which float64 holds exactly)."""
    h = hash64(seed, stream, ids)
    low21 = (1 << 21) - 1
    total = torch.bitwise_right_shift(h, 43).bitwise_and_(low21)
    part = torch.bitwise_right_shift(h, 22).bitwise_and_(low21)
    total += part
    total += torch.bitwise_right_shift(h, 1, out=part).bitwise_and_(low21)
    x = total.to(torch.float64)
    x *= 2.0**-20
    x -= 3.0
    return x
