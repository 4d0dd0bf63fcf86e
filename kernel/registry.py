"""Backend registry: `resolve(name)` turns a kernel name into a callable with the contract.

Built-in names: `emulated` (the gfx950 algorithm in torch, any device), `flydsl` (the FlyDSL
gfx950 kernel, MI355X only), `flashmla` (FlashMLA's Hopper sparse fp8 decode). Any other name of
the form `package.module:attr` imports that attribute: either a `Backend`, or a plain callable
with the contract, which may carry attributes `profile` (numerics profile name), `devices`
(device types), `max_heads`, `head_counts` and `limits`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernel.contract import MAX_HEADS, CallInfo, ContractError, KernelFn, Support, validate_call

BUILTIN_NAMES = ("emulated", "flydsl", "flashmla")


class BackendUnavailable(RuntimeError):
    """The named backend cannot run here; the message says why (no device, package missing, ...)."""


@dataclass(frozen=True)
class Backend:
    """A kernel with the contract plus what it declares about itself.

    profile: name of its numerics profile in `oracle.profiles`;
    devices: torch device types it runs on ("cpu", "cuda"; ROCm devices are "cuda" in torch);
    max_heads / head_counts: the H it accepts (head_counts None = every H in 1..max_heads);
    accepts_out: whether it fills a preallocated `out=`;
    bounded_index_reads: True when an out-of-range index cannot fault the process (the suite
        only runs out-of-range-index cases on such backends);
    batch_invariant: True when a row's result does not depend on the other rows of the call
        (False, e.g., for split-KV schedules that depend on the batch: the suite then holds a
        row alone and in a batch to the bound instead of to the bit);
    extra_support: a further predicate on a validated call, returning the reason it is refused
        or "" when supported;
    limits: one line per limit, for reports.
    """

    name: str
    fn: KernelFn
    profile: str
    devices: tuple[str, ...]
    max_heads: int = MAX_HEADS
    head_counts: tuple[int, ...] | None = None
    accepts_out: bool = True
    bounded_index_reads: bool = False
    batch_invariant: bool = True
    extra_support: Callable[[CallInfo], str] | None = None
    limits: tuple[str, ...] = field(default_factory=tuple)

    def __call__(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        indices: torch.Tensor,
        indptr: torch.Tensor,
        softmax_scale: float,
        *,
        has_invalid: bool = False,
        return_lse: bool = False,
        out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        kwargs: dict[str, object] = {"has_invalid": has_invalid, "return_lse": return_lse}
        if out is not None:
            if not self.accepts_out:
                raise ContractError(f"backend {self.name!r} does not accept out=")
            kwargs["out"] = out
        return self.fn(q, kv_cache, indices, indptr, softmax_scale, **kwargs)

    def supports(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        indices: torch.Tensor,
        indptr: torch.Tensor,
        softmax_scale: float,
        *,
        has_invalid: bool = False,
        return_lse: bool = False,
        out: torch.Tensor | None = None,
    ) -> Support:
        """Whether this backend takes the call; the reason when it does not."""
        try:
            info = validate_call(
                q, kv_cache, indices, indptr, softmax_scale,
                has_invalid=has_invalid, return_lse=return_lse, out=out, max_heads=self.max_heads,
            )
        except ContractError as err:
            return Support(False, str(err))
        return self.supports_info(info)

    def supports_info(self, info: CallInfo) -> Support:
        """Backend limits on an already validated call."""
        if info.device.type not in self.devices:
            return Support(False, f"{self.name} runs on {'/'.join(self.devices)} devices, not {info.device.type}")
        if self.head_counts is not None and info.heads not in self.head_counts:
            return Support(False, f"{self.name} takes H in {self.head_counts}, got {info.heads}")
        if info.out_given and not self.accepts_out:
            return Support(False, f"{self.name} does not accept out=")
        if self.extra_support is not None:
            reason = self.extra_support(info)
            if reason:
                return Support(False, reason)
        return Support(True)


def _wrap_external(spec: str, obj: object, profile: str | None) -> Backend:
    if isinstance(obj, Backend):
        return obj if profile is None else Backend(**{**obj.__dict__, "profile": profile})
    if not callable(obj):
        raise BackendUnavailable(f"{spec} is a {type(obj).__name__}, not a callable kernel")
    declared = profile or getattr(obj, "profile", None)
    if not declared:
        raise BackendUnavailable(
            f"{spec} declares no numerics profile: give the callable a `profile` attribute "
            "or pass one (--profile NAME)"
        )
    try:
        params = inspect.signature(obj).parameters
        accepts_out = "out" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        accepts_out = False
    return Backend(
        name=spec,
        fn=obj,  # type: ignore[arg-type]
        profile=str(declared),
        devices=tuple(getattr(obj, "devices", ("cpu", "cuda"))),
        max_heads=int(getattr(obj, "max_heads", MAX_HEADS)),
        head_counts=getattr(obj, "head_counts", None),
        accepts_out=bool(getattr(obj, "accepts_out", accepts_out)),
        bounded_index_reads=bool(getattr(obj, "bounded_index_reads", False)),
        batch_invariant=bool(getattr(obj, "batch_invariant", True)),
        limits=tuple(getattr(obj, "limits", ())),
    )


def resolve(name: str, *, profile: str | None = None) -> Backend:
    """The backend called `name` (built-in or `package.module:attr`); BackendUnavailable says why not.

    `profile` overrides the numerics profile an external callable declares (or supplies one).
    """
    if name == "emulated":
        from kernel.emulated import emulated_backend

        backend = emulated_backend()
    elif name == "flydsl":
        from kernel.flydsl_host import flydsl_backend

        backend = flydsl_backend()
    elif name == "flashmla":
        from kernel.flashmla import flashmla_backend

        backend = flashmla_backend()
    elif ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise BackendUnavailable(f"cannot import {module_name!r} for kernel {name!r}: {err}") from err
        try:
            obj = getattr(module, attr)
        except AttributeError as err:
            raise BackendUnavailable(f"module {module_name!r} has no attribute {attr!r}") from err
        return _wrap_external(name, obj, profile)
    else:
        raise BackendUnavailable(
            f"unknown kernel {name!r}: use one of {', '.join(BUILTIN_NAMES)} or package.module:attr"
        )
    if profile is not None and profile != backend.profile:
        backend = Backend(**{**backend.__dict__, "profile": profile})
    return backend


def gfx950_available() -> bool:
    """True when torch sees a ROCm device whose architecture is gfx950."""
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None) is None:
        return False
    try:
        arch = torch.cuda.get_device_properties(0).gcnArchName
    except (RuntimeError, AttributeError):
        return False
    return arch.split(":")[0] == "gfx950"


def default_kernel_name() -> str:
    """The suite's default kernel for this machine: `flydsl` on gfx950, else `emulated`."""
    return "flydsl" if gfx950_available() else "emulated"
