"""The one call skeleton of the peer adapters: a `PeerAdapter` (load / new_state / support /
prepare, with a `PreparedCall` that runs the bare kernel and maps its outputs), the call's
arguments it prepares from (`CallArgs`), the backend built from it (`backend_from_adapter`), a
contract call through it (`run_peer`) and the bench's bare kernel call (`bare_call`); what the
adapters share besides: `TritonAdapter` (the refusals of the adapters to Triton kernels for NVIDIA
GPUs) and `profile_file` (a numerics profile shipped with the oracle).

A contract call is:

    info, early = begin_call(q, kv_cache, indices, indptr, softmax_scale, ...)  # host validation; n_q == 0: early result
    engine = adapter.load()                            # when the caller holds none (a Backend holds one)
    args = CallArgs(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, out=out)
    call = adapter.prepare(engine, state, args)        # the kernel's inputs, from the state kept between calls
    call.run()                                         # the kernel's launches only
    out, lse = call.finish(out, return_lse)            # the contract's outputs from the kernel's

An engine is what `load` imports and finds out once (the engine's modules, the device's SM count):
a small frozen dataclass, so tests pass fakes. A state is what a serving engine keeps between
calls (index layouts, the dequantised cache, the padded q, scheduler metadata); None builds
everything per call, with the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import torch

from kernel.backend import Backend, BackendUnavailable
from kernel.contract import CallInfo, begin_call
from kernel.engines import cuda_reason
from kernel.record import RECORD_BYTES

# The numerics profiles shipped with the oracle (oracle/profile_files/), reached by path: the
# kernel package does not import the oracle.
PROFILE_DIR = Path(__file__).resolve().parents[2] / "oracle" / "profile_files"


def profile_file(file_name: str) -> str:
    """The path (str) of numerics profile `file_name` in oracle/profile_files/, as a Backend's `profile`."""
    return str(PROFILE_DIR / file_name)


@dataclass(frozen=True)
class CallArgs:
    """The arguments of one contract call (kernel.contract), as begin_call validated them.

    q: bf16 [n_q, H, 576] (latent 512 then rope 64), 1 <= H <= 16 (a bare row may pass more
        heads), last dim contiguous, row and head strides free;
    kv_cache: uint8 [..., 656] contiguous, fp8_ds_mla records addressed as flat rows (byte offset
        row * 656; may exceed 4 GiB);
    indices: int32 1-D contiguous, the CSR stream of cache rows;
    indptr: int32 [n_q + 1] contiguous: row q attends to indices[indptr[q] : indptr[q + 1]] (a
        negative length is empty);
    softmax_scale: a finite real number, the scores s = softmax_scale * (q . K) (natural log
        domain), as the caller passed it;
    has_invalid: entries < 0 are masked; False: every consumed entry is a valid row;
    out: bf16 [n_q, H, 512] to fill in place (non-overlapping row/head strides, last dim
        contiguous), or None."""

    q: torch.Tensor
    kv_cache: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    softmax_scale: float
    has_invalid: bool = False
    out: torch.Tensor | None = None

    @property
    def kv_rows(self) -> int:
        """The cache's records (656 bytes each)."""
        return self.kv_cache.numel() // RECORD_BYTES


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

    @classmethod
    def on_own_heads(
        cls,
        name: str,
        profile: str,
        limits: tuple[str, ...],
        *,
        bounded_index_reads: bool,
        batch_invariant: bool,
        note: str,
        bare_note: str,
    ) -> Declaration:
        """The declaration of an adapter whose kernel runs the call's own q (no head padding), with
        the field defaults: its bench row '{name} (adapter)' with `note`, its bare-kernel row
        ':bare-kernel' on the call's q, '{name} (bare kernel)' with `bare_note`."""
        return cls(
            name=name,
            profile=profile,
            limits=limits,
            bounded_index_reads=bounded_index_reads,
            batch_invariant=batch_invariant,
            label=f"{name} (adapter)",
            note=note,
            bare=BareRow(":bare-kernel", None, f"{name} (bare kernel)", bare_note),
        )


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

    def prepare(self, engine: Any, state: Any, args: CallArgs) -> PreparedCall:
        """The kernel's inputs for a call begin_call validated (n_q >= 1); state None: built per
        call. ContractError for what the kernel itself cannot take. args.q may hold more heads
        than the contract's 16 (the bare rows pass declaration.bare.heads)."""
        ...


class TritonAdapter:
    """The refusals shared by the adapters to Triton kernels for NVIDIA GPUs, by their
    declaration's name (kernel.engines.cuda_reason: a ROCm torch, no CUDA device, no Triton):
    `support` refuses a CUDA call there, `load` raises BackendUnavailable before `load_engine`
    (the subclass's own import) runs. The rest of PeerAdapter is the subclass's."""

    declaration: Declaration

    def load(self) -> Any:
        """The engine (load_engine) where cuda_reason finds nothing against this kernel; else
        BackendUnavailable with that reason, before anything is imported."""
        reason = cuda_reason(self.declaration.name)
        if reason:
            raise BackendUnavailable(reason)
        return self.load_engine()

    def load_engine(self) -> Any:
        """The engine, imported where CUDA and Triton are (BackendUnavailable naming why not)."""
        raise NotImplementedError

    def support(self, info: CallInfo) -> str:
        """cuda_reason for a CUDA call ('' where it can run); '' for a call on another device
        (the declaration's devices refuse it)."""
        return cuda_reason(self.declaration.name) if info.device.type == "cuda" else ""


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
    call = adapter.prepare(engine, state, CallArgs(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, out=out))
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
    call = adapter.prepare(engine, adapter.new_state(engine, kept=False), CallArgs(q, kv_cache, indices, indptr, softmax_scale))
    return call.run


__all__ = [
    "PROFILE_DIR",
    "BareRow",
    "CallArgs",
    "Declaration",
    "PeerAdapter",
    "PreparedCall",
    "TritonAdapter",
    "backend_from_adapter",
    "bare_call",
    "profile_file",
    "run_peer",
]
