"""Other projects' engine packages, imported for their kernels (the peer adapters) and writers
(kernel.writers.sglang): importing the kernel files from sglang's and vLLM's packages, and the
CUDA check of their Triton kernels.

Importing (no numerics touched; see load_sglang / load_vllm):
- sglang (wheel `sglang==0.5.10.post1`, installed with --no-deps): a plain import of
  `sglang.srt.layers.attention.*` runs `sglang/__init__.py` (the frontend language: pydantic,
  pybase64) and the kernel file's `from sglang.srt.utils import is_hip` runs
  `sglang/srt/utils/common.py` (orjson, pybase64, starlette, ...). Where that import fails the
  package is registered by its path without its __init__ and `sglang.srt.utils` is a module
  holding only `is_hip()` = `torch.version.hip is not None` (sglang's own definition); the kernel
  files are sglang's, unchanged.
- vLLM (0.33.0, Python files only: its compiled libraries are built for torch 2.14): the kernel
  modules import `vllm.platforms` (current_platform), whose CUDA platform imports the compiled
  `vllm._C_stable_libtorch`. Where that import fails, an empty module stands in for it: the
  Triton kernels call none of its ops. The kernel files take `triton` and `tl` from
  `vllm.triton_utils`, which hands out placeholder modules when vLLM's own import check disabled
  Triton (`HAS_TRITON` False: `triton.backends` not importable, or not exactly one active
  driver); a kernel on placeholders fails every launch (`module 'triton' has no attribute
  'next_power_of_2'`, `'function' object is not subscriptable`), so load_vllm refuses it with
  that cause (vllm_triton_reason) instead.
- sglang 0.5.10's kernel files import `triton` directly: it has no such switch.

Also int32_chunks: launches whose element offsets stay below 2^31, as the engines' Triton
kernels form them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from types import ModuleType

import torch

from kernel.backend import BackendUnavailable
from kernel.contract import INT32_MAX

SGLANG_WHEEL = "sglang==0.5.10.post1"
VLLM_FILES = "vLLM 0.33.0's Python files (the wheel without its compiled libraries) on PYTHONPATH"
VLLM_OPS = "vllm._C_stable_libtorch"  # the compiled ops library vllm.platforms.cuda imports
VLLM_TRITON_UTILS = "vllm.triton_utils"  # where vLLM's kernel files take `triton` and `tl` from
ROUTE_ATTR = "_conformance_import_route"  # marks the modules this file put in sys.modules


def cuda_reason(name: str) -> str:
    """Why `name` (a Triton kernel for NVIDIA GPUs) cannot run here; "" when it can."""
    if getattr(torch.version, "hip", None):
        return f"{name}: adapted and profiled for NVIDIA GPUs only; this torch is built for ROCm ({torch.__version__})"
    if not torch.cuda.is_available():
        return f"{name}: no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})"
    if importlib.util.find_spec("triton") is None:
        return f"{name}: Triton is not installed"
    return ""


def load_sglang(module: str, name: str) -> tuple[ModuleType, str]:
    """(sglang's module `module`, the import route taken); BackendUnavailable naming `name` when
    sglang is missing or the file fails to import by either route (module docstring)."""
    if module in sys.modules:
        return sys.modules[module], getattr(sys.modules["sglang"], ROUTE_ATTR, "plain import")
    if "sglang" not in sys.modules and importlib.util.find_spec("sglang") is None:
        raise BackendUnavailable(f"{name}: sglang is not installed ({SGLANG_WHEEL}, --no-deps)")
    if not getattr(sys.modules.get("sglang"), ROUTE_ATTR, ""):
        try:
            return importlib.import_module(module), "plain import"
        except Exception as err:  # noqa: BLE001 - any failure of the engine's import chain
            first = f"{type(err).__name__}: {err}"
        spec = importlib.util.find_spec("sglang")
        assert spec is not None and spec.submodule_search_locations is not None
        for key in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[key]
        package = types.ModuleType("sglang")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__spec__ = spec
        setattr(package, ROUTE_ATTR, f"by path, sglang.srt.utils = is_hip only (plain import: {first[:200]})")
        utils = types.ModuleType("sglang.srt.utils")
        utils.is_hip = lambda: torch.version.hip is not None  # type: ignore[attr-defined]
        sys.modules["sglang"] = package
        sys.modules["sglang.srt.utils"] = utils
    try:
        return importlib.import_module(module), getattr(sys.modules["sglang"], ROUTE_ATTR)
    except Exception as err:  # noqa: BLE001
        raise BackendUnavailable(f"{name}: cannot import {module} by path ({type(err).__name__}: {err})") from err


def load_vllm(module: str, name: str) -> tuple[ModuleType, str]:
    """(vLLM's module `module`, the import route taken); BackendUnavailable naming `name` when
    vLLM's files are missing, the module fails to import by either route, or vLLM disabled
    Triton in this process (vllm_triton_reason; module docstring)."""
    loaded, route = _import_vllm(module, name)
    reason = vllm_triton_reason(name, loaded)
    if reason:
        raise BackendUnavailable(reason)
    return loaded, route


def _import_vllm(module: str, name: str) -> tuple[ModuleType, str]:
    if module in sys.modules:
        stub = sys.modules.get(VLLM_OPS)
        return sys.modules[module], "empty " + VLLM_OPS if getattr(stub, ROUTE_ATTR, False) else "plain import"
    if "vllm" not in sys.modules and importlib.util.find_spec("vllm") is None:
        raise BackendUnavailable(f"{name}: vllm is not importable (needs {VLLM_FILES})")
    try:
        return importlib.import_module(module), "plain import"
    except Exception as err:  # noqa: BLE001
        first = f"{type(err).__name__}: {err}"
    for key in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        del sys.modules[key]
    stub = types.ModuleType(VLLM_OPS)
    setattr(stub, ROUTE_ATTR, True)
    sys.modules[VLLM_OPS] = stub
    try:
        return importlib.import_module(module), f"empty {VLLM_OPS} (plain import: {first[:200]})"
    except Exception as err:  # noqa: BLE001
        raise BackendUnavailable(f"{name}: cannot import {module} ({first}; with an empty {VLLM_OPS}: {err})") from err


def _placeholder(obj: object) -> bool:
    """Whether `obj` (a kernel module's `triton` or `tl`) stands in for a Triton module: vLLM's
    TritonPlaceholder / TritonLanguagePlaceholder, or any module object that is not the module
    of its name in sys.modules."""
    if obj is None:
        return False
    if type(obj).__name__.endswith("Placeholder"):
        return True
    return isinstance(obj, ModuleType) and sys.modules.get(obj.__name__) is not obj


def _triton_drivers() -> str:
    """What this process sees of Triton's backends, the thing vLLM's import check looks at."""
    try:
        backends = importlib.import_module("triton.backends").backends
    except Exception as err:  # noqa: BLE001 - any failure is the answer
        return f"triton.backends cannot be imported: {type(err).__name__}: {err}"
    try:
        active = sum(1 for b in backends.values() if b.driver and b.driver.is_active())
    except Exception as err:  # noqa: BLE001
        return f"Triton's drivers cannot be checked: {type(err).__name__}: {err}"
    return f"{active} active Triton driver{'' if active == 1 else 's'} now, vLLM needs exactly 1"


def vllm_triton_reason(name: str, kernel: ModuleType) -> str:
    """Why vLLM's Triton kernel module `kernel` cannot run in this process: vLLM's own import
    check disabled Triton (`vllm.triton_utils.HAS_TRITON` False), or the module holds a placeholder
    for `triton` / `tl`; "" when neither (a vLLM without triton_utils imports Triton directly)."""
    utils = sys.modules.get(VLLM_TRITON_UTILS)
    disabled = utils is not None and getattr(utils, "HAS_TRITON", True) is False
    if not disabled and not any(_placeholder(getattr(kernel, attr, None)) for attr in ("triton", "tl")):
        return ""
    return (
        f"{name}: vLLM disabled Triton in this process ({VLLM_TRITON_UTILS}.HAS_TRITON is False; {_triton_drivers()}), so its "
        "Triton kernels are placeholders that cannot run: repair the Triton install (`python -c 'import triton.backends'` must work)"
    )


def int32_chunks(n: int, row_elements: int) -> list[tuple[int, int]]:
    """Ranges [start, stop) covering n rows of row_elements elements each with every element
    offset below 2^31 (host-known sizes)."""
    per = max(1, INT32_MAX // row_elements)
    return [(s, min(n, s + per)) for s in range(0, n, per)]


__all__ = [
    "SGLANG_WHEEL",
    "VLLM_FILES",
    "cuda_reason",
    "int32_chunks",
    "load_sglang",
    "load_vllm",
    "vllm_triton_reason",
]
