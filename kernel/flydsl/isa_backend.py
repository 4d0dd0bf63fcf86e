"""The `flydsl-isa` backend: the project's compiled FlyDSL gfx950 kernel, executed on the ISA
interpreter on CPU tensors (profile gfx950).

The call is laid out by the FlyDSL host wrapper itself (kernel.flydsl.host.plan_call:
validation, q / out staging, out / lse allocation, the zero record, the kernarg values), then
the configuration's compiled ISA (kernel.flydsl.isa_cache, cached by kernel source hash) runs one
256-thread workgroup per query row. Checker findings (out-of-bounds access, LDS race, DMA read
before its wait, uninitialized register read) raise CheckFailed by default;
FLYDSL_ISA_CHECKS=collect|off changes that.
"""

from __future__ import annotations

import os
import threading

import torch

from kernel.backend import Backend, BackendUnavailable
from kernel.contract import MAX_HEADS, CallInfo

NAME = "flydsl-isa"
PROFILE = "gfx950"
MAX_TOTAL_KEYS = 8192  # index entries per call (interpreter speed; see docs/reference/measurements.md)
MAX_ROWS = 256  # query rows (workgroups) per call
LIMITS = (
    "the compiled FlyDSL gfx950 kernel on the ISA interpreter (CPU tensors); H in 1..16",
    f"slow (one workgroup per query row, interpreted): calls with more than {MAX_TOTAL_KEYS} index entries or {MAX_ROWS} rows are refused",
    "MFMA f32 results are formed exactly (float64) and rounded once; v_exp/v_log/v_rcp correctly rounded",
    "an access outside every argument tensor (e.g. an out-of-range index) raises CheckFailed instead of reading memory",
    "kv_cache must start at a 16-byte aligned address",
)

_KERNELS: dict[tuple, object] = {}
_LOCK = threading.Lock()
last_stats: list = []  # LaunchStats of the most recent call (measurements)


def get_kernel(heads: int, has_invalid: bool, return_lse: bool):
    """The decoded IsaKernel of a configuration (compiled and cached on first use)."""
    from kernel.flydsl.isa_cache import kernel_asm
    from kernel.isa import ops_matrix
    from kernel.isa.launch import IsaKernel

    cfg = (int(heads), bool(has_invalid), bool(return_lse))
    key = cfg + (ops_matrix.F8_LAYOUT,)  # the MFMA operand layout is fixed at decode time
    with _LOCK:
        k = _KERNELS.get(key)
        if k is None:
            k = IsaKernel.from_asm(kernel_asm(*cfg))
            _KERNELS[key] = k
    return k


def flydsl_isa_sparse_mla(
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
    """The kernel contract's call, executed instruction by instruction (CPU tensors)."""
    from kernel.flydsl.host import plan_call

    plan = plan_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    if plan.n_q == 0:
        return plan.out, plan.lse
    kern = get_kernel(*plan.key)
    buffers = [
        (plan.q_run, "q"),
        (plan.kv_cache, "kv_cache"),
        (plan.indices, "indices"),
        (plan.indptr, "indptr"),
        (plan.out_run, "out"),
        (plan.lse, "lse"),
        (plan.zero, "zero record"),
    ]
    stats = kern.launch(plan.n_q, plan.args, buffers, checks=os.environ.get("FLYDSL_ISA_CHECKS", "raise"))
    last_stats[:] = [stats]
    if plan.copy_back:
        plan.out.copy_(plan.out_run)
    return plan.out, plan.lse


def _extra_support(info: CallInfo) -> str:
    if info.n_indices > MAX_TOTAL_KEYS or info.n_q > MAX_ROWS:
        return (
            f"{NAME} takes at most {MAX_TOTAL_KEYS} index entries and {MAX_ROWS} query rows "
            f"(interpreter speed); got {info.n_indices} and {info.n_q}"
        )
    return ""


def flydsl_isa_backend() -> Backend:
    """The registry Backend `flydsl-isa`; BackendUnavailable when flydsl (needed to compile the
    kernel's ISA) is missing and no cached ISA exists."""
    try:
        import flydsl  # noqa: F401
    except ImportError as err:
        from kernel.flydsl.isa_cache import cache_root, source_hash

        if not (cache_root() / source_hash()).exists():
            raise BackendUnavailable(f"flydsl-isa needs flydsl to compile the kernel's ISA ({err}) and no cached ISA exists") from err
    return Backend(
        name=NAME,
        fn=flydsl_isa_sparse_mla,
        profile=PROFILE,
        devices=("cpu",),
        max_heads=MAX_HEADS,
        accepts_out=True,
        bounded_index_reads=True,
        extra_support=_extra_support,
        limits=LIMITS,
    )
