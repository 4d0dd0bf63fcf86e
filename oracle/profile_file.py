"""Numerics profiles as TOML files: parse, validate field by field, serialise.

File layout (docs/reference/profile-format.md has the full reference and the shipped profiles as examples):

    name = "my-kernel"                       # required
    description = "..."                      # required
    extends = "gfx950"                       # optional: start from a shipped profile (or a path)
    q_representation = "exact"               # "exact" | "fp8_hi_lo"
    score_format = "f32"                     # "f32" | "f64"
    [qk]        format, order, rounding, guard_bits, terms_per_instruction, product_roundings, instructions
    [softmax]   score_roundings, arith_u, exp_rel_err, exp_floor, tile, p_shift
    [p]         format, rounding, rounded_in_l
    [pv]        format, order, rounding, guard_bits, terms_per_instruction, product_roundings, rescale_roundings
    [l]         format, order, rounding, guard_bits, terms_per_instruction, product_roundings, partials, final_roundings
    [output]    casts, lse_extra_u
    [limits]    scale_cap, needs_pow2_scales, score_limit
    subnormals = "flush"                     # optional: "preserve" | "flush" | "unknown" (default)
    [split]     rows, min_keys, max_partials, lse_base, lse_format, exp_rel_err, log_abs_err
                (optional table; absent: rows = "unknown", which is bounded as "any")

Real numbers may be written as TOML numbers or as strings "2^-24" (also "2**-24"); `tile` and
`scale_cap` accept "none". In an accumulation table, `rounding` defaults to "toward_zero" and
`guard_bits` to 0 (the conservative choices); every other field is required unless `extends` gives
it. Every error is a ProfileError naming the file and the field.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from oracle.accumulation import FORMATS, ORDERS, ROUNDINGS, Accumulation
from oracle.profile_schema import (
    LSE_BASES,
    LSE_FORMATS,
    OUT_CASTS,
    P_FORMATS,
    P_IN_L,
    Q_REPRESENTATIONS,
    SCORE_FORMATS,
    SPLIT_ROWS,
    SUBNORMALS,
    NumericsProfile,
    SplitModel,
)


class ProfileError(ValueError):
    """A profile file or mapping is malformed; the message names the file and the field."""


_POW2 = re.compile(r"^\s*2\s*(?:\^|\*\*)\s*\(?\s*([+-]?\d+)\s*\)?\s*$")

_ACC_KEYS = ("format", "order", "rounding", "guard_bits", "terms_per_instruction", "product_roundings")
_ACC_DEFAULTS = {"rounding": "toward_zero", "guard_bits": 0}

# section -> {file key: dataclass field}; None is the top level.
_LAYOUT: dict[str | None, dict[str, str]] = {
    None: {"name": "name", "description": "description", "q_representation": "q_representation", "score_format": "score_format"},
    "qk": {"instructions": "qk_instructions"},
    "softmax": {
        "score_roundings": "score_roundings",
        "arith_u": "arith_u",
        "exp_rel_err": "exp_rel_err",
        "exp_floor": "exp_floor",
        "tile": "softmax_tile",
        "p_shift": "p_shift",
    },
    "p": {"format": "p_format", "rounding": "p_rounding", "rounded_in_l": "p_rounded_in_l"},
    "pv": {"rescale_roundings": "pv_rescale_roundings"},
    "l": {"partials": "l_partials", "final_roundings": "l_final_roundings"},
    "output": {"casts": "out_casts", "lse_extra_u": "lse_extra_u"},
    "limits": {"scale_cap": "scale_cap", "needs_pow2_scales": "needs_pow2_scales", "score_limit": "score_limit"},
}
_ACC_SECTIONS = {"qk": "qk", "pv": "pv", "l": "l"}
_OPTIONAL_TOP = {"extends", "subnormals", "split"}
_SPLIT_KEYS = ("rows", "min_keys", "max_partials", "lse_base", "lse_format", "exp_rel_err", "log_abs_err")


def _where(source: str, section: str | None, key: str) -> str:
    return f"{source}: {'[' + section + '].' if section else ''}{key}"


def _real(value: Any, where: str, *, positive: bool = False, below_one: bool = False) -> float:
    if isinstance(value, bool):
        raise ProfileError(f"{where}: expected a number, got a boolean")
    if isinstance(value, str):
        match = _POW2.match(value)
        if match:
            value = 2.0 ** int(match.group(1))
        else:
            try:
                value = float(value)
            except ValueError:
                raise ProfileError(f"{where}: expected a number or '2^-N', got {value!r}") from None
    if not isinstance(value, int | float):
        raise ProfileError(f"{where}: expected a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ProfileError(f"{where}: expected a finite number >= 0, got {value!r}")
    if positive and value == 0:
        raise ProfileError(f"{where}: expected a number > 0, got 0")
    if below_one and value >= 1:
        raise ProfileError(f"{where}: a unit roundoff or relative error must be < 1, got {value!r}")
    return value


def _count(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProfileError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise ProfileError(f"{where}: expected an integer >= {minimum}, got {value}")
    return value


def _choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ProfileError(f"{where}: expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ProfileError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(f"{where}: expected true or false, got {value!r}")
    return value


def _optional(parse: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    def parse_optional(value: Any, where: str) -> Any:
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        return parse(value, where)

    return parse_optional


def _casts(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ProfileError(f"{where}: expected a non-empty list of {', '.join(repr(c) for c in OUT_CASTS)}")
    return tuple(_choice(v, f"{where}[{i}]", OUT_CASTS) for i, v in enumerate(value))


_FIELD_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "name": _text,
    "description": _text,
    "q_representation": lambda v, w: _choice(v, w, Q_REPRESENTATIONS),
    "score_format": lambda v, w: _choice(v, w, SCORE_FORMATS),
    "qk_instructions": lambda v, w: _count(v, w, minimum=1),
    "score_roundings": _count,
    "arith_u": lambda v, w: _real(v, w, below_one=True),
    "exp_rel_err": lambda v, w: _real(v, w, below_one=True),
    "exp_floor": _real,
    "softmax_tile": _optional(lambda v, w: _count(v, w, minimum=1)),
    "p_shift": _count,
    "p_format": lambda v, w: _choice(v, w, P_FORMATS),
    "p_rounding": lambda v, w: _choice(v, w, ROUNDINGS),
    "p_rounded_in_l": lambda v, w: _choice(v, w, P_IN_L),
    "pv_rescale_roundings": _count,
    "l_partials": lambda v, w: _count(v, w, minimum=1),
    "l_final_roundings": _count,
    "out_casts": _casts,
    "lse_extra_u": lambda v, w: _real(v, w, below_one=True),
    "scale_cap": _optional(lambda v, w: _real(v, w, positive=True)),
    "needs_pow2_scales": _flag,
    "score_limit": lambda v, w: _real(v, w, positive=True),
}

_ACC_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "format": lambda v, w: _choice(v, w, FORMATS),
    "order": lambda v, w: _choice(v, w, ORDERS),
    "rounding": lambda v, w: _choice(v, w, ROUNDINGS),
    "guard_bits": _count,
    "terms_per_instruction": lambda v, w: _count(v, w, minimum=1),
    "product_roundings": _count,
}


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def profile_from_mapping(
    data: Mapping[str, Any], *, source: str = "<profile>", resolve_base: Callable[[str], NumericsProfile] | None = None
) -> NumericsProfile:
    """Validate a parsed TOML mapping field by field and build the profile.

    `extends` names a base profile (resolved by `resolve_base`, e.g. a shipped profile's name or a
    path) whose fields the mapping overrides. ProfileError names `source` and the field."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"{source}: expected a table of profile fields")
    if "extends" in data:
        base_name = _text(data["extends"], _where(source, None, "extends"))
        if resolve_base is None:
            raise ProfileError(f"{_where(source, None, 'extends')}: no base profiles to extend here")
        try:
            base = resolve_base(base_name)
        except (KeyError, ProfileError, OSError) as exc:
            raise ProfileError(f"{_where(source, None, 'extends')}: {exc}") from None
        data = _merge(profile_to_mapping(base), {k: v for k, v in data.items() if k != "extends"})
    known_top = set(_LAYOUT[None]) | {k for k in _LAYOUT if k} | _OPTIONAL_TOP
    for key in data:
        if key not in known_top:
            raise ProfileError(f"{_where(source, None, key)}: unknown field (known: {', '.join(sorted(known_top))})")
    fields: dict[str, Any] = {}
    for section, keys in _LAYOUT.items():
        table = data if section is None else data.get(section)
        if section is not None:
            if table is None:
                raise ProfileError(f"{source}: [{section}]: missing table")
            if not isinstance(table, Mapping):
                raise ProfileError(f"{source}: [{section}]: expected a table, got {type(table).__name__}")
            allowed = set(keys) | (set(_ACC_KEYS) if section in _ACC_SECTIONS else set())
            for key in table:
                if key not in allowed:
                    raise ProfileError(f"{_where(source, section, key)}: unknown field (known: {', '.join(sorted(allowed))})")
        for key, name in keys.items():
            where = _where(source, section, key)
            if key not in table:
                if name == "out_casts":
                    fields[name] = OUT_CASTS
                    continue
                raise ProfileError(f"{where}: missing field")
            fields[name] = _FIELD_PARSERS[name](table[key], where)
        if section in _ACC_SECTIONS:
            acc: dict[str, Any] = {}
            for key in _ACC_KEYS:
                where = _where(source, section, key)
                if key not in table:
                    if key in _ACC_DEFAULTS:
                        acc[key] = _ACC_DEFAULTS[key]
                        continue
                    raise ProfileError(f"{where}: missing field")
                acc[key] = _ACC_PARSERS[key](table[key], where)
            fields[_ACC_SECTIONS[section]] = Accumulation(**acc)
    if "subnormals" in data:
        fields["subnormals"] = _choice(data["subnormals"], _where(source, None, "subnormals"), SUBNORMALS)
    if "split" in data:
        fields["split"] = _split(data["split"], source)
    if fields["p_format"] == "fp16_scaled" and fields["p_shift"] > 8:
        raise ProfileError(f"{_where(source, 'softmax', 'p_shift')}: fp16-scaled P needs P * scale_cap to fit f16 (p_shift <= 8)")
    return NumericsProfile(**fields, source=source)


def _split(table: Any, source: str) -> SplitModel:
    """The [split] table as a SplitModel (missing keys take SplitModel's conservative defaults)."""
    if not isinstance(table, Mapping):
        raise ProfileError(f"{source}: [split]: expected a table, got {type(table).__name__}")
    for key in table:
        if key not in _SPLIT_KEYS:
            raise ProfileError(f"{_where(source, 'split', key)}: unknown field (known: {', '.join(_SPLIT_KEYS)})")
    parsers: dict[str, Callable[[Any, str], Any]] = {
        "rows": lambda v, w: _choice(v, w, SPLIT_ROWS),
        "min_keys": _count,
        "max_partials": lambda v, w: None if v == "any" else _count(v, w, minimum=1),
        "lse_base": lambda v, w: _choice(str(v), w, LSE_BASES) if not isinstance(v, bool) else _choice(v, w, LSE_BASES),
        "lse_format": lambda v, w: _choice(v, w, LSE_FORMATS),
        "exp_rel_err": lambda v, w: _real(v, w, below_one=True),
        "log_abs_err": lambda v, w: _real(v, w, below_one=True),
    }
    values = {key: parsers[key](table[key], _where(source, "split", key)) for key in _SPLIT_KEYS if key in table}
    if values.get("rows") == "above" and "min_keys" not in values:
        raise ProfileError(f'{_where(source, "split", "min_keys")}: rows = "above" needs min_keys')
    return SplitModel(**values)


def profile_to_mapping(profile: NumericsProfile) -> dict[str, Any]:
    """The profile as a TOML-shaped mapping (inverse of `profile_from_mapping`; floats as floats)."""
    out: dict[str, Any] = {}
    for section, keys in _LAYOUT.items():
        table: dict[str, Any] = out if section is None else out.setdefault(section, {})
        if section in _ACC_SECTIONS:
            acc: Accumulation = getattr(profile, _ACC_SECTIONS[section])
            table.update({key: getattr(acc, key) for key in _ACC_KEYS})
        for key, name in keys.items():
            value = getattr(profile, name)
            if isinstance(value, tuple):
                value = list(value)
            table[key] = "none" if value is None else value
    out["subnormals"] = profile.subnormals
    split = profile.split
    out["split"] = {
        "rows": split.rows,
        "min_keys": split.min_keys,
        "max_partials": "any" if split.max_partials is None else split.max_partials,
        "lse_base": split.lse_base,
        "lse_format": split.lse_format,
        "exp_rel_err": split.exp_rel_err,
        "log_abs_err": split.log_abs_err,
    }
    return out


def parse_profile_text(
    text: str, *, source: str = "<profile>", resolve_base: Callable[[str], NumericsProfile] | None = None
) -> NumericsProfile:
    """Parse TOML text into a validated profile (ProfileError on bad TOML or a bad field)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: not valid TOML: {exc}") from None
    return profile_from_mapping(data, source=source, resolve_base=resolve_base)


def read_profile_file(path: Path, *, resolve_base: Callable[[str], NumericsProfile] | None = None) -> NumericsProfile:
    """Read and validate one profile file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile file: {exc.strerror or exc}") from None
    return parse_profile_text(text, source=str(path), resolve_base=resolve_base)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        if value > 0:
            exponent = math.log2(value)
            if exponent == int(exponent) and abs(exponent) > 4:
                return f'"2^{int(exponent)}"'
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def profile_to_toml(profile: NumericsProfile) -> str:
    """The profile as TOML text that `parse_profile_text` reads back to an equal profile."""
    data = profile_to_mapping(profile)
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, table in data.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
