"""Namespaces in the shared store: whose examples and failures a key holds.

Hypothesis replays every stored example of a test before generating new ones, and deletes one
that no longer fails: a runner whose kernel is correct would empty a store of another kernel's
failures, and a runner of another Hypothesis version deletes entries stored in another format.
So examples live under a prefix per (kernel, numerics profile, device architecture, Hypothesis
version) (`Namespace.examples_prefix`); failures and leases, plain JSON recipes that any
version replays, per (kernel, numerics profile) (`Namespace.failures_prefix`).

The kernel is named as the fleet names it (`fleet_kernel_id`): built-in names and
`module:attr` as given, a file-path spec by its path relative to the working folder (each
runner's checkout lies elsewhere; the relative path is what they share). The architecture
(`device_architecture`) is `sm_90` for a CUDA GPU, the gfx name for a ROCm one (`gfx950`),
`cpu-<machine>` on the CPU.
"""

from __future__ import annotations

import hashlib
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = "conformance:"
_UNSAFE = re.compile(r"[^A-Za-z0-9._/@+=-]+")


def _part(text: str) -> str:
    return _UNSAFE.sub("-", str(text).strip()) or "-"


def fleet_kernel_id(spec: str) -> str:
    """The kernel's name in the store (module docstring)."""
    text = str(spec).strip()
    module, sep, attr = text.rpartition(":")
    if sep and module.endswith(".py") and not text.startswith("isa:"):
        path = Path(module).expanduser()
        try:
            shown = path.resolve().relative_to(Path.cwd().resolve()).as_posix()
        except ValueError:
            shown = path.name
        return f"{shown}:{attr}"
    return text


def device_architecture(device: Any) -> str:
    """`sm_XY`, the ROCm gfx name, or `cpu-<machine>` for a torch device (module docstring)."""
    kind = getattr(device, "type", str(device))
    if kind != "cuda":
        return f"{kind}-{platform.machine() or 'unknown'}"
    import torch

    index = getattr(device, "index", None) or 0
    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        return str(getattr(props, "gcnArchName", "gfx")).split(":")[0]
    return f"sm_{props.major}{props.minor}"


@dataclass(frozen=True)
class Namespace:
    """What one runner's keys are about: kernel, numerics profile, architecture, Hypothesis version."""

    kernel: str
    profile: str
    architecture: str
    hypothesis: str

    @property
    def examples_prefix(self) -> bytes:
        """The key prefix of this namespace's Hypothesis examples."""
        parts = (self.kernel, self.profile, self.architecture, f"hypothesis-{self.hypothesis}")
        return (ROOT + "examples:" + ":".join(_part(p) for p in parts) + ":").encode()

    @property
    def failures_prefix(self) -> str:
        """The key prefix of this namespace's inbox and leases (no architecture, no Hypothesis version)."""
        return failures_prefix(self.kernel, self.profile)

    def describe(self) -> str:
        return f"kernel {self.kernel}, numerics profile {self.profile}, {self.architecture}, Hypothesis {self.hypothesis}"


def failures_prefix(kernel: str, profile: str) -> str:
    """The key prefix of the inbox and leases of (kernel, numerics profile)."""
    return f"{ROOT}failures:{_part(kernel)}:{_part(profile)}:"


def group_digest(group: tuple[str, str] | list[str]) -> str:
    """A short stable name for a failure group (conformance.judging.finding.Finding.group)."""
    return hashlib.sha256("\x00".join(group).encode()).hexdigest()[:16]


def namespace_for(kernel_spec: str, profile_name: str, device: Any) -> Namespace:
    """The namespace of a target (its kernel spec, numerics profile name, device)."""
    import hypothesis

    return Namespace(fleet_kernel_id(kernel_spec), profile_name, device_architecture(device), hypothesis.__version__)


def suite_namespace(kernel: str | None, profile: str | None, device: str | None) -> Namespace:
    """The namespace of the pytest session's target (the options as given; the default kernel when
    none is named); conformance.judging.target.TargetError when it cannot be built."""
    from conformance.judging.target import build_target

    target = build_target(kernel, profile=profile, device=device, check_only=True)
    return namespace_for(kernel or target.name, target.profile.name, target.device)
