"""The one call skeleton of the peer adapters: a `PeerAdapter` (load / new_state / support /
prepare, with a `PreparedCall` that runs the bare kernel and maps its outputs), the backend built
from it (`backend_from_adapter`), a contract call through it (`run_peer`) and the bench's bare
kernel call (`bare_call`).

A contract call is:

    info, early = begin_call(...)                # host validation; n_q == 0 or no heads: early result
    engine = adapter.load()                      # when the caller holds none (a Backend holds one)
    call = adapter.prepare(engine, state, ...)   # the kernel's inputs, from the state kept between calls
    call.run()                                   # the kernel's launches only
    out, lse = call.finish(out, return_lse)      # the contract's outputs from the kernel's

An engine is what `load` imports and finds out once (the engine's modules, the device's SM count):
a small frozen dataclass, so tests pass fakes. A state is what a serving engine keeps between
calls (index layouts, the dequantised cache, the padded q, scheduler metadata); None builds
everything per call, with the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import torch

from kernel.backend import Backend
from kernel.contract import CallInfo, begin_call


@dataclass(frozen=True)
class BareRow:
    """The bench's row of an adapter's bare kernel (its launches on inputs prepared beforehand).

    suffix: appended to the kernel's name for the row id (":h64-kernel", ":bare-kernel");
    heads: the heads the bare kernel runs (FlashMLA's native 64: a fresh q of that many heads),
        None: the call's own q;
    label, note: the row's label and note in the bench's table."""

    suffix: str
    heads: int | None
    label: str
    note: str


@dataclass(frozen=True)
class Declaration:
    """What an adapter's Backend declares (kernel.backend.Backend's fields of the same names), and
    its rows in the bench: `label` (with `{heads}` for the call's H) and `note` of the adapter's
    row ("" : the name, no note), `bare` its bare-kernel row (None: none)."""

    name: str
    profile: str
    limits: tuple[str, ...]
    bounded_index_reads: bool
    batch_invariant: bool
    devices: tuple[str, ...] = ("cuda",)
    max_heads: int = 16
    head_counts: tuple[int, ...] | None = None
    accepts_out: bool = True
    label: str = ""
    note: str = ""
    bare: BareRow | None = None


class PreparedCall(Protocol):
    """One call's kernel inputs, built by PeerAdapter.prepare."""

    def run(self) -> None:
        """The bare kernel: its launches only, on the buffers prepare built (outputs stay on the call)."""
        ...

    def finish(self, out: torch.Tensor | None, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The contract's (out bf16 [n_q, H, 512], filled in place when `out` is given; lse f32
        [n_q, H] or None) from the kernel's outputs."""
        ...


class PeerAdapter(Protocol):
    """An adapter presenting another project's kernel with the kernel contract."""

    declaration: Declaration

    def load(self) -> Any:
        """The engine (module docstring); BackendUnavailable naming every reason it cannot run here."""
        ...

    def new_state(self, engine: Any, *, kept: bool = True) -> Any:
        """What a serving engine keeps between calls. kept=False: only what does not derive from
        the inputs (FlashMLA's scheduler metadata), for a call prepared once and run many times."""
        ...

    def support(self, info: CallInfo) -> str:
        """'' or why this validated call cannot run here (device capability, a cache without rows)."""
        ...

    def prepare(
        self,
        engine: Any,
        state: Any,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        indices: torch.Tensor,
        indptr: torch.Tensor,
        softmax_scale: float,
        *,
        has_invalid: bool,
        out: torch.Tensor | None,
    ) -> PreparedCall:
        """The kernel's inputs for a call begin_call validated (n_q >= 1); state None: built per
        call. ContractError for what the kernel itself cannot take. q may hold more heads than
        the contract's 16 (the bare rows pass declaration.bare.heads)."""
        ...


def run_peer(
    adapter: PeerAdapter,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    engine: Any = None,
    state: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The adapter's kernel with the contract's signature: (out bf16 [n_q, H, 512], lse f32
    [n_q, H] or None). Validates the call (ContractError), returns begin_call's early result
    where there is one, loads the engine when `engine` is None, then prepare -> run -> finish;
    out= is filled in place and returned. state: kept between calls (None: built per call)."""
    _, early = begin_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    if early is not None:
        return early
    if engine is None:
        engine = adapter.load()
    call = adapter.prepare(engine, state, q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, out=out)
    call.run()
    return call.finish(out, return_lse)


def backend_from_adapter(adapter: PeerAdapter) -> Backend:
    """The adapter's Backend: its engine loaded now (BackendUnavailable with the reason where it
    cannot run), a state kept for every call, and what its declaration says."""
    engine = adapter.load()
    state = adapter.new_state(engine)
    d = adapter.declaration
    return Backend(
        name=d.name,
        fn=partial(run_peer, adapter, engine=engine, state=state),
        profile=d.profile,
        devices=d.devices,
        max_heads=d.max_heads,
        head_counts=d.head_counts,
        accepts_out=d.accepts_out,
        bounded_index_reads=d.bounded_index_reads,
        batch_invariant=d.batch_invariant,
        extra_support=adapter.support,
        limits=d.limits,
    )


def bare_call(
    adapter: PeerAdapter,
    engine: Any,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
) -> Callable[[], None]:
    """The bare kernel on inputs prepared once (state new_state(engine, kept=False), has_invalid
    False): the prepared call's `run`, which the bench times."""
    call = adapter.prepare(
        engine, adapter.new_state(engine, kept=False), q, kv_cache, indices, indptr, softmax_scale, has_invalid=False, out=None
    )
    return call.run


__all__ = ["BareRow", "Declaration", "PeerAdapter", "PreparedCall", "backend_from_adapter", "bare_call", "run_peer"]
