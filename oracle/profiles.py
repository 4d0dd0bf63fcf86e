"""Numerics profiles: what a kernel's arithmetic may do, as data, for the a-priori error bound.

The shipped profiles are TOML files in `oracle/profile_files/` (docs/reference/profile-format.md explains every
field with them as worked examples; TOLERANCES.md derives the bound and sources each hardware
assumption). The API:

- `load_profile(spec)`: a `NumericsProfile` from a shipped profile's name, a path to a `.toml`
  file (str or Path), or a `NumericsProfile` (returned as is). This is what `--profile` and a
  kernel's `profile` attribute resolve through. ProfileError (a ValueError) names the field of a
  bad file; KeyError names the known profiles for an unknown name.
- `get_profile(name)`: a shipped profile by name (KeyError otherwise).
- `PROFILES`: name -> shipped profile; `GFX950`, `BF16_Q_BF16_P`, `EXACT`, `FP32`,
  `GFX950_L_SEQUENTIAL`: the shipped profiles as constants.
"""

from __future__ import annotations

from pathlib import Path

from oracle.accumulation import Accumulation
from oracle.profile_file import ProfileError, profile_to_toml, read_profile_file
from oracle.profile_schema import NumericsProfile

__all__ = [
    "BF16_Q_BF16_P",
    "EXACT",
    "FP32",
    "GFX950",
    "GFX950_L_SEQUENTIAL",
    "PROFILES",
    "PROFILE_DIR",
    "Accumulation",
    "NumericsProfile",
    "ProfileError",
    "get_profile",
    "load_profile",
    "profile_to_toml",
]

PROFILE_DIR = Path(__file__).with_name("profile_files")

PROFILES: dict[str, NumericsProfile] = {}


def _shipped_base(name: str) -> NumericsProfile:
    """A base named by `extends`: a shipped profile (loaded on first use) or a .toml path."""
    if name in PROFILES:
        return PROFILES[name]
    if (PROFILE_DIR / f"{name}.toml").is_file():
        return _load_shipped(name)
    path = Path(name)
    if path.suffix == ".toml":
        return read_profile_file(path, resolve_base=_shipped_base)
    raise KeyError(f"unknown base profile {name!r}; known: {', '.join(sorted(p.stem for p in PROFILE_DIR.glob('*.toml')))}")


def _load_shipped(name: str) -> NumericsProfile:
    profile = read_profile_file(PROFILE_DIR / f"{name}.toml", resolve_base=_shipped_base)
    if profile.name != name:
        raise ProfileError(f"{PROFILE_DIR / name}.toml: name {profile.name!r} differs from its file name")
    PROFILES[name] = profile
    return profile


# every file in oracle/profile_files/ is a shipped profile; the hardware ones first, then the rest by name
for _name in ("gfx950", "bf16-q-bf16-p", "exact", "fp32", *sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))):
    if _name not in PROFILES and (PROFILE_DIR / f"{_name}.toml").is_file():
        _load_shipped(_name)

GFX950 = PROFILES["gfx950"]
BF16_Q_BF16_P = PROFILES["bf16-q-bf16-p"]
EXACT = PROFILES["exact"]
FP32 = PROFILES["fp32"]
GFX950_L_SEQUENTIAL = PROFILES["gfx950-l-sequential"]


def get_profile(name: str) -> NumericsProfile:
    """The shipped profile called `name`; KeyError naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown numerics profile {name!r}; known: {', '.join(PROFILES)}") from None


def load_profile(spec: str | Path | NumericsProfile) -> NumericsProfile:
    """Resolve a profile spec: a NumericsProfile (as is), a shipped profile's name, or a path to a
    TOML profile file (a Path, or a str ending in .toml or naming an existing file).

    Raises ProfileError (field-by-field validation, unreadable file) or KeyError (unknown name)."""
    if isinstance(spec, NumericsProfile):
        return spec
    if isinstance(spec, Path):
        return read_profile_file(spec, resolve_base=_shipped_base)
    if not isinstance(spec, str):
        raise TypeError(f"a profile is a name, a path or a NumericsProfile, not {type(spec).__name__}")
    if spec in PROFILES:
        return PROFILES[spec]
    path = Path(spec)
    if spec.endswith(".toml") or path.is_file():
        return read_profile_file(path, resolve_base=_shipped_base)
    return get_profile(spec)
