"""Host wrapper and support predicate of the FlyDSL gfx950 sparse MLA kernel.

`flydsl_backend()` returns the registry Backend "flydsl" (profile gfx950) or raises
BackendUnavailable saying why (flydsl not importable, or no gfx950 device). The wrapper
`flydsl_sparse_mla` has the contract's signature: it validates the call (kernel.contract), stages
q / out through aligned copies when their addresses or strides do not allow the kernel's 16-byte
(q) and 8-byte (out) accesses, allocates out / lse when needed, compiles lazily one launcher
per (H, has_invalid, return_lse), launches one 256-thread workgroup per query row on the current
stream, and returns (out, lse or None). Data-dependent preconditions (index range, scale values,
indptr monotonicity) are not checked here. flydsl is imported lazily, so this module imports on
any machine.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernel.backend import Backend, BackendUnavailable, gfx950_available
from kernel.contract import MAX_HEADS, CallInfo, validate_call
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES

NAME = "flydsl"
PROFILE = "gfx950"
FLYDSL_SERIES = "0.4."
THREADS_PER_ROW = 256

LIMITS = (
    "gfx950 (MI355X-class) ROCm devices only; H in 1..16",
    "every per-128 KV scale must be a power of two: QK uses its exponent as the E8M0 scale (a mantissa is dropped)",
    "a KV scale above 2^7 is clamped to 2^7 in P' = fp16(P * scale) (output stays finite but inexact)",
    "consumed indices must lie in [0, kv rows): KV reads are not bounded (index reads are)",
    "entries < 0 are masked with or without has_invalid; masked positions read a 656-byte zero record",
    "kv_cache must start at a 16-byte aligned address",
    "q / out whose base or strides break 16-byte (q) / 8-byte (out) alignment go through a staged copy",
    "one row's index slice must be shorter than 2^30 entries",
    "compiled and statically checked on CPU machines only; first executed on MI355X runners",
)

Launcher = Callable[..., Any]
LauncherKey = tuple[int, bool, bool]


# ================================================================ availability


def unavailable_reasons() -> list[str]:
    """Why the backend cannot run here (empty when it can): flydsl and the gfx950 device."""
    reasons = []
    if not gfx950_available():
        reasons.append(
            "no gfx950 device: torch sees no ROCm GPU whose architecture is gfx950 "
            "(the FlyDSL kernel runs only on MI355X-class gfx950 GPUs)"
        )
    try:
        import flydsl
    except ImportError as err:
        reasons.append(f"flydsl is not importable ({err}); install it with pip install 'flydsl>=0.4,<0.5'")
    else:
        version = str(getattr(flydsl, "__version__", ""))
        if not version.startswith(FLYDSL_SERIES):
            reasons.append(f"flydsl {version or '(unknown version)'} is installed; the kernel is written for flydsl 0.4.x")
    return reasons


def device_is_gfx950(device: torch.device) -> bool:
    """Whether `device` is a ROCm device of architecture gfx950."""
    if device.type != "cuda" or getattr(torch.version, "hip", None) is None:
        return False
    try:
        arch = torch.cuda.get_device_properties(device).gcnArchName
    except (RuntimeError, AttributeError, AssertionError):
        return False
    return arch.split(":")[0] == "gfx950"


def _extra_support(info: CallInfo) -> str:
    """Backend-specific refusal of a validated call ("" when supported)."""
    if info.device.type != "cuda":
        return f"flydsl runs on gfx950 ROCm devices, not {info.device.type}"
    if not device_is_gfx950(info.device):
        return f"flydsl runs on gfx950 devices; {info.device} is not one"
    return ""


def flydsl_backend() -> Backend:
    """The registry Backend of the FlyDSL gfx950 kernel; BackendUnavailable says why not."""
    reasons = unavailable_reasons()
    if reasons:
        raise BackendUnavailable("flydsl backend unavailable: " + "; ".join(reasons))
    return Backend(
        name=NAME,
        fn=flydsl_sparse_mla,
        profile=PROFILE,
        devices=("cuda",),
        max_heads=MAX_HEADS,
        accepts_out=True,
        bounded_index_reads=False,
        extra_support=_extra_support,
        limits=LIMITS,
    )


# ================================================================ launchers


_LAUNCHERS: dict[LauncherKey, Launcher] = {}
_LAUNCHER_LOCK = threading.Lock()


def _build_launcher(heads: int, has_invalid: bool, return_lse: bool) -> Launcher:
    from kernel.flydsl.gfx950 import build_launcher

    return build_launcher(heads, has_invalid, return_lse)


def get_launcher(heads: int, has_invalid: bool, return_lse: bool, builder: Callable[[int, bool, bool], Launcher] | None = None) -> Launcher:
    """The cached launcher of one configuration, built on first use (flydsl JIT-compiles it at
    its first launch and keeps it for the process)."""
    key = (int(heads), bool(has_invalid), bool(return_lse))
    with _LAUNCHER_LOCK:
        launcher = _LAUNCHERS.get(key)
        if launcher is None:
            launcher = (builder or _build_launcher)(*key)
            _LAUNCHERS[key] = launcher
    return launcher


def cached_launcher_keys() -> list[LauncherKey]:
    """Configurations with a launcher built in this process."""
    with _LAUNCHER_LOCK:
        return sorted(_LAUNCHERS)


def clear_launchers() -> None:
    """Drop every cached launcher (tests)."""
    with _LAUNCHER_LOCK:
        _LAUNCHERS.clear()


_ZERO_RECORDS: dict[torch.device, torch.Tensor] = {}


def zero_record(device: torch.device) -> torch.Tensor:
    """A 656-byte all-zero record on `device` (what masked positions read), one per device."""
    rec = _ZERO_RECORDS.get(device)
    if rec is None:
        rec = torch.zeros(RECORD_BYTES, dtype=torch.uint8, device=device)
        _ZERO_RECORDS[device] = rec
    return rec


# ================================================================ launch plan


@dataclass
class LaunchPlan:
    """Everything one launch needs. Addresses are device byte addresses; strides in elements.

    q_run / out_run are the tensors the kernel reads / writes (copies when staged);
    copy_back is set when out_run is a staging buffer whose contents go to `out` afterwards.
    """

    key: LauncherKey
    n_q: int
    q_run: torch.Tensor
    out: torch.Tensor
    out_run: torch.Tensor
    lse: torch.Tensor | None
    copy_back: bool
    q_staged: bool
    args: tuple
    kv_cache: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    zero: torch.Tensor | None


def _row_head_strides(t: torch.Tensor) -> tuple[int, int]:
    """(row, head) strides in elements; a size-1 dimension's stride is irrelevant and reads 0."""
    return (t.stride(0) if t.shape[0] > 1 else 0, t.stride(1) if t.shape[1] > 1 else 0)


def _aligned(t: torch.Tensor, elems: int) -> bool:
    """Base address and row/head strides allow `elems`-element (2 * elems bytes) accesses."""
    sr, sh = _row_head_strides(t)
    return t.data_ptr() % (2 * elems) == 0 and sr % elems == 0 and sh % elems == 0


def c_log2_of(softmax_scale: float) -> float:
    """softmax_scale * log2(e) in double; the launch passes it as f32 (RNE)."""
    return float(softmax_scale) * math.log2(math.e)


def plan_call(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    has_invalid: bool = False,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    zero: Callable[[torch.device], torch.Tensor] = zero_record,
) -> LaunchPlan:
    """Validate a call and lay out its launch (no launch, no device work beyond allocations).

    Raises ContractError (kernel.contract) for a call outside the contract and ValueError for a
    kv_cache whose base address is not 16-byte aligned (the DMA moves 16-byte pieces).
    """
    info = validate_call(
        q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out, max_heads=MAX_HEADS
    )
    n_q, heads = info.n_q, info.heads
    device = q.device
    if kv_cache.numel() and kv_cache.data_ptr() % 16 != 0:
        raise ValueError("flydsl: kv_cache must start at a 16-byte aligned address (records are copied in 16-byte pieces)")
    if out is None:
        out_final = torch.empty(n_q, heads, LATENT_DIM, dtype=torch.bfloat16, device=device)
    else:
        out_final = out
    lse = torch.empty(n_q, heads, dtype=torch.float32, device=device) if return_lse else None
    key = (heads, bool(has_invalid), bool(return_lse))
    if n_q == 0:
        return LaunchPlan(key, 0, q, out_final, out_final, lse, False, False, (), kv_cache, indices, indptr, None)

    # q is read 8 bf16 (16 bytes) at a time, out written 4 bf16 (8 bytes) at a time.
    q_staged = not _aligned(q, 8)
    q_run = torch.empty(n_q, heads, HEAD_DIM, dtype=q.dtype, device=device) if q_staged else q
    if q_staged:
        q_run.copy_(q)
    copy_back = not _aligned(out_final, 4)
    out_run = torch.empty(n_q, heads, LATENT_DIM, dtype=torch.bfloat16, device=device) if copy_back else out_final
    sq, sqh = _row_head_strides(q_run)
    so, soh = _row_head_strides(out_run)
    zero_rec = zero(device)
    args = (
        q_run.data_ptr(),
        kv_cache.data_ptr(),
        indices.data_ptr(),
        indptr.data_ptr(),
        out_run.data_ptr(),
        lse.data_ptr() if lse is not None else 0,
        zero_rec.data_ptr(),
        n_q,
        sq,
        sqh,
        so,
        soh,
        indices.numel() * 4,
        c_log2_of(softmax_scale),
    )
    return LaunchPlan(key, n_q, q_run, out_final, out_run, lse, copy_back, q_staged, args, kv_cache, indices, indptr, zero_rec)


def _current_stream(device: torch.device) -> Any:
    return torch.cuda.current_stream(device)


def run_plan(
    plan: LaunchPlan, launcher_for: Callable[..., Launcher] = get_launcher, stream_for: Callable[[torch.device], Any] = _current_stream
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch a plan (nothing for n_q == 0) and return (out, lse or None)."""
    if plan.n_q == 0:
        return plan.out, plan.lse
    launcher = launcher_for(*plan.key)
    device = plan.q_run.device
    if device.type == "cuda":
        with torch.cuda.device(device):
            launcher(*plan.args, stream=stream_for(device))
    else:
        launcher(*plan.args, stream=stream_for(device))
    if plan.copy_back:
        plan.out.copy_(plan.out_run)
    return plan.out, plan.lse


def _require_gfx950(device: torch.device) -> None:
    if not device_is_gfx950(device):
        raise ValueError(f"flydsl: the kernel runs on gfx950 ROCm devices; the tensors are on {device}")


def flydsl_sparse_mla(
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
    """Sparse MLA forward over fp8_ds_mla records on gfx950 (the kernel contract's signature).

    q bf16 [n_q, H, 576] (1 <= H <= 16), kv_cache uint8 [..., 656], indices int32 CSR stream,
    indptr int32 [n_q + 1]; returns out bf16 [n_q, H, 512] (the given `out` when passed) and lse
    f32 [n_q, H] (natural log, -inf for an empty row) when return_lse, else None.
    """
    plan = plan_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    if plan.n_q:
        _require_gfx950(q.device)
    return run_plan(plan)
