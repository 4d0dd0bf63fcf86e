"""Bit-level e4m3fn / E8M0 / bf16 conversions: exhaustive over codes, boundary values, and
cross-checks against torch and ml_dtypes where those libraries agree with each other."""

from __future__ import annotations

import math

import pytest
import torch

from kernel.fp8 import (
    decode_e4m3,
    e4m3_values,
    e8m0_values,
    encode_e4m3,
    encode_e4m3_finite_saturating,
    encode_e8m0,
    f32_exponent_field,
    pow2_ceil_f32,
    pow2_ceil_positive_normal,
    round_e4m3,
    round_f32_to_bf16,
)


def _f32(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _formula(code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 7
    if exponent == 0xF and mantissa == 7:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0**-9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def test_every_code_decodes_to_its_formula() -> None:
    values = e4m3_values()
    for code in range(256):
        expected = _formula(code)
        got = float(values[code])
        assert (math.isnan(expected) and math.isnan(got)) or got == expected, code


def test_every_finite_code_round_trips_in_both_modes() -> None:
    codes = torch.tensor([c for c in range(256) if (c & 0x7F) != 0x7F], dtype=torch.uint8)
    values = decode_e4m3(codes, torch.float32)
    for saturate in (False, True):
        again = encode_e4m3(values, saturate=saturate)
        # +0 and -0 are distinct codes and round-trip as such
        assert torch.equal(again, codes)


@pytest.mark.parametrize(
    ("value", "non_saturating", "saturating"),
    [
        (448.0, 0x7E, 0x7E),
        (464.0, 0x7E, 0x7E),  # the midpoint to 480 ties to even (448's mantissa 110)
        (464.00003, 0x7F, 0x7E),  # just above the midpoint overflows
        (465.0, 0x7F, 0x7E),
        (480.0, 0x7F, 0x7E),
        (1e30, 0x7F, 0x7E),
        (math.inf, 0x7F, 0x7E),
        (-448.0, 0xFE, 0xFE),
        (-465.0, 0xFF, 0xFE),
        (-math.inf, 0xFF, 0xFE),
        (2.0**-9, 0x01, 0x01),  # smallest subnormal
        (2.0**-10, 0x00, 0x00),  # half of it ties to even: zero
        (1.5 * 2.0**-10, 0x01, 0x01),
        (3 * 2.0**-10, 0x02, 0x02),  # 1.5 * 2^-9 ties to even: 2 * 2^-9
        (7.5 * 2.0**-9, 0x08, 0x08),  # rounds up into the smallest normal 2^-6
        (2.0**-6, 0x08, 0x08),
        (0.0, 0x00, 0x00),
        (-0.0, 0x80, 0x80),
        (1e-30, 0x00, 0x00),
        (240.0, 0x77, 0x77),
        (248.0, 0x78, 0x78),  # 248 ties between 240 and 256: to even (256)
        (1.0625, 0x38, 0x38),  # ties to even: 1.0
        (1.1875, 0x3A, 0x3A),  # ties to even: 1.25
    ],
)
def test_boundary_values(value: float, non_saturating: int, saturating: int) -> None:
    x = _f32(value)
    assert int(encode_e4m3(x, saturate=False)[0]) == non_saturating
    assert int(encode_e4m3(x, saturate=True)[0]) == saturating


def test_nan_input_keeps_its_sign() -> None:
    nan = torch.tensor([0x7FC00000, -0x00400000], dtype=torch.int32).view(torch.float32)
    assert encode_e4m3(nan, saturate=True).tolist() == [0x7F, 0xFF]


def test_every_midpoint_rounds_to_even_and_neighbours_to_nearest() -> None:
    codes = torch.arange(0, 0x7E, dtype=torch.int64)  # positive finite codes below the max
    low = e4m3_values()[codes]
    high = e4m3_values()[codes + 1]
    mid = ((low + high) / 2).to(torch.float32)
    assert torch.equal(mid.double(), (low + high) / 2)  # midpoints are exact in f32
    got = encode_e4m3(mid, saturate=False).to(torch.int64)
    even = torch.where(codes % 2 == 0, codes, codes + 1)
    assert torch.equal(got, even)
    above = torch.nextafter(mid, torch.tensor(math.inf))
    below = torch.nextafter(mid, torch.tensor(-math.inf))
    assert torch.equal(encode_e4m3(above, saturate=False).to(torch.int64), codes + 1)
    assert torch.equal(encode_e4m3(below, saturate=False).to(torch.int64), codes)


def test_agrees_with_torch_on_finite_range() -> None:
    """torch's cast changed only for overflow (NaN in 2.11, saturation in 2.13); within +-448 and
    for the subnormal range all releases round to nearest even like we do."""
    generator = torch.Generator().manual_seed(0)
    bits = torch.randint(0, 2**31 - 1, (200_000,), generator=generator, dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32)
    x = x[torch.isfinite(x) & (x.abs() <= 448)]
    x = torch.cat((x, -x, torch.linspace(-448, 448, 100_001, dtype=torch.float32)))
    expected = x.to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(encode_e4m3(x, saturate=False), expected)
    assert torch.equal(encode_e4m3(x, saturate=True), expected)


def test_agrees_with_ml_dtypes_everywhere() -> None:
    """ml_dtypes is non-saturating (overflow -> NaN), like gfx950's default conversion."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    generator = torch.Generator().manual_seed(1)
    bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=generator, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = torch.cat((x, _f32(448, 464, 464.00003, 465, 480, 1e30, math.inf, -math.inf, 0.0, -0.0)))
    ours = encode_e4m3(x, saturate=False).numpy()
    theirs = x.numpy().astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    nan_ours = (ours & 0x7F) == 0x7F
    nan_theirs = (theirs & 0x7F) == 0x7F
    assert (nan_ours == nan_theirs).all()
    assert (ours[~nan_ours] == theirs[~nan_theirs]).all()


def test_decode_refuses_non_uint8() -> None:
    with pytest.raises(TypeError, match="uint8"):
        decode_e4m3(torch.zeros(3, dtype=torch.int8))


def test_encode_refuses_non_f32() -> None:
    with pytest.raises(TypeError, match="float32"):
        encode_e4m3(torch.zeros(3, dtype=torch.float64), saturate=True)


def test_e8m0_values() -> None:
    got = e8m0_values(torch.tensor([0, 1, 126, 127, 128, 254, 255]))
    assert got[:6].tolist() == [2.0**-127, 2.0**-126, 0.5, 1.0, 2.0, 2.0**127]
    assert math.isnan(float(got[6]))
    with pytest.raises(ValueError, match="0, 255"):
        e8m0_values(torch.tensor([256]))


@pytest.mark.parametrize(
    ("value", "floor", "ceil", "nearest"),
    [
        (1.0, 127, 127, 127),
        (1.25, 127, 128, 127),
        (1.5, 127, 128, 128),  # ties go up
        (1.75, 127, 128, 128),
        (3.0, 128, 129, 129),
        (2.0**-127, 0, 0, 0),
        (2.0**-130, 0, 0, 0),  # below the range saturates to the smallest byte
        (1.5 * 2.0**-127, 0, 1, 1),  # a subnormal tie goes up
        (1.25 * 2.0**-127, 0, 1, 0),  # a subnormal rounds in value, not by its field's top bit
        (2.0**127, 254, 254, 254),
        (1.7e38, 253, 254, 254),
        (3.0e38, 254, 255, 255),  # 2^128 is out of range -> NaN
        (0.0, 255, 255, 255),
        (-1.0, 255, 255, 255),
        (math.inf, 255, 255, 255),
        (math.nan, 255, 255, 255),
    ],
)
def test_e8m0_rounding_modes(value: float, floor: int, ceil: int, nearest: int) -> None:
    x = _f32(value)
    assert int(encode_e8m0(x, rounding="floor")[0]) == floor
    assert int(encode_e8m0(x, rounding="ceil")[0]) == ceil
    assert int(encode_e8m0(x, rounding="nearest")[0]) == nearest


def _e8m0_nearest_in_value(x: torch.Tensor) -> torch.Tensor:
    """Independent reference: the nearer of the two bracketing powers of two, in float64."""
    mantissa, exponent = torch.frexp(x.double())  # x = mantissa * 2^exponent, mantissa in [0.5, 1)
    lower = exponent.to(torch.int64) - 1  # x in [2^lower, 2^(lower + 1))
    power = lower + (mantissa >= 0.75).to(torch.int64)
    byte = power.clamp(min=-127) + 127
    return torch.where(byte > 254, torch.full_like(byte, 255), byte)


def _positive_f32_bits(count: int, seed: int, high: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    bits = torch.randint(1, high, (count,), generator=generator, dtype=torch.int64).to(torch.int32)
    return bits.view(torch.float32)


def test_e8m0_nearest_is_nearest_in_value_over_the_whole_range() -> None:
    x = torch.cat([_positive_f32_bits(100_000, 2, 0x7F800000), _positive_f32_bits(20_000, 4, 0x800000)])
    assert torch.equal(encode_e8m0(x, rounding="nearest"), _e8m0_nearest_in_value(x))


def test_e8m0_nearest_agrees_with_torch_and_ml_dtypes_on_positive_normal_values() -> None:
    """Both libraries round E8M0 to nearest with ties up on positive normal values; they
    disagree on 0 and negatives (torch: byte 0 and the sign ignored; ml_dtypes: NaN), where we
    refuse, and on f32 subnormals, where the answer depends on the library and its release."""
    x = _positive_f32_bits(100_000, 2, 0x7F000000)
    x = x[x >= 2.0**-126]
    ours = encode_e8m0(x, rounding="nearest")
    torch_bytes = x.to(torch.float8_e8m0fnu).view(torch.uint8).to(torch.int64)
    assert torch.equal(ours, torch_bytes)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    ml_bytes = x.numpy().astype(ml_dtypes.float8_e8m0fnu).view(np.uint8).astype(np.int64)
    assert (ours.numpy() == ml_bytes).all()


def test_e8m0_library_disagreement_is_real() -> None:
    """The fact that motivates doing E8M0 with integer code: torch and ml_dtypes differ on 0."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    zero = _f32(0.0)
    torch_byte = int(zero.to(torch.float8_e8m0fnu).view(torch.uint8)[0])
    ml_byte = int(zero.numpy().astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)[0])
    assert torch_byte != ml_byte
    assert int(encode_e8m0(zero, rounding="nearest")[0]) == 255


def test_exponent_field() -> None:
    assert f32_exponent_field(_f32(1.0, -2.0, 0.0, 3.0 * 2.0**-140, math.inf)).tolist() == [127, 128, 0, 0, 255]


def test_bf16_rounding_matches_torch_bit_for_bit() -> None:
    generator = torch.Generator().manual_seed(3)
    bits = torch.randint(-(2**31), 2**31 - 1, (300_000,), generator=generator, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    ours = round_f32_to_bf16(x)
    theirs = x.to(torch.bfloat16)
    finite = torch.isfinite(theirs.float())
    assert torch.equal(ours.view(torch.int16)[finite], theirs.view(torch.int16)[finite])
    assert torch.equal(torch.isnan(ours.float()), torch.isnan(theirs.float()))


def test_bf16_rounding_keeps_a_nan_quiet_with_its_sign_and_top_payload() -> None:
    bits = torch.tensor([0x7F800001, -0x3F000000 + 0x12345, 0x7FC00000, -0x00400001], dtype=torch.int64)  # sNaN, -qNaN, qNaN, -NaN
    got = round_f32_to_bf16(bits.to(torch.int32).view(torch.float32)).view(torch.int16).to(torch.int64) & 0xFFFF
    assert got.tolist() == [0x7FC0, 0xC101, 0x7FC0, 0xFFFF]


def _patterns_at_rounding_edges(low_bits: int, seed: int) -> torch.Tensor:
    """f32 values: every (sign, exponent, top 31 - low_bits mantissa bits) with the `low_bits`
    bits below them at the rounding's edges (0, 1, just below / at / above half, all ones) and 24
    random patterns each."""
    top = torch.arange(1 << (32 - low_bits), dtype=torch.int64) << low_bits
    half = 1 << (low_bits - 1)
    edges = torch.tensor([0, 1, half - 1, half, half + 1, 2 * half - 2, 2 * half - 1], dtype=torch.int64)
    gen = torch.Generator().manual_seed(seed)
    low = torch.cat((edges.expand(top.numel(), -1), torch.randint(0, 1 << low_bits, (top.numel(), 24), generator=gen)), dim=1)
    bits = (top.unsqueeze(1) | low).flatten()
    return torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32).view(torch.float32)


def test_finite_saturating_encoder_is_the_codec_on_finite_values() -> None:
    """encode_e4m3_finite_saturating is encode_e4m3(saturate=True) bit for bit on every finite
    f32 (sign, exponent, top 3 mantissa bits) at the rounding's edges and at random, on zeros, on
    the subnormal edges and on the saturation edge (448, 464, the next f32 after 464, the largest
    f32). (Checked once over all 4,278,190,080 finite f32 patterns: no difference.)"""
    x = _patterns_at_rounding_edges(20, 12)
    special = torch.tensor([0.0, -0.0, 448.0, -448.0, 464.0, -464.0, 2.0**-10, 3 * 2.0**-10, 2.0**-6, 2.0**-149], dtype=torch.float32)
    big = torch.tensor([3.4028234663852886e38, -3.4028234663852886e38], dtype=torch.float32)
    x = torch.cat((x, special, torch.nextafter(special[4:6], special[4:6] * 2), big))
    x = x[torch.isfinite(x)]
    assert torch.equal(encode_e4m3_finite_saturating(x), encode_e4m3(x, saturate=True))
    with pytest.raises(TypeError, match="float32"):
        encode_e4m3_finite_saturating(x.to(torch.float64))


def test_pow2_ceil_positive_normal_is_the_smallest_power_of_two_above() -> None:
    """On every positive normal exponent with the mantissa at 0, 1, random and all ones: the
    smallest power of two >= x, x itself for a power of two, infinity past 2^127; the same as
    the checked pow2_ceil_f32 (positive normal values only, here)."""
    exponent = torch.arange(1, 255, dtype=torch.int64).unsqueeze(1)
    gen = torch.Generator().manual_seed(5)
    mantissa = torch.cat((torch.tensor([[0, 1, 0x7FFFFF]]).expand(254, -1), torch.randint(1, 0x7FFFFF, (254, 8), generator=gen)), dim=1)
    x = ((exponent << 23) | mantissa).flatten().to(torch.int32).view(torch.float32)
    got = pow2_ceil_positive_normal(x)
    xs = x.to(torch.float64)
    expected = torch.where(mantissa.flatten() == 0, xs, torch.exp2(torch.floor(torch.log2(xs)) + 1)).to(torch.float32)
    assert torch.equal(got, expected)
    assert torch.isinf(got[-9:]).all() and float(got[253 * 11]) == 2.0**127  # exponent 254: 2^127 itself, then infinity
    assert torch.equal(got, pow2_ceil_f32(x))


def test_pow2_ceil() -> None:
    assert pow2_ceil_f32(_f32(1.0, 1.5, 3.0, 2.0**-20 * 1.001)).tolist() == [1.0, 2.0, 4.0, 2.0**-19]
    with pytest.raises(ValueError, match="positive normal"):
        pow2_ceil_f32(_f32(0.0))


def test_round_e4m3_is_the_codec_round_trip() -> None:
    """round_e4m3 is decode_e4m3(encode_e4m3(x, saturate=False)) bit for bit, NaN bits included,
    on every f32 (sign, exponent, top 3 mantissa bits) with the 20 bits below them at the
    rounding's edges (0, 1, just below / at / above the tie, all ones) and at random, and on
    zeros, infinities, NaNs and the overflow edge (448, 464, the next f32 above 464)."""
    x = _patterns_at_rounding_edges(20, 11)
    special = torch.tensor(
        [0.0, -0.0, 448.0, -448.0, 464.0, -464.0, math.inf, -math.inf, math.nan, 2.0**-10, 3 * 2.0**-10], dtype=torch.float32
    )
    x = torch.cat((x, special, torch.nextafter(special[4:6], special[6:8])))
    expected = decode_e4m3(encode_e4m3(x, saturate=False))
    got = round_e4m3(x)
    assert torch.equal(got.view(torch.int64), expected.view(torch.int64))
    with pytest.raises(TypeError, match="float32"):
        round_e4m3(x.to(torch.float64))
