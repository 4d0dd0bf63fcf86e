"""Bit-level number formats and rounding for the gfx950 interpreter (numpy, lane vectors).

Every function takes and returns numpy arrays of raw bits (uint32 / uint16 / uint8) or float64
values; nothing here uses a library float8 cast (torch's changed between releases). Rounding is
round-to-nearest-even everywhere (the kernel descriptor sets float_round_mode 0) and f32/f16
denormals are kept (float_denorm_mode 3).

Sources:
- OCP 8-bit floating point specification v1.0 (E4M3: bias 7, no inf, NaN = S.1111.111, max 448);
  gfx950 uses the OCP formats (LLVM AMDGPU: FeatureFP8ConversionInsts + "OCP" on gfx950).
- IEEE 754-2008 binary32 / binary16; bfloat16 = the top 16 bits of binary32.
- OCP Microscaling (MX) v1.0: E8M0 scale = 2^(e - 127), e = 0xFF is NaN.
"""

from __future__ import annotations

import numpy as np

from kernel.isa.consts import K

F32_EXP_MASK = np.uint32(0x7F800000)
F32_MANT_MASK = np.uint32(0x007FFFFF)
F32_SIGN = np.uint32(0x80000000)


def as_f32(bits: np.ndarray) -> np.ndarray:
    """uint32 bits -> float32 values (a view; no conversion)."""
    return np.ascontiguousarray(bits, dtype=np.uint32).view(np.float32)


def round_f64_to_f32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32, RNE (numpy's cast is IEEE RNE with subnormals)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float64).astype(np.float32)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused a*b + c of float32 arrays, rounded once to float32 (RNE).

    a*b is exact in float64 (24 + 24 bits); s = fl64(p + c) and its exact error e (TwoSum) give
    the exact result s + e. Rounding s alone to f32 is wrong only when s is exactly an f32
    rounding midpoint and e != 0; that case is resolved toward the sign of e.
    """
    a64 = np.asarray(a, dtype=np.float32).astype(np.float64)
    b64 = np.asarray(b, dtype=np.float32).astype(np.float64)
    c64 = np.asarray(c, dtype=np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        p = a64 * b64
        s = p + c64
        bb = s - p
        e = (p - (s - bb)) + (c64 - bb)
        r = s.astype(np.float32)
        finite = np.isfinite(s) & np.isfinite(e)
        if not np.any(finite & (e != 0)):
            return r
        r64 = r.astype(np.float64)
        d = s - r64
        toward = np.where(d > 0, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
        other = np.nextafter(r, toward).astype(np.float64)
        mid = (r64 + other) * 0.5
        at_mid = finite & (e != 0) & (d != 0) & (s == mid)
        if np.any(at_mid):
            nudged = np.nextafter(s, np.where(e > 0, np.inf, -np.inf))
            r = np.where(at_mid, nudged.astype(np.float32), r)
    return r


# ------------------------------------------------------------------ fp8 e4m3 (OCP)


def _e4m3_decode_table() -> np.ndarray:
    out = np.zeros(256, dtype=np.float64)
    for code in range(256):
        s = -1.0 if code & 0x80 else 1.0
        e = (code >> 3) & 0xF
        m = code & 7
        if e == 0xF and m == 7:
            out[code] = np.nan
        elif e == 0:
            out[code] = s * m * 2.0**-9
        else:
            out[code] = s * (1 + m / 8.0) * 2.0 ** (e - 7)
    return out


E4M3_VALUES = _e4m3_decode_table()  # float64 value of every code (NaN for 0x7F / 0xFF)
# value of the low byte (row 0) and the high byte (row 1) of every 16-bit word
E4M3_WORD_VALUES = np.stack([np.tile(E4M3_VALUES, 256), np.repeat(E4M3_VALUES, 256)])


def f32_to_e4m3_arith(x: np.ndarray, saturate: bool = False) -> np.ndarray:
    """float32 -> uint8 E4M3 code, RNE. Without saturation (gfx950's default) a value whose
    rounded magnitude exceeds 448 (|x| > 464), an inf or a NaN gives NaN (sign | 0x7F); with it,
    finite overflow and inf give +-448 (0x7E) and NaN stays NaN.

    On the bits: for |x| >= 2^-6 (E4M3 normals) the f32 pattern is rounded to 3 mantissa bits
    by integer RNE (add 2^19 - 1 plus the kept lsb, shift by 20; a carry moves into the
    exponent), then rebased from the f32 to the E4M3 exponent bias (120 << 3); below 2^-6 the
    code is |x| / 2^-9 rounded to an integer (exact in float64, np.rint is RNE), 8 meaning the
    smallest normal."""
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32)
    ab = b & np.uint32(0x7FFFFFFF)
    sign = ((b >> np.uint32(24)) & np.uint32(0x80)).astype(np.uint8)
    naninf = ab >= np.uint32(0x7F800000)
    nan = ab > np.uint32(0x7F800000)
    rn = (ab + np.uint32(0x7FFFF) + ((ab >> np.uint32(20)) & np.uint32(1))) >> np.uint32(20)
    code = rn.astype(np.int64) - (120 << 3)
    with np.errstate(invalid="ignore"):
        sub = np.rint(np.where(naninf, 0.0, np.abs(x).astype(np.float64)) * 512.0).astype(np.int64)
    code = np.where(ab >= np.uint32(0x3C800000), code, sub)
    over = (code > 0x7E) & ~naninf
    if saturate:
        code = np.where(over | (naninf & ~nan), 0x7E, code)
        code = np.where(nan, 0x7F, code)
    else:
        code = np.where(over | naninf, 0x7F, code)
    return code.astype(np.uint8) | sign


def _e4m3_tables() -> tuple[np.ndarray, np.ndarray]:
    """E4M3 code (sign cleared) of every non-negative f32 class (bits 30..19, sticky) where
    sticky = any of bits 18..0 set: RNE to E4M3 depends on nothing else (the rounding position
    is at bit 20 or above: bit 19 is at most the round bit, bits 18..0 only matter through
    their OR), so one representative per class, rounded by f32_to_e4m3_arith, gives the code
    of the whole class. Index = (bits 30..19) << 1 | sticky."""
    prefix = np.arange(1 << 12, dtype=np.uint32)
    reps = ((prefix[:, None] << np.uint32(19)) | np.array([0, 1], dtype=np.uint32)[None, :]).reshape(-1)
    x = reps.view(np.float32)
    return f32_to_e4m3_arith(x, False), f32_to_e4m3_arith(x, True)


def _signed_tables() -> tuple[np.ndarray, np.ndarray]:
    """The class tables extended by the sign (index bit 13 = bit 31 of the f32)."""
    out = []
    for t in _e4m3_tables():
        out.append(np.concatenate([t, t | np.uint8(0x80)]))
    return out[0], out[1]


_E4M3_TABLE = _signed_tables()


def f32_to_e4m3(x: np.ndarray, saturate: bool = False) -> np.ndarray:
    """float32 -> uint8 E4M3 code, RNE, as f32_to_e4m3_arith (same results for every input:
    a lookup of the rounding class and sign, see _e4m3_tables)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    sh = b.shape
    u = np.uint32
    cls = ((b >> K(18, u, sh)) & K(0x3FFE, u, sh)) | np.minimum(b & K(0x7FFFF, u, sh), K(1, u, sh))
    return _E4M3_TABLE[int(saturate)][cls.astype(np.intp)]


# ------------------------------------------------------------------ f16 / bf16


def bf16_bits_to_f64(bits: np.ndarray) -> np.ndarray:
    b = np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << 16
    return b.view(np.float32).astype(np.float64)


def e8m0_to_f64(e: np.ndarray) -> np.ndarray:
    """E8M0 byte -> 2^(e - 127) as float64 (exact for every e < 255); NaN for 0xFF."""
    e = np.asarray(e, dtype=np.int64)
    return np.where(e == 255, np.nan, np.ldexp(1.0, (e - 127).astype(np.int32)))


# ------------------------------------------------------------------ transcendental (model)


def exp2_f32(x: np.ndarray) -> np.ndarray:
    """v_exp_f32 model: correctly rounded f32 of 2^x (float64 evaluation, then RNE).
    Hardware: documented to 1 ulp (CDNA3/CDNA4 ISA, V_EXP_F32 "1 ULP accuracy")."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return round_f64_to_f32(np.exp2(np.asarray(x, dtype=np.float32).astype(np.float64)))


def log2_f32(x: np.ndarray) -> np.ndarray:
    """v_log_f32 model: correctly rounded f32 of log2(x); log2(0) = -inf, x < 0 -> NaN.
    Hardware: documented to 1 ulp (CDNA3/CDNA4 ISA, V_LOG_F32)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return round_f64_to_f32(np.log2(np.asarray(x, dtype=np.float32).astype(np.float64)))


def rcp_f32(x: np.ndarray) -> np.ndarray:
    """v_rcp_f32 model: correctly rounded f32 of 1/x (hardware: 1 ulp documented)."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return round_f64_to_f32(1.0 / np.asarray(x, dtype=np.float32).astype(np.float64))
