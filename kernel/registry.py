"""Backend catalogue: `resolve(name)` turns a kernel name into a `Backend` with the contract.

Built-in names: `emulated` (the gfx950 algorithm in torch, any device), `flydsl` (the FlyDSL
gfx950 kernel, MI355X only), `flashmla` (FlashMLA's Hopper sparse fp8 decode), `flashmla-prefill`
(FlashMLA's Hopper sparse prefill over bf16 KV), `torch-sdpa` (PyTorch's fused SDPA kernels),
`sglang-decode` (sglang's Triton MLA decode), `vllm-decode` (vLLM's Triton MLA decode), `vllm-sparse`
(vLLM's Triton bf16 sparse MLA). Any other name of
the form `package.module:attr` imports that attribute: either a `Backend`, or a plain callable
with the contract, which may carry attributes `profile` (the numerics profile it declares), `devices`
(device types), `max_heads`, `head_counts` and `limits`.

This module imports the backends (lazily, so a backend's optional dependencies load only when it
is named); no backend imports it.
"""

from __future__ import annotations

import importlib
import inspect

from kernel.backend import Backend, BackendUnavailable, gfx950_available
from kernel.contract import MAX_HEADS

BUILTIN_NAMES = (
    "emulated",
    "flydsl",
    "flydsl-isa",
    "flashmla",
    "flashmla-prefill",
    "torch-sdpa",
    "sglang-decode",
    "vllm-decode",
    "vllm-sparse",
)


def _wrap_external(spec: str, obj: object) -> Backend:
    """`obj` as a Backend: itself, or a plain callable with what its attributes declare (profile
    None when it declares none: the caller supplies one, or refuses it)."""
    if isinstance(obj, Backend):
        return obj
    if not callable(obj):
        raise BackendUnavailable(f"{spec} is a {type(obj).__name__}, not a callable kernel")
    try:
        params = inspect.signature(obj).parameters
        accepts_out = "out" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        accepts_out = False
    return Backend(
        name=spec,
        fn=obj,  # type: ignore[arg-type]
        profile=getattr(obj, "profile", None) or None,
        devices=tuple(getattr(obj, "devices", ("cpu", "cuda"))),
        max_heads=int(getattr(obj, "max_heads", MAX_HEADS)),
        head_counts=getattr(obj, "head_counts", None),
        accepts_out=bool(getattr(obj, "accepts_out", accepts_out)),
        bounded_index_reads=bool(getattr(obj, "bounded_index_reads", False)),
        batch_invariant=bool(getattr(obj, "batch_invariant", True)),
        limits=tuple(getattr(obj, "limits", ())),
    )


def _raised_at(err: BaseException) -> str:
    """" (FILE, line N)" of the innermost source frame that raised `err` (not importlib's own)."""
    import traceback

    skip = (__file__, importlib.__file__)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith("<") and f.filename not in skip]
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def resolve(name: str) -> Backend:
    """The backend called `name` (built-in or `package.module:attr`); BackendUnavailable says why not.

    The backend's `profile` is what the kernel declares (None for a callable that declares none);
    choosing the numerics a run judges by, an override included, is the caller's job
    (conformance.judging.target.build_target)."""
    if name == "emulated":
        from kernel.backends.emulated import emulated_backend

        backend = emulated_backend()
    elif name == "flydsl":
        from kernel.backends.flydsl.host import flydsl_backend

        backend = flydsl_backend()
    elif name == "flydsl-isa":
        from kernel.backends.flydsl_isa import flydsl_isa_backend

        backend = flydsl_isa_backend()
    elif name == "flashmla":
        from kernel.backends.flashmla import flashmla_backend

        backend = flashmla_backend()
    elif name == "flashmla-prefill":
        from kernel.backends.flashmla_prefill import flashmla_prefill_backend

        backend = flashmla_prefill_backend()
    elif name == "torch-sdpa":
        from kernel.backends.torch_sdpa import torch_sdpa_backend

        backend = torch_sdpa_backend()
    elif name == "sglang-decode":
        from kernel.backends.sglang_decode import sglang_decode_backend

        backend = sglang_decode_backend()
    elif name == "vllm-decode":
        from kernel.backends.vllm_decode import vllm_decode_backend

        backend = vllm_decode_backend()
    elif name == "vllm-sparse":
        from kernel.backends.vllm_sparse import vllm_sparse_backend

        backend = vllm_sparse_backend()
    elif name.startswith("isa:"):  # a compiled kernel on the ISA interpreter, per a launch spec (kernel/isa/contract_spec.py)
        from kernel.isa.contract_spec import isa_contract_backend

        backend = isa_contract_backend(name)
    elif ":" in name:
        module_name, _, attr = name.partition(":")
        if not module_name or not attr:
            raise BackendUnavailable(f"kernel {name!r}: expected package.module:attr with both parts non-empty")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise BackendUnavailable(f"cannot import {module_name!r} for kernel {name!r}: {err}{_raised_at(err)}") from err
        except SyntaxError as err:
            raise BackendUnavailable(
                f"cannot import {module_name!r} for kernel {name!r}: syntax error in {err.filename}, line {err.lineno}: {err.msg}"
            ) from err
        except Exception as err:  # noqa: BLE001 - any failure while importing the user's module is a usage error
            raise BackendUnavailable(
                f"cannot import {module_name!r} for kernel {name!r}: {type(err).__name__} at import: {err}{_raised_at(err)}"
            ) from err
        try:
            obj = getattr(module, attr)
        except AttributeError as err:
            raise BackendUnavailable(f"module {module_name!r} has no attribute {attr!r}") from err
        return _wrap_external(name, obj)
    else:
        raise BackendUnavailable(f"unknown kernel {name!r}: use one of {', '.join(BUILTIN_NAMES)} or package.module:attr")
    return backend


def default_kernel_name() -> str:
    """The suite's default kernel for this machine: `flydsl` on gfx950, else `emulated`."""
    return "flydsl" if gfx950_available() else "emulated"
