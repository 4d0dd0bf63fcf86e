"""What a kernel under test is: `Backend` (a callable with the contract plus its declarations),
`BackendUnavailable`, and the gfx950 device probe. Backends import this module; the catalogue of
backends (`kernel.registry`) imports the backends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernel.contract import MAX_HEADS, CallInfo, ContractError, KernelFn, Support, validate_call


class BackendUnavailable(RuntimeError):
    """The named backend cannot run here; the message says why (no device, package missing, ...)."""


@dataclass(frozen=True)
class Backend:
    """A kernel with the contract plus what it declares about itself.

    profile: its numerics profile: a shipped profile's name, a path to a profile file, or a
        profile object (oracle.profiles.load_profile resolves each);
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
    profile: object
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
                q,
                kv_cache,
                indices,
                indptr,
                softmax_scale,
                has_invalid=has_invalid,
                return_lse=return_lse,
                out=out,
                max_heads=self.max_heads,
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


def gfx950_available() -> bool:
    """True when torch sees a ROCm device whose architecture is gfx950."""
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None) is None:
        return False
    try:
        arch = torch.cuda.get_device_properties(0).gcnArchName
    except (RuntimeError, AttributeError):
        return False
    return arch.split(":")[0] == "gfx950"
