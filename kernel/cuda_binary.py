"""CUDA C++ kernels of this project built with nvcc and launched through the CUDA driver (ctypes):
no torch extension, no ninja, no Python build step.

    module = load(source, device)                 # compiles once per (source, arch), then cached
    module.launch("name", grid, block, (tensor, ctypes.c_int32(n), ...))

`load` compiles `source` with nvcc (`NVCC`, else `$CUDA_HOME/bin/nvcc`, else `nvcc` on PATH) to a
cubin for the device's compute capability (`-arch=sm_XY`), keeps it under the cache folder
(`CONFORMANCE_CUDA_CACHE`, else `$XDG_CACHE_HOME/mla-conformance/cubin`, else
`~/.cache/mla-conformance/cubin`) named by a hash of the source, the flags and nvcc's version, and
loads it into the device's primary context (the one torch uses). A launch goes on torch's current
stream of that device and reads nothing back. Every failure (no nvcc, a compile error, a driver
error) raises CudaBuildError naming it; callers fall back to their torch paths.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

NVCC_FLAGS = ("-O3", "-std=c++17")  # IEEE division and square root, no flush to zero (nvcc defaults)
COMPILE_TIMEOUT_S = 300


class CudaBuildError(RuntimeError):
    """nvcc or the CUDA driver failed; the message names the step and its output."""


def nvcc_path() -> str | None:
    """The nvcc to use: NVCC, $CUDA_HOME/bin/nvcc, nvcc on PATH; None when none exists (looked up
    once per value of those variables)."""
    return _nvcc_path(os.environ.get("NVCC"), os.environ.get("CUDA_HOME"), os.environ.get("PATH"))


@functools.cache
def _nvcc_path(nvcc: str | None, cuda_home: str | None, path: str | None) -> str | None:
    for candidate in (nvcc, os.path.join(cuda_home, "bin", "nvcc") if cuda_home else None):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("nvcc", path=path)


def cache_dir() -> Path:
    """Where built cubins are kept (see the module docstring)."""
    explicit = os.environ.get("CONFORMANCE_CUDA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mla-conformance" / "cubin"


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        raise CudaBuildError(f"nvcc ({nvcc}) does not run: {err}") from err
    if done.returncode != 0:
        raise CudaBuildError(f"nvcc ({nvcc}) --version exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"


def compile_cubin(source: str, arch: str, flags: Sequence[str] = NVCC_FLAGS) -> bytes:
    """The cubin of `source` for `arch` ("sm_90"), from the cache or built now (see the module
    docstring). Raises CudaBuildError when no nvcc exists or it fails (its stderr in the message)."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise CudaBuildError("no nvcc: set NVCC or CUDA_HOME, or put nvcc on PATH")
    key = hashlib.sha256("\0".join((source, arch, *flags, _nvcc_version(nvcc))).encode()).hexdigest()[:24]
    folder = cache_dir()
    target = folder / f"{key}.cubin"
    if target.is_file():
        return target.read_bytes()
    with tempfile.TemporaryDirectory(prefix="mla-cuda-") as tmp:
        src = Path(tmp) / "kernel.cu"
        out = Path(tmp) / "kernel.cubin"
        src.write_text(source)
        cmd = [nvcc, "-cubin", f"-arch={arch}", *flags, "-o", str(out), str(src)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError) as err:
            raise CudaBuildError(f"nvcc failed to run ({' '.join(cmd)}): {err}") from err
        if done.returncode != 0 or not out.is_file():
            raise CudaBuildError(f"nvcc exited {done.returncode} for {arch}: {(done.stderr or done.stdout).strip()[-2000:]}")
        image = out.read_bytes()
    try:  # the cache is an optimisation: a read-only or full disk only costs the next build
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"{key}.{os.getpid()}.tmp"
        partial.write_bytes(image)
        os.replace(partial, target)
    except OSError:
        pass
    return image


@functools.cache
def _driver() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        raise CudaBuildError(f"the CUDA driver library (libcuda.so.1) does not load: {err}") from err
    return lib


def _check(result: int, what: str) -> None:
    if result != 0:
        lib = _driver()
        text = ctypes.c_char_p()
        lib.cuGetErrorString(ctypes.c_int(result), ctypes.byref(text))
        name = text.value.decode() if text.value else "unknown error"
        raise CudaBuildError(f"{what} failed: CUDA driver error {result} ({name})")


class Module:
    """One cubin loaded on one CUDA device; `launch` runs one of its `extern "C"` kernels."""

    def __init__(self, image: bytes, device: torch.device) -> None:
        self.device = device
        lib = _driver()
        with torch.cuda.device(device):
            torch.cuda.init()
            torch.empty(1, device=device)  # the runtime binds the primary context to this thread
            self._bind_context()
            handle = ctypes.c_void_p()
            _check(lib.cuModuleLoadData(ctypes.byref(handle), ctypes.c_char_p(image)), "cuModuleLoadData")
        self._handle = handle
        self._functions: dict[str, ctypes.c_void_p] = {}
        self._lock = threading.Lock()

    def _bind_context(self) -> None:
        lib = _driver()
        current = ctypes.c_void_p()
        _check(lib.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        if not current.value:
            ctx = ctypes.c_void_p()
            _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ctypes.c_int(self.device.index or 0)), "cuDevicePrimaryCtxRetain")
            _check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def function(self, name: str) -> ctypes.c_void_p:
        """The kernel `name` (cached)."""
        with self._lock:
            if name not in self._functions:
                fn = ctypes.c_void_p()
                _check(_driver().cuModuleGetFunction(ctypes.byref(fn), self._handle, name.encode()), f"cuModuleGetFunction({name})")
                self._functions[name] = fn
            return self._functions[name]

    def launch(
        self,
        name: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[torch.Tensor | ctypes._SimpleCData],
        shared_bytes: int = 0,
    ) -> None:
        """Launch `name` on torch's current stream of this device; a tensor argument passes its data
        pointer (it must be on this device), any other argument its ctypes value, in the kernel's
        parameter order and types. No host read."""
        values: list[ctypes._SimpleCData] = []
        for arg in args:
            if isinstance(arg, torch.Tensor):
                if arg.device != self.device:
                    raise CudaBuildError(f"launch {name}: a tensor on {arg.device}, the module is on {self.device}")
                values.append(ctypes.c_void_p(arg.data_ptr()))
            else:
                values.append(arg)
        params = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values))
        if min(grid) <= 0:
            return
        fn = self.function(name)
        stream = ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)
        self._bind_context()
        result = _driver().cuLaunchKernel(
            fn, ctypes.c_uint(grid[0]), ctypes.c_uint(grid[1]), ctypes.c_uint(grid[2]),
            ctypes.c_uint(block[0]), ctypes.c_uint(block[1]), ctypes.c_uint(block[2]),
            ctypes.c_uint(shared_bytes), stream, params, None,
        )  # fmt: skip
        _check(result, f"cuLaunchKernel({name})")


DMMA_CAPABILITY = (8, 0)  # mma.sync.m8n8k4.f64, the f64 tensor cores
_DMMA_CAPABLE: dict[torch.device, bool] = {}


def dmma_supported(device: torch.device) -> bool:
    """Whether this project's DMMA kernels may be built and run on `device`: a CUDA device of
    compute capability 8.0 or later (checked once per device) and an nvcc to build with."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    if device not in _DMMA_CAPABLE:
        _DMMA_CAPABLE[device] = torch.cuda.get_device_capability(device) >= DMMA_CAPABILITY
    return _DMMA_CAPABLE[device] and nvcc_path() is not None


_MODULES: dict[tuple[str, torch.device], Module] = {}
_MODULES_LOCK = threading.Lock()


def arch_of(device: torch.device) -> str:
    """ "sm_XY" of a CUDA device's compute capability."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def load(source: str, device: torch.device, flags: Sequence[str] = NVCC_FLAGS) -> Module:
    """`source` built for `device` and loaded there (once per source and device)."""
    if device.type != "cuda":
        raise CudaBuildError(f"CUDA kernels need a CUDA device, not {device}")
    device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    key = (hashlib.sha256(source.encode()).hexdigest(), device)
    with _MODULES_LOCK:
        if key not in _MODULES:
            _MODULES[key] = Module(compile_cubin(source, arch_of(device), flags), device)
        return _MODULES[key]
