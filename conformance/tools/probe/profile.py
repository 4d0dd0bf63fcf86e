"""From probe decisions to a numerics profile: every field with the probe that set it, or the
conservative value and "not probed" / "undecided".

`assemble(decided)` returns `Field`s (section, key, value, comment); `render(fields, ...)` writes
the TOML text (one comment per field), which `oracle.profile_file.parse_profile_text` reads back
(`to_profile`). The mapping rules (docs/how-to/measure-a-profile.md):

- an accumulation (QK or PV) is declared from three observations: the rounding class of the
  cancellation triple, the fraction bits F kept below the largest term, and the instruction block
  (contiguous B, "sequential" = 1, or a non-contiguous pattern):
  * every placement exact and F >= 31: f64, sequential, nearest;
  * B = 1, F = 23: sequential with the observed rounding (nearest or toward zero);
  * contiguous B >= 2, F >= 23: fused, B terms per instruction, G = F - 23 guard bits (at most
    8), the observed rounding;
  * nearest and F >= 26 otherwise: sequential nearest (the worst order of round-to-nearest
    additions, which also covers a fused sum keeping 3 or more guard bits);
  * anything else: unknown (toward zero), the conservative model.
- products are declared with one rounding (a softmax scale folded into q is not probed).
- l, the softmax's exp / arithmetic errors, the output casts, lse's error and the score limit are
  not probed: their conservative values are written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oracle.profile_file import _toml_value, parse_profile_text
from oracle.profile_schema import NumericsProfile


@dataclass(frozen=True)
class Field:
    section: str | None
    key: str
    value: object
    comment: str


def _acc(kind: str, decided: dict) -> tuple[dict, str, int]:
    """(accumulation fields, comment, instructions per 576-dim dot) for `kind` in ("qk", "pv")."""
    rnd = decided.get(f"{kind}_rounding")
    frac = decided.get(f"{kind}_fraction_bits")
    block = decided.get(f"{kind}_block")
    src = f"probes {kind}_rounding / {kind}_fraction_bits / {kind}_instruction"
    base = {"format": "f32", "guard_bits": 0, "terms_per_instruction": 1, "product_roundings": 1}
    if rnd == "exact" and frac is not None and frac >= 31:
        return (
            base | {"format": "f64", "order": "sequential", "rounding": "nearest"},
            f"{src}: no f32 rounding anywhere, F >= 31: float64",
            576,
        )
    if rnd in ("nearest", "toward_zero") and frac == 23 and block == 1:
        return base | {"order": "sequential", "rounding": rnd}, f"{src}: one rounding per term ({rnd})", 576
    if rnd in ("nearest", "toward_zero") and frac is not None and frac >= 23 and block is not None and block >= 2:
        g = min(frac - 23, 8)
        fields = base | {"order": "fused", "rounding": rnd, "guard_bits": g, "terms_per_instruction": block}
        # latent blocks (twice for a hi + lo Q), plus up to 8 rope instructions (the rope part may
        # be its own, smaller instructions: more roundings is the safe side)
        parts = 2 if decided.get("q_representation") == "fp8_hi_lo" else 1
        instructions = parts * math.ceil(512 / block) + 8
        return fields, f"{src}: fused blocks of {block}, F = {frac} (G = {g}), {rnd}", instructions
    if rnd == "nearest" and frac is not None and frac >= 26:
        return (
            base | {"order": "sequential", "rounding": "nearest"},
            f"{src}: nearest, F = {frac}, order not contiguous: worst order of nearest additions",
            576,
        )
    why = f"rounding {rnd}, F = {frac}, block {block}"
    return base | {"order": "unknown", "rounding": "toward_zero"}, f"{src} undecided ({why}): conservative", 576


def assemble(decided: dict, *, name: str, description: str) -> list[Field]:
    """The profile's fields from the probes' decisions (keys: probe names, values: decisions)."""
    f: list[Field] = [Field(None, "name", name, "probed profile"), Field(None, "description", description, "")]
    qrep = decided.get("q_representation")
    f.append(
        Field(None, "q_representation", qrep or "exact", "probe q_representation" if qrep else "undecided (q_representation): bf16 assumed")
    )
    qk, qk_note, qk_instr = _acc("qk", decided)
    f64 = qk["format"] == "f64"
    f.append(Field(None, "score_format", "f64" if f64 else "f32", "from the QK accumulator format" if f64 else "f32 (conservative range)"))
    sub = decided.get("subnormals")
    f.append(Field(None, "subnormals", sub or "unknown", "probe subnormals" if sub else "undecided (probe subnormals): bounded as flush"))
    for i, key in enumerate(("format", "order", "rounding", "guard_bits", "terms_per_instruction", "product_roundings")):
        note = (
            (qk_note if i == 0 else "(same probes)") if key != "product_roundings" else "not probed: one rounding (a scale folded into q)"
        )
        f.append(Field("qk", key, qk[key], note))
    f.append(
        Field("qk", "instructions", qk_instr, "576 / terms_per_instruction" if qk["order"] == "fused" else "one per product (conservative)")
    )

    pv, pv_note, _ = _acc("pv", decided)
    block = decided.get("pv_block")
    tile = block if pv["order"] == "fused" and block and block >= 2 else 1
    f += [
        Field("softmax", "score_roundings", 2, "not probed: c = f32(scale log2 e) and x = s c (the larger count)"),
        Field("softmax", "arith_u", "2^-23", "not probed: approximate division / fast math (conservative)"),
        Field("softmax", "exp_rel_err", "2^-20", "not probed: 8 ulp, above every documented exp2 / expf / ex2.approx"),
        Field("softmax", "exp_floor", "2^-126", "not probed: results below 2^-126 may flush"),
        Field(
            "softmax",
            "tile",
            tile,
            f"probe pv_instruction: a tile holds whole PV blocks of {block}" if tile > 1 else "not decided: any tiling (conservative)",
        ),
    ]
    p = decided.get("p_format") if isinstance(decided.get("p_format"), dict) else None
    shift = decided.get("p_shift")
    if p and p["format"] == "fp16_scaled":
        f.append(
            Field("softmax", "p_shift", int(shift) if shift is not None else 8, "probe p_shift" if shift is not None else "undecided: 8")
        )
    else:
        f.append(Field("softmax", "p_shift", 0, "P <= 1 assumed (a shift is invisible without fp16's underflow)"))
    if p:
        f += [
            Field("p", "format", p["format"], "probe p_format"),
            Field("p", "rounding", p["rounding"], "probe p_format"),
            Field("p", "rounded_in_l", p["rounded_in_l"], "probe p_format"),
        ]
    else:
        f += [
            Field("p", "format", "bf16", "undecided (probe p_format): the coarsest format"),
            Field("p", "rounding", "toward_zero", "undecided: conservative"),
            Field("p", "rounded_in_l", "unknown", "undecided: both readings bounded"),
        ]
    for i, key in enumerate(("format", "order", "rounding", "guard_bits", "terms_per_instruction", "product_roundings")):
        note = (pv_note if i == 0 else "(same probes)") if key != "product_roundings" else "not probed: one rounding (P x V in f32)"
        f.append(Field("pv", key, pv[key], note))
    f.append(Field("pv", "rescale_roundings", 1, "o * alpha per tile"))
    f += [
        Field("l", "format", "f32", "not probed (l sums positive terms: no cancellation probe)"),
        Field("l", "order", "sequential", "not probed: one accumulator, the longest chain"),
        Field("l", "rounding", "toward_zero", "not probed: conservative"),
        Field("l", "guard_bits", 0, "not probed"),
        Field("l", "terms_per_instruction", 1, "not probed"),
        Field("l", "product_roundings", 0, "P enters l unscaled"),
        Field("l", "partials", 1, "not probed: one partial (the longest chain)"),
        Field("l", "final_roundings", 8, "not probed: a few combining additions (conservative)"),
        Field("output", "casts", ["direct", "via_f32"], "both conversions admitted (probe output_rounding found nearest)"),
        Field("output", "lse_extra_u", "2^-20", "not probed beyond probe lse's base check: conservative"),
    ]
    cap = decided.get("scale_cap")
    f += [
        Field(
            "limits", "scale_cap", "none" if cap in (None, "none") else cap, "probe scale_cap" if cap is not None else "undecided: no cap"
        ),
        Field("limits", "needs_pow2_scales", True, "not probed: the bound is promised for power-of-two scales only"),
        Field("limits", "score_limit", 1e30 if f64 else 1e18, "not probed: below masking constants of f32 kernels (conservative)"),
    ]
    split = decided.get("split") if isinstance(decided.get("split"), dict) else None
    if split is None:
        f.append(Field("split", "rows", "unknown", "undecided (probe split): any row may split"))
    else:
        f.append(Field("split", "rows", split["rows"], "probe split"))
        if split["rows"] == "above":
            f.append(
                Field("split", "min_keys", split["min_keys"], "probe split: the longest row seen unsplit below the shortest split one")
            )
    if split is None or split["rows"] != "never":
        f += [
            Field("split", "max_partials", "any", "not probed"),
            Field("split", "lse_base", "e", "not probed: base e bounds a log2-domain merge too"),
            Field("split", "lse_format", "f32", "not probed: f32 partial lse (the lse-magnitude effect)"),
            Field("split", "exp_rel_err", "2^-20", "not probed"),
            Field("split", "log_abs_err", "2^-20", "not probed"),
        ]
    return f


def render(fields: list[Field], header: list[str]) -> str:
    """TOML text: header comment lines, top-level fields, then one table per section."""
    lines = [f"# {h}" for h in header]
    sections: dict[str | None, list[Field]] = {}
    for fl in fields:
        sections.setdefault(fl.section, []).append(fl)
    for section, items in sections.items():
        if section is not None:
            lines += ["", f"[{section}]"]
        for fl in items:
            text = f"{fl.key} = {_value(fl.value)}"
            lines.append(f"{text:<40} # {fl.comment}" if fl.comment else text)
    return "\n".join(lines) + "\n"


def _value(value: object) -> str:
    if isinstance(value, str) and value.startswith("2^"):
        return f'"{value}"'
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 and value < 1e15:
        return str(int(value))
    return _toml_value(value)


def to_profile(text: str, source: str = "<probed profile>") -> NumericsProfile:
    """Parse the rendered text (a ProfileError names a bad field)."""
    from oracle.profiles import _shipped_base

    return parse_profile_text(text, source=source, resolve_base=_shipped_base)
