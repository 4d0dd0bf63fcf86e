"""The kernel under test as the suite sees it: `Target` and `build_target`.

`build_target` resolves a kernel name (kernel.registry), the numerics profile a run judges it
by (the `profile` override, else what the kernel declares; loaded by oracle.profiles) and the
device, raising `TargetError` with one line naming the problem. Every front end (the pytest
plugin, `replay`, `fuzz`, `corpus minimise`) and the soundness campaign build their target here.

`judging(recipe, property_name, expect)` (a context manager) and `judges(expect)` (the same as a
decorator of a check taking `recipe` and `property_name`) make the recipe under judgement travel
with the failure: an exception leaving the block carries an immutable `JudgedRecipe`, which the
pytest plugin reads back from a failing test's exception (`judged_recipe`) to save a pending
corpus entry. Nothing is noted anywhere; a test that fails outside a judging block saves nothing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from conformance.judging.finding import attached

if TYPE_CHECKING:
    import torch

    from kernel.backend import Backend
    from oracle.profiles import NumericsProfile
    from strategies.recipe import Recipe

JUDGED_ATTR = "conformance_judged"  # the attribute of an exception holding its JudgedRecipe
_NOT_CARRIED = (KeyboardInterrupt, SystemExit, GeneratorExit)  # the session's, not a verdict's
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class JudgedRecipe:
    """The recipe a failure happened on, with its property and how a corpus entry made from it
    is judged on replay (expect: "conform" or "precondition")."""

    recipe: Recipe
    property_name: str
    expect: str = "conform"


@contextmanager
def judging(recipe: Recipe, property_name: str, expect: str = "conform") -> Iterator[JudgedRecipe]:
    """Run the block on `recipe`: an exception leaving it (but KeyboardInterrupt, SystemExit)
    carries JudgedRecipe(recipe, property_name, expect) as attribute JUDGED_ATTR, unless an inner
    block already gave it one (the innermost recipe is the one that failed)."""
    judged = JudgedRecipe(recipe, property_name, expect)
    try:
        yield judged
    except BaseException as err:
        if not isinstance(err, _NOT_CARRIED) and getattr(err, JUDGED_ATTR, None) is None:
            try:
                setattr(err, JUDGED_ATTR, judged)
            except (AttributeError, TypeError):  # an exception type that takes no attributes
                pass
        raise


def judges(expect: str = "conform") -> Callable[[F], F]:
    """Decorator of a check whose parameters include `recipe` and `property_name`: each call runs
    inside judging(recipe, property_name, expect)."""

    def decorate(check: F) -> F:
        signature = inspect.signature(check)

        @functools.wraps(check)
        def judged_check(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # pytest: this frame is plumbing
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            import torch  # here: this module's import stays light

            try:
                with judging(bound.arguments["recipe"], bound.arguments["property_name"], expect):
                    return check(*args, **kwargs)
            except torch.OutOfMemoryError as err:
                out_of_device_memory(err)
                raise  # not reached

        return judged_check  # type: ignore[return-value]

    return decorate


def out_of_device_memory(err: BaseException) -> None:
    """Drop an example whose kernel, oracle or bound ran out of device memory: on a GPU shared by
    many processes (a campaign runs a dozen) that is the machine's load, not a broken promise, so
    it is no failure. Inside a Hypothesis property the example is rejected (its reason noted:
    conformance.judging.rejections); elsewhere the test is skipped with the reason. Frees the
    process's cached blocks first."""
    import pytest
    import torch
    from hypothesis import reject
    from hypothesis.control import currently_in_test_context

    from conformance.judging import rejections

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if currently_in_test_context():
        rejections.note("the device ran out of memory")
        reject()
    pytest.skip(f"not run here: the device ran out of memory ({str(err)[:200]})")


def judged_recipe(err: BaseException | None) -> JudgedRecipe | None:
    """The JudgedRecipe a failure carries: on the exception itself, else on the first exception of
    a group (Hypothesis reports distinct failures together) or of its cause / context chain that
    has one; None when it carries none."""
    return attached(err, JUDGED_ATTR, JudgedRecipe)


@dataclass(frozen=True)
class Target:
    """The kernel under test, where it runs and the numerics it is judged by."""

    name: str
    backend: Backend
    device: torch.device
    profile: NumericsProfile

    def __repr__(self) -> str:
        """One line (Hypothesis prints the fixture in every falsifying example)."""
        return f"<kernel {self.name} on {self.device}, profile {self.profile.name}>"

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(repr(self))  # type: ignore[attr-defined]


class TargetError(RuntimeError):
    """The kernel under test cannot be used here; the message says why in one line."""


def build_target(name: str | None, *, profile: str | None = None, device: str | None = None, check_only: bool = False) -> Target:
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
    return Target(name=name, backend=backend, device=dev, profile=numerics)
