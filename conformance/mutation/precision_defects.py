"""Precision defects: the gfx950 algorithm of conformance.mutation.independent, correct in every
step but one, where it rounds more coarsely (or in the wrong direction) than the seed's numerics.

Each is a registry Backend declaring profile gfx950, so the defect must be caught by the bound
(or by an exact check), never by a profile mismatch. `DEFECTS`: name -> (switches of
`Gfx950Algorithm`, bug class, description, what an input needs for the defect to show).
"""

from __future__ import annotations

from conformance.mutation.independent import as_backend, defect

MODULE = "conformance.mutation.catalogue"

DEFECTS: dict[str, tuple[dict[str, object], str, str, str]] = {
    "p_fp16_toward_zero": (
        {"p_rtz": True},
        "pv",
        "P' = fp16(P * scale_v) rounded toward zero (v_cvt_pkrtz_f16_f32) instead of to nearest",
        "P' values far from fp16-representable with a few dominant keys (errors up to 1 ulp, one-signed)",
    ),
    "l_bf16": (
        {"l_bf16": True},
        "softmax",
        "the l partial sums held in bf16 (rounded after every update)",
        "any row: l loses 16 bits",
    ),
    "alpha_bf16": (
        {"alpha_bf16": True},
        "softmax",
        "the rescale factor alpha = exp2(m_old - m_new) rounded to bf16",
        "a row of several tiles whose running max grows",
    ),
    "exp2_f16": (
        {"exp2_f16": True},
        "softmax",
        "P and alpha evaluated by an f16 exp2 (argument and result in f16)",
        "scores whose exp2 argument is not an f16 value",
    ),
    "rope_fp8": (
        {"rope_fp8": True},
        "qk",
        "the rope part of QK through an fp8 MFMA (q and K rope rounded to e4m3) instead of bf16",
        "rope values with more than 4 significant bits",
    ),
    "q_lo_two_bits_fewer": (
        {"q_lo_bits": 1},
        "quantization",
        "Q's lo residual quantised with 1 mantissa bit instead of e4m3's 3",
        "q blocks whose lo part needs all its bits",
    ),
    "out_bf16_truncated": (
        {"out_rtz": True},
        "finalize",
        "out = bf16(o / l) truncated (round toward zero) instead of rounded to nearest",
        "outputs not representable in bf16",
    ),
    "c_log2_bf16": (
        {"clog2_bf16": True},
        "softmax",
        "c_log2 = softmax_scale * log2(e) rounded to bf16 instead of f32",
        "scores of magnitude above ~1 (the relative error 2^-9 scales with |s|)",
    ),
}

BACKENDS = {name: as_backend(f"{MODULE}:{name}", defect(**switches)) for name, (switches, _, _, _) in DEFECTS.items()}
