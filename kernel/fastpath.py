"""The one mechanism behind the fast paths: kernels (Triton, CUDA) that replace a sequence of torch
operations, used on a device only after a self-check reproduced those operations' results there.

A fast path (`FastPath`, registered by the module that owns it) has variants (ways of running
it), tried in order: the first variant that may run on the device (`eligible`, looked up at each
call: CUDA, Triton importable, nvcc and compute capability 8.0+, Triton's interpreter on a CPU)
and whose self-check passed there (run once per path, device, variant and process) is the one
`choose(name, device)` gives; None sends the caller down the torch operations. A self-check
compares every bit with the torch path's on check inputs (oracle.products: within the
reference's rounding bound, its products being float64 in another order); one that fails or
raises warns once and the next variant is tried.

The one setting, CONFORMANCE_FAST_PATHS (SETTING):
- unset, empty or `auto`: every path takes its default variants (`FastPath.variants`);
- `off`: every path takes the torch operations;
- a comma list of `PATH=VALUE` (a leading `auto` or `off` entry sets the paths not listed), VALUE
  one of `auto`, `off`, `triton` (the path's opt-in Triton variants, `FastPath.opt_in`) or one of
  its variants (a named variant that cannot run on the device warns), e.g.
  `emulated.pv=triton,oracle.products=off`.
A path whose `needs` include a path the setting turns off is off too (emulated.decode, scores and
pv run inside the running-state updates' scheme). The paths are PATHS below; `python -m conformance
fast-paths` prints each one's variant on a device. A retired per-path environment variable
(OLD_SETTINGS: BF16_FUSED_DECODE, EMULATED_TRITON_*, ORACLE_FUSED_*) set in the process is refused
with a one-line ValueError naming its SETTING entry.

Also the helpers the fast paths share: `interpreting()` (Triton's CPU interpreter asked for),
`have_triton()`, `same_bits()` and `check_records()` (records covering a key decode's inputs).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernel.record import LATENT_DIM

SETTING = "CONFORMANCE_FAST_PATHS"
AUTO, OFF, TRITON = "auto", "off", "triton"

# The fast paths: name -> what it replaces.
PATHS: dict[str, str] = {
    "peers.bf16-keys": "the torch-sdpa adapter's gather and bf16 dequantisation of the selected records (Triton; CUDA)",
    "emulated.decode": "the emulated kernel's K and V decode of a group of tiles (Triton)",
    "emulated.state": "the emulated kernel's running-state updates (Triton)",
    "emulated.scores": "the emulated kernel's QK accumulation (Triton)",
    "emulated.pv": "the emulated kernel's P', PV products, o and l in one kernel (CUDA DMMA; Triton opt-in)",
    "emulated.qk": "the emulated kernel's QK scores of a group of tiles from the records (CUDA DMMA; Triton opt-in)",
    "oracle.key-decode": "the oracle's float64 key decode of the selected records (Triton; CUDA)",
    "oracle.products": "the oracle's float64 products from the records, within the reference's rounding (CUDA DMMA; Triton opt-in)",
}

# Retired per-path variables: name -> (its path, {its value: the path's SETTING value}; other values: auto).
OLD_SETTINGS: dict[str, tuple[str, dict[str, str]]] = {
    "BF16_FUSED_DECODE": ("peers.bf16-keys", {"0": OFF}),
    "EMULATED_TRITON_DECODE": ("emulated.decode", {"0": OFF}),
    "EMULATED_TRITON_STATE": ("emulated.state", {"0": OFF}),
    "EMULATED_TRITON_PV": ("emulated.pv", {"0": OFF, "1": TRITON}),
    "EMULATED_TRITON_QK": ("emulated.qk", {"0": OFF, "1": TRITON}),
    "ORACLE_FUSED_DECODE": ("oracle.key-decode", {"0": OFF}),
    "ORACLE_FUSED_PRODUCTS": ("oracle.products", {"0": OFF, "1": TRITON, TRITON: TRITON, "cuda": "dmma"}),
}


@dataclass(frozen=True)
class FastPath:
    """One fast path.

    name: one of PATHS; variants: tried in order under `auto`; self_check(device, variant): True
    when the variant reproduces the torch path on `device` (module docstring); eligible(device,
    variant): "" when the variant may run there, else why not; opt_in: variants tried only when
    the setting says `triton` (or names one); needs: paths the setting must not turn off."""

    name: str
    variants: tuple[str, ...]
    self_check: Callable[[torch.device, str], bool]
    eligible: Callable[[torch.device, str], str]
    opt_in: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()

    def values(self) -> tuple[str, ...]:
        """What the setting may give this path."""
        return tuple(dict.fromkeys((AUTO, OFF, *((TRITON,) if self.opt_in else ()), *self.variants, *self.opt_in)))


_REGISTRY: dict[str, FastPath] = {}
_CHECKED: dict[tuple[str, torch.device, str], bool] = {}  # self-check results: (path, device, variant) -> passed
_CHOSEN: dict[tuple[str, torch.device], str | None] = {}  # (path, device) -> the variant choose() gave last
_WARNED: set[tuple[str, torch.device, str]] = set()


def register(path: FastPath) -> FastPath:
    """Add `path` (its name one of PATHS) to the registry, replacing a path of that name; returns it."""
    if path.name not in PATHS:
        raise ValueError(f"unknown fast path {path.name!r}: add it to kernel.fastpath.PATHS")
    if not path.variants or len(set(path.variants + path.opt_in)) != len(path.variants + path.opt_in):
        raise ValueError(f"fast path {path.name!r}: variants {path.variants} and opt_in {path.opt_in} must be distinct and non-empty")
    unknown = [n for n in path.needs if n not in PATHS]
    if unknown:
        raise ValueError(f"fast path {path.name!r} needs unknown paths {unknown}")
    _REGISTRY[path.name] = path
    return path


def registered() -> dict[str, FastPath]:
    """The registered paths by name (a path registers when its module is imported)."""
    return dict(_REGISTRY)


@functools.lru_cache(maxsize=32)
def _parse(raw: str) -> tuple[str, dict[str, str]]:
    """(the default value, {path: value}) of a SETTING value; ValueError naming a bad entry."""
    default, values = AUTO, {}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        if "=" not in entry:
            if entry not in (AUTO, OFF):
                raise ValueError(f"{SETTING}: entry {entry!r} is not auto, off or PATH=VALUE (paths: {', '.join(PATHS)})")
            if values:
                raise ValueError(f"{SETTING}: entry {entry!r} sets every path: put it first")
            default = entry
            continue
        name, _, value = (part.strip() for part in entry.partition("="))
        if name not in PATHS:
            raise ValueError(f"{SETTING}: unknown fast path {name!r} in {entry!r} (paths: {', '.join(PATHS)})")
        if not value:
            raise ValueError(f"{SETTING}: entry {entry!r} has no value (auto, off, triton or a variant)")
        values[name] = value
    return default, values


def _refuse_old_settings() -> None:
    for old, (name, mapping) in OLD_SETTINGS.items():
        value = os.environ.get(old)
        if value is not None:
            new = mapping.get(value.strip().lower(), AUTO)
            raise ValueError(f"{old}={value} is no longer read: set {SETTING}={name}={new} instead (and unset {old})")


def setting(name: str) -> str:
    """What SETTING gives path `name`: auto, off, triton or one of its variants; ValueError for a
    bad setting (an old variable set, an unknown path or value)."""
    _refuse_old_settings()
    path = _path(name)
    default, values = _parse(os.environ.get(SETTING, ""))
    value = values.get(name, default)
    if value not in path.values():
        raise ValueError(f"{SETTING}: {name}={value!r}: use one of {', '.join(path.values())}")
    return value


def _path(name: str) -> FastPath:
    path = _REGISTRY.get(name)
    if path is None:
        known = ", ".join(_REGISTRY) or "none"
        raise ValueError(f"fast path {name!r} is not registered (registered: {known}; paths: {', '.join(PATHS)})")
    return path


def _device(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _warn(key: tuple[str, torch.device, str], text: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(text, stacklevel=4)


def _passes(path: FastPath, device: torch.device, variant: str) -> bool:
    key = (path.name, device, variant)
    if key not in _CHECKED:
        try:
            ok = bool(path.self_check(device, variant))
        except Exception as err:  # noqa: BLE001 - any failure means: not this variant
            _warn(key, f"fast path {path.name} ({variant}) unavailable on {device} ({type(err).__name__}: {err}); using the torch path")
            ok = False
        else:
            if not ok:
                _warn(
                    key,
                    f"fast path {path.name} ({variant}) differs from the torch path in its self-check on {device}; using the torch path",
                )
        _CHECKED[key] = ok
    return _CHECKED[key]


def switched_off(name: str) -> bool:
    """Whether SETTING turns path `name` off (read whether or not the path is registered yet)."""
    _refuse_old_settings()
    default, values = _parse(os.environ.get(SETTING, ""))
    return values.get(name, default) == OFF


def choose(name: str, device: torch.device | str) -> str | None:
    """The variant of path `name` to use on `device`: the first variant the setting allows that
    is eligible there now and whose self-check passed there (each run once per path, device,
    variant and process), None when the setting turns the path (or one it needs) off or none
    passes (module docstring). ValueError naming the problem for a bad setting or an
    unregistered path."""
    value = setting(name)
    path = _path(name)
    if value == OFF or any(switched_off(n) for n in path.needs):
        return None
    device = _device(device)
    if value == AUTO:
        candidates, named = path.variants, False
    elif value == TRITON and TRITON not in path.variants:
        candidates, named = path.opt_in, False
    else:
        candidates, named = (value,), True
    found = None
    for variant in candidates:
        why = path.eligible(device, variant)
        if why:
            if named:
                _warn((name, device, variant), f"{SETTING}: {name}={variant} cannot run on {device}: {why}; using the torch path")
            continue
        if _passes(path, device, variant):
            found = variant
            break
    _CHOSEN[(name, device)] = found
    return found


def chosen() -> dict[str, dict[str, str | None]]:
    """What choose() gave last in this process: path -> device -> variant."""
    out: dict[str, dict[str, str | None]] = {}
    for (name, device), variant in _CHOSEN.items():
        out.setdefault(name, {})[str(device)] = variant
    return out


def checked() -> dict[str, dict[str, dict[str, bool]]]:
    """The self-checks run in this process: path -> device -> variant -> passed."""
    out: dict[str, dict[str, dict[str, bool]]] = {}
    for (name, device, variant), ok in _CHECKED.items():
        out.setdefault(name, {}).setdefault(str(device), {})[variant] = ok
    return out


def self_check(name: str, device: torch.device | str, variant: str) -> bool:
    """Run path `name`'s self-check of `variant` on `device` now (not cached, no warning); False
    when it fails or raises. For `python -m conformance fast-paths --check` and tests."""
    path = _path(name)
    try:
        return bool(path.self_check(_device(device), variant))
    except Exception:  # noqa: BLE001 - a raising check is a failing one
        return False


def forget() -> None:
    """Forget every self-check result and choice of this process (tests that change the setting
    or patch a path's parts call it; the registry stays)."""
    _CHECKED.clear()
    _CHOSEN.clear()
    _WARNED.clear()


def interpreting() -> bool:
    """Whether Triton's CPU interpreter is asked for (TRITON_INTERPRET set and not 0)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def have_triton() -> bool:
    """Whether Triton is importable (looked up once per process)."""
    return importlib.util.find_spec("triton") is not None


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same floating-point bits everywhere, any NaN matching any NaN (NaN positions equal)."""
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}[a.element_size()]
    bits_a, bits_b = (torch.where(nan, 0.0, x).view(ints) for nan, x in ((nan_a, a), (nan_b, b)))
    return bool(torch.equal(nan_a, nan_b)) and bool(torch.equal(bits_a, bits_b))


# f32 scales of every class the check records decode each code under (normal, non-pow2, subnormal, +-0, <0, +-inf, NaN, extremes)
CHECK_SCALES = (
    1.0,
    2.0**-10,
    3.7e-5,
    1e-40,
    0.0,
    -0.0,
    -2.5,
    float("inf"),
    float("-inf"),
    float("nan"),
    3.4028235e38,
    2.0**-126,
    2.0**-149,
    448.0,
    2.0**7,
    -(2.0**-140),
    0.1,
)


def check_records(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat uint8 [1024, 656], slots int64 [1100]) covering a key decode's inputs, for its
    self-check: every code in every scale block under scales of every class (CHECK_SCALES), every
    bf16 rope bit pattern, masked slots (-1) in between (oracle.key_decode: f64 keys;
    kernel.peers.bf16_key_decode: bf16 keys)."""
    n = 1024
    pos = torch.arange(n * LATENT_DIM, dtype=torch.int64).view(n, LATENT_DIM)
    codes = ((pos * 37 + pos // LATENT_DIM) % 256).to(torch.uint8)  # every code in every block, rotating
    special = torch.tensor(CHECK_SCALES, dtype=torch.float32)
    scales = special[torch.arange(n * 4) % special.numel()].view(n, 4)
    rope = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(n, 64)  # all bf16 patterns
    flat = torch.cat((codes, scales.view(torch.uint8).view(n, 16), rope.view(torch.uint8).view(n, 128)), dim=1)
    slots = torch.arange(n, dtype=torch.int64).flip(0)
    slots = torch.cat((slots, torch.full((76,), -1, dtype=torch.int64)))[torch.randperm(n + 76, generator=torch.Generator().manual_seed(0))]
    return flat.to(device), slots.to(device)


__all__ = [
    "CHECK_SCALES",
    "OLD_SETTINGS",
    "PATHS",
    "SETTING",
    "FastPath",
    "check_records",
    "checked",
    "choose",
    "chosen",
    "forget",
    "have_triton",
    "interpreting",
    "register",
    "registered",
    "same_bits",
    "self_check",
    "setting",
    "switched_off",
]
