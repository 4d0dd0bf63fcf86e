"""Profiles as files: the shipped TOML profiles load, round-trip, and bad files name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from oracle.profile_file import ProfileError, parse_profile_text, profile_to_mapping
from oracle.profiles import EXACT, FP32, GFX950, GFX950_L_SEQUENTIAL, PROFILE_DIR, PROFILES, load_profile, profile_to_toml


def test_shipped_profiles_are_files_and_round_trip() -> None:
    assert {p.stem for p in PROFILE_DIR.glob("*.toml")} == set(PROFILES)
    for profile in PROFILES.values():
        again = parse_profile_text(profile_to_toml(profile), source="roundtrip")
        assert again == profile, profile.name


def test_load_profile_specs(tmp_path: Path) -> None:
    assert load_profile("gfx950") is GFX950
    assert load_profile(FP32) is FP32
    assert load_profile(PROFILE_DIR / "exact.toml") == EXACT
    assert load_profile(str(PROFILE_DIR / "exact.toml")) == EXACT
    with pytest.raises(KeyError, match="known: gfx950"):
        load_profile("no-such-profile")
    path = tmp_path / "mine.toml"
    path.write_text('extends = "gfx950"\nname = "mine"\ndescription = "gfx950 with RTZ P"\n[p]\nrounding = "toward_zero"\n')
    mine = load_profile(path)
    assert mine.name == "mine" and mine.p_u == 2 * GFX950.p_u and mine.qk == GFX950.qk


def test_variant_extends_its_base() -> None:
    assert GFX950_L_SEQUENTIAL.l_partials == 1 and GFX950_L_SEQUENTIAL.l_final_roundings == 0
    assert GFX950_L_SEQUENTIAL.qk == GFX950.qk and GFX950_L_SEQUENTIAL.pv == GFX950.pv


def _with(mapping: dict, section: str | None, key: str, value: object) -> str:  # type: ignore[type-arg]
    table = mapping if section is None else mapping[section]
    if value is None:
        del table[key]
    else:
        table[key] = value
    return profile_to_toml_from_mapping(mapping)


def profile_to_toml_from_mapping(mapping: dict) -> str:  # type: ignore[type-arg]
    import json

    lines = [f"{k} = {json.dumps(v)}" for k, v in mapping.items() if not isinstance(v, dict)]
    for section, table in mapping.items():
        if isinstance(table, dict):
            lines += [f"[{section}]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("qk", "order", "diagonal", r"\[qk\]\.order: expected one of 'sequential'"),
        ("qk", "instructions", 0, r"\[qk\]\.instructions: expected an integer >= 1"),
        ("qk", "terms_per_instruction", None, r"\[qk\]\.terms_per_instruction: missing field"),
        ("softmax", "exp_rel_err", "2^x", r"\[softmax\]\.exp_rel_err: expected a number or '2\^-N'"),
        ("softmax", "arith_u", 1.5, r"\[softmax\]\.arith_u: a unit roundoff .* must be < 1"),
        ("softmax", "tile", 0, r"\[softmax\]\.tile: expected an integer >= 1"),
        ("p", "format", "fp8", r"\[p\]\.format: expected one of"),
        ("l", "partials", 2.5, r"\[l\]\.partials: expected an integer"),
        ("output", "casts", ["truncate"], r"\[output\]\.casts\[0\]: expected one of 'direct', 'via_f32'"),
        ("limits", "needs_pow2_scales", "yes", r"\[limits\]\.needs_pow2_scales: expected true or false"),
        ("limits", "colour", 1, r"\[limits\]\.colour: unknown field"),
        (None, "q_representation", "fp4", r"q_representation: expected one of 'exact', 'fp8_hi_lo'"),
    ],
)
def test_bad_fields_are_named(section: str | None, key: str, value: object, message: str) -> None:
    text = _with(profile_to_mapping(GFX950), section, key, value)
    with pytest.raises(ProfileError, match="bad.toml: " + message):
        parse_profile_text(text, source="bad.toml")


def test_defaults_are_conservative() -> None:
    mapping = profile_to_mapping(FP32)
    del mapping["qk"]["rounding"]
    del mapping["qk"]["guard_bits"]
    profile = parse_profile_text(profile_to_toml_from_mapping(mapping))
    assert profile.qk.rounding == "toward_zero" and profile.qk.guard_bits == 0


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="x.toml: not valid TOML"):
        parse_profile_text("name = ", source="x.toml")
    with pytest.raises(ProfileError, match="cannot read profile file"):
        load_profile(tmp_path / "absent.toml")
