"""Bit-exact number-format conversions done with integer operations on the bits.

Library casts to float8 differ between releases (torch 2.11 turns an e4m3fn overflow into NaN,
torch 2.13 saturates; torch and ml_dtypes disagree on E8M0 casts of 0 and negatives), so every
conversion the suite relies on is written here with integer arithmetic on the IEEE bit patterns.
All functions take and return torch tensors and run on any device.

Formats:
- e4m3fn (OCP FP8 E4M3): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity; the codes
  S.1111.111 (0x7F, 0xFF) are NaN; largest finite 448 (0x7E); smallest subnormal 2^-9.
- E8M0 (OCP MX scale): 8 exponent bits, no sign, no mantissa; byte b means 2^(b - 127);
  0xFF is NaN; smallest 2^-127, largest 2^127.
- bf16 / f16 / f32: IEEE 754 (bf16 is the top half of f32).
"""

from __future__ import annotations

from typing import Literal

import torch

E4M3_MAX = 448.0
E4M3_NAN_CODE = 0x7F
E4M3_MAX_CODE = 0x7E
E8M0_NAN = 0xFF
E8M0_BIAS = 127

_F32_EXP_MASK = 0x7F800000
_F32_ABS_MASK = 0x7FFFFFFF


def _f32_bits(x: torch.Tensor) -> torch.Tensor:
    """IEEE bits of an f32 tensor as int64 in [0, 2^32)."""
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    return x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k (f64, same device and shape) for integer k in [-1074, 1023], built from its bits, so
    exact on every device (CUDA's double `torch.pow(2.0, k)` is off by one ulp for some k)."""
    k = k.to(torch.int64)
    normal = ((k.clamp(-1022, 1023) + 1023) << 52).view(torch.float64)
    subnormal = (torch.ones_like(k) << (k.clamp(-1074, -1023) + 1074)).view(torch.float64)
    return torch.where(k >= -1022, normal, subnormal)


def e4m3_values() -> torch.Tensor:
    """Float64 value of each of the 256 e4m3fn codes (NaN for 0x7F and 0xFF), on the CPU."""
    codes = torch.arange(256, dtype=torch.int64, device="cpu")
    sign = torch.where(codes >= 128, -1.0, 1.0).to(torch.float64)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 7).to(torch.float64)
    subnormal = mantissa * 2.0**-9
    normal = (8.0 + mantissa) * pow2(exponent - 10)
    magnitude = torch.where(exponent == 0, subnormal, normal)
    values = sign * magnitude
    values[(codes & 0x7F) == E4M3_NAN_CODE] = float("nan")
    return values


_E4M3_TABLES: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def e4m3_table(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Cached value table of the 256 e4m3fn codes on `device` in `dtype` (exact in f16/f32/f64)."""
    key = (torch.device(device), dtype)
    table = _E4M3_TABLES.get(key)
    if table is None:
        table = e4m3_values().to(dtype=dtype, device=key[0])
        _E4M3_TABLES[key] = table
    return table


def decode_e4m3(codes: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Exact value of each e4m3fn code (uint8 tensor) in `dtype` (f16, f32 or f64)."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"e4m3 codes must be uint8, got {codes.dtype}")
    table = e4m3_table(codes.device, dtype)
    return table[codes.to(torch.int64)]


def encode_e4m3(x: torch.Tensor, *, saturate: bool) -> torch.Tensor:
    """Round f32 values to e4m3fn codes (uint8), round to nearest even.

    Finite values whose rounded magnitude exceeds 448 (that is |x| > 464, since 464 ties to 448)
    become 448 with the sign when `saturate`, else NaN (0x7F with the sign). Infinities follow the
    same rule as overflow. NaN inputs give 0x7F with the input's sign bit. Values below half the
    smallest subnormal (2^-10) round to signed zero.

    Normal results keep the top 3 mantissa bits of the f32 pattern with a round-to-nearest-even
    carry into the exponent field; results below 2^-6 are the subnormal count |x| * 2^9 rounded
    half to even (exact: the scaling is by a power of two and |x| * 2^9 < 8).
    """
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    sign = torch.where(bits < 0, 0x80, 0).to(torch.int32)
    magnitude = bits & _F32_ABS_MASK
    # f32 pattern >> 20 is (exponent << 3) | top 3 mantissa bits; rebias 127 -> 7.
    truncated = (magnitude >> 20) - (120 << 3)
    remainder = magnitude & 0xFFFFF
    round_up = (remainder > 0x80000) | ((remainder == 0x80000) & ((truncated & 1) == 1))
    normal = truncated + round_up.to(torch.int32)
    subnormal = torch.round(x.abs() * 512.0).to(torch.int32)
    body = torch.where(magnitude >= (121 << 23), normal, subnormal)
    is_nan = magnitude > _F32_EXP_MASK
    overflow = (body > E4M3_MAX_CODE) & ~is_nan
    body = torch.where(overflow, E4M3_MAX_CODE if saturate else E4M3_NAN_CODE, body)
    body = torch.where(is_nan, E4M3_NAN_CODE, body)
    return (sign | body).to(torch.uint8)


def encode_e4m3_finite_saturating(x: torch.Tensor) -> torch.Tensor:
    """encode_e4m3(x, saturate=True) for f32 x known to be finite (NaN and infinities give
    unspecified codes), in 2 device ops instead of about 30: x clamped to [-448, 448] (the
    saturation: rounding is monotone, so clamping first gives the code rounding then saturating
    gives), then torch's float8_e4m3fn cast, whose round to nearest even, subnormals and signed
    zeros are the codec's inside that range (torch releases differ only beyond 448:
    kernel.emulated.gfx950.e4m3_codes). Held to encode_e4m3 bit for bit (tests/kernel/test_fp8.py;
    checked once over every finite f32 pattern)."""
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """The f64 value of decode_e4m3(encode_e4m3(x, saturate=False)) for f32 values x, computed on
    the value instead of the code (a dozen elementwise operations instead of three dozen):
    round to nearest even at the e4m3 spacing of x's binade, 2^(max(e, -6) - 3) for |x| in
    [2^e, 2^(e+1)) (subnormals below 2^-6 at 2^-9), the spacing's bits built directly; results
    beyond 448 (|x| > 464, infinities) and NaN inputs are NaN, as the codes 0x7F / 0xFF decode.
    Signed zeros keep their sign. Tested against the codec (tests/kernel/test_fp8.py)."""
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    v = x.to(torch.float64)
    _, exponent = torch.frexp(v)  # v = m 2^exponent, m in [0.5, 1): the binade e is exponent - 1
    # 2^(max(exponent, -5) - 4) from its bits; the upper clamp only keeps a non-finite v's
    # unspecified exponent in range (finite f32 values have exponent <= 128)
    spacing = ((exponent.clamp(-5, 200).to(torch.int64) + (1023 - 4)) << 52).view(torch.float64)
    rounded = torch.round(v / spacing) * spacing
    return torch.where(rounded.abs() <= E4M3_MAX, rounded, float("nan"))


def f32_exponent_field(x: torch.Tensor) -> torch.Tensor:
    """Biased exponent field (bits 23..30) of each f32 value, int64 in [0, 255]; sign ignored."""
    return (_f32_bits(x) >> 23) & 0xFF


def e8m0_values(codes: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Value 2^(b - 127) of E8M0 bytes (any integer dtype holding 0..255); 255 -> NaN."""
    as_int = codes.to(torch.int64)
    if bool(((as_int < 0) | (as_int > 255)).any()):
        raise ValueError("E8M0 bytes must lie in [0, 255]")
    values = pow2(as_int - E8M0_BIAS)
    values = torch.where(as_int == E8M0_NAN, torch.full_like(values, float("nan")), values)
    return values.to(dtype)


def encode_e8m0(x: torch.Tensor, *, rounding: Literal["floor", "ceil", "nearest"]) -> torch.Tensor:
    """E8M0 byte (int64 0..255) of positive f32 values.

    rounding: "floor" keeps the exponent field (what a scaled MFMA does with an f32 scale: the
    mantissa is dropped); "ceil" rounds up to the next power of two; "nearest" rounds to the
    nearer power of two in value, ties (1.5 * 2^e) going up, over the whole f32 range. On normal
    values that is the exponent field plus the top mantissa bit, bit for bit what torch and
    ml_dtypes casts do. On f32 subnormals the libraries differ: ml_dtypes >= 0.7 rounds in value
    as this function does; torch (2.13) and ml_dtypes <= 0.6 add the top mantissa bit of the field
    as for normals, sending every subnormal above 2^-127 to 2^-126.
    Positive values below 2^-127 saturate to byte 0 (2^-127), as both libraries do. Zero,
    negative values, NaN, infinity and results above 2^127 give 0xFF (NaN): E8M0 has no zero, no
    sign and no infinity (torch maps 0 to byte 0 and ignores the sign; ml_dtypes gives NaN).
    """
    bits = _f32_bits(x)
    negative = (bits >> 31) == 1
    magnitude_bits = bits & _F32_ABS_MASK
    exponent = magnitude_bits >> 23
    mantissa = magnitude_bits & 0x7FFFFF
    if rounding == "floor":
        normal = exponent
        subnormal = torch.zeros_like(exponent)
    elif rounding == "ceil":
        normal = exponent + (mantissa != 0).to(torch.int64)
        subnormal = (mantissa > 0x400000).to(torch.int64)
    elif rounding == "nearest":
        normal = exponent + (mantissa >= 0x400000).to(torch.int64)
        # a subnormal is mantissa * 2^-149: 2^-127 is 0x400000, the midpoint to 2^-126 is 0x600000
        subnormal = (mantissa >= 0x600000).to(torch.int64)
    else:
        raise ValueError(f"unknown E8M0 rounding {rounding!r}")
    result = torch.where(exponent == 0, subnormal, normal)
    invalid = negative | (magnitude_bits == 0) | (exponent == 0xFF) | (result > 254)
    return torch.where(invalid, torch.full_like(result, E8M0_NAN), result)


def round_f32_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """f32 -> bf16 with round to nearest even, via the bits; NaN stays NaN (quiet), with its sign
    and top payload bits. Integer arithmetic only (no float conversion whose subnormal handling
    could depend on the machine): the pattern plus 0x7FFF plus the kept half's lowest bit, low
    half dropped, is the rounded pattern (a carry out of the mantissa raises the exponent, from
    the largest finite values to infinity, as the rounding does; finite patterns never reach the
    sign bit)."""
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    biased = torch.bitwise_right_shift(bits, 16).bitwise_and_(1).add_(0x7FFF).add_(bits)
    is_nan = (bits & _F32_ABS_MASK) > _F32_EXP_MASK
    rounded = torch.where(is_nan, bits | 0x400000, biased)
    return rounded.bitwise_right_shift_(16).to(torch.int16).view(torch.bfloat16)


def round_f32_to_bf16_no_nan(x: torch.Tensor) -> torch.Tensor:
    """round_f32_to_bf16(x) for f32 x known to hold no NaN (a NaN gives an unspecified pattern), in
    6 device ops instead of 10: without NaN the rounded pattern is the biased pattern itself
    (infinities stay infinities: their low half is zero). Held to round_f32_to_bf16 bit for bit
    (tests/kernel/test_fp8.py)."""
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    biased = torch.bitwise_right_shift(bits, 16).bitwise_and_(1).add_(0x7FFF).add_(bits)
    return biased.bitwise_right_shift_(16).to(torch.int16).view(torch.bfloat16)


def pow2_ceil_f32(x: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= x for positive normal f32 x (x itself when already a power of two;
    infinity above 2^127). ValueError when any value is not positive, normal and finite (one
    device read: pow2_ceil_positive_normal skips it where the caller's values are known)."""
    bits = _f32_bits(x)
    exponent = (bits >> 23) & 0xFF
    if bool((((bits >> 31) == 1) | (exponent == 0) | (exponent == 0xFF)).any()):
        raise ValueError("pow2_ceil_f32 needs positive normal finite f32 values")
    return pow2_ceil_positive_normal(x)


def pow2_ceil_positive_normal(x: torch.Tensor) -> torch.Tensor:
    """pow2_ceil_f32 without the check, for f32 x known to be positive, normal and finite (other
    values give unspecified results): the pattern plus 0x7FFFFF carries into the exponent exactly
    when the mantissa is not zero, and the mantissa is then cleared (two integer ops)."""
    if x.dtype != torch.float32:
        raise TypeError(f"expected a float32 tensor, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x7FFFFF) & -(1 << 23)).view(torch.float32)
