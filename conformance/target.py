"""The kernel under test as the suite sees it: `SuiteTarget` and `build_target`.

`build_target` resolves a kernel name (kernel.registry), the numerics profile a run judges it
by (the `profile` override, else what the kernel declares; loaded by oracle.profiles) and the
device, raising `TargetError` with one line naming the problem. Every front end (the pytest
plugin, `replay`, `fuzz`, `corpus minimise`) and the soundness campaign build their target here.

`SuiteTarget.judged` holds what the checks last drew (the recipe, property and expectation):
the checks note each recipe before judging it, and the pytest plugin saves the noted recipe of a
failing test as a pending corpus entry. Each target owns its own note; nothing is global.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from kernel.backend import Backend
    from oracle.profiles import NumericsProfile
    from strategies.recipe import Recipe


@dataclass
class JudgedRecipe:
    """The recipe the checks are judging (None when nothing is noted)."""

    recipe: Recipe | None = None
    property_name: str = ""
    expect: str = "conform"

    def note(self, recipe: Recipe, property_name: str, expect: str = "conform") -> None:
        """Note the recipe about to be judged (the last one noted is captured if the test fails)."""
        self.recipe, self.property_name, self.expect = recipe, property_name, expect

    def clear(self) -> None:
        self.recipe = None


@dataclass(frozen=True)
class SuiteTarget:
    """The kernel under test, where it runs, the numerics it declares and the recipe in judgement."""

    name: str
    backend: Backend
    device: torch.device
    profile: NumericsProfile
    judged: JudgedRecipe = field(default_factory=JudgedRecipe, compare=False)

    def __repr__(self) -> str:
        """One line (Hypothesis prints the fixture in every falsifying example)."""
        return f"<kernel {self.name} on {self.device}, profile {self.profile.name}>"

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(repr(self))  # type: ignore[attr-defined]


class TargetError(RuntimeError):
    """The kernel under test cannot be used here; the message says why in one line."""


def build_target(name: str | None, *, profile: str | None = None, device: str | None = None, check_only: bool = False) -> SuiteTarget:
    """Resolve a kernel (None: the machine's default) with its numerics profile and device;
    TargetError names the problem (unknown kernel, unavailable backend, unknown profile, bad or
    unsupported device). `check_only`: validate without selecting the GPU (no CUDA context is
    created in this process)."""
    import torch

    from kernel.backend import BackendUnavailable
    from kernel.registry import default_kernel_name, resolve
    from oracle.profiles import load_profile

    name = name or default_kernel_name()
    try:
        backend = resolve(name)
    except BackendUnavailable as err:
        raise TargetError(f"kernel {name!r} unavailable: {err}") from err
    declared = backend.profile if profile is None else profile
    if declared is None:
        raise TargetError(
            f"kernel {name!r} unavailable: {name} declares no numerics profile: "
            "give the callable a `profile` attribute or pass one (--profile NAME)"
        )
    try:
        numerics = load_profile(declared)
    except (KeyError, TypeError, ValueError, OSError) as err:  # ProfileError is a ValueError
        raise TargetError(f"numerics profile of kernel {name!r}: {err.args[0] if err.args else err}") from err
    wanted = device
    if wanted is None:
        wanted = "cuda" if torch.cuda.is_available() and "cuda" in backend.devices else "cpu"
    try:
        dev = torch.device(wanted)
    except RuntimeError as err:
        raise TargetError(f"bad device {wanted!r}: {err}") from err
    if dev.type not in backend.devices:
        raise TargetError(f"kernel {name!r} runs on {backend.devices}, not {dev.type}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise TargetError(f"device {wanted!r} asked for but torch sees no GPU")
        if not check_only:
            torch.cuda.set_device(dev.index or 0)
    return SuiteTarget(name=name, backend=backend, device=dev, profile=numerics)
