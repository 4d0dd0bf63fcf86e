"""Backend catalogue: `resolve(spec)` turns a kernel spec into a `Backend` with the contract.

A kernel spec is one of:
- a built-in name, one of BUILTINS (the table below: name, the module and factory or peer adapter
  that build it, a one-line description, its place in the bench's default list); `builtin_lines()`
  lists them for help texts, `adapter(name)` gives a peer's adapter, `bench_kernels()` the
  bench's default kernels;
- `isa:PATH.s:SPEC.toml` (or `isa:@CONFIG:SPEC.toml`): a compiled gfx950 kernel on the ISA
  interpreter (kernel.isa.contract_spec);
- `package.module:attr`: the attribute `attr` of an importable module;
- `path/to/my_kernel.py:attr`: the attribute `attr` of a Python file, absolute or relative to the
  working directory (a spec is a file path when the part before its last `:` contains a path
  separator or ends in `.py`). The file is loaded under a module name derived from its absolute
  path (`<stem>_<hash>`, so two files of one name never collide and no installed module is
  shadowed), with its folder first on sys.path while it executes, so its own
  `import sibling` finds the files beside it; loading the same file again gives the same module
  (sys.modules).

The attribute is either a `Backend`, or a plain callable with the contract, which may carry
attributes `profile` (the numerics profile it declares), `devices` (device types), `max_heads`,
`head_counts` and `limits`. Every refusal is a BackendUnavailable with one line naming the
problem: an unknown name gets the closest built-in names, a missing attribute the module's
closest attribute names, a missing file / a folder / a non-.py file say so.

`portable_spec(spec)` and `portable_env(spec)` give a spec (and the environment it needs) that
resolves in a fresh process started from any working directory: what a printed rerun command
must carry.

This module imports the backends (lazily, so a backend's optional dependencies load only when it
is named); no backend imports it.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from kernel.backend import Backend, BackendUnavailable, gfx950_available
from kernel.contract import MAX_HEADS

if TYPE_CHECKING:
    from kernel.peers.protocol import PeerAdapter


@dataclass(frozen=True)
class BuiltinKernel:
    """One built-in kernel: its spec name, the module that builds its Backend, a one-line
    description; `factory`: the module's zero-argument function returning the Backend, or
    `adapter`: the module's PeerAdapter (kernel.peers.protocol), built by backend_from_adapter
    (either raises BackendUnavailable with the reason where it cannot run); `bench_order`: its
    place in `python -m conformance bench`'s default list (None: not in it)."""

    name: str
    module: str
    description: str
    factory: str = ""
    adapter: str = ""
    bench_order: int | None = None


BUILTINS: dict[str, BuiltinKernel] = {
    k.name: k
    for k in (
        BuiltinKernel(
            "emulated", "kernel.emulated.gfx950", "the gfx950 kernel's algorithm in torch (any device)", "emulated_backend", bench_order=4
        ),
        BuiltinKernel("flydsl", "kernel.flydsl.host", "the project's FlyDSL gfx950 kernel (MI355X only)", "flydsl_backend"),
        BuiltinKernel(
            "flydsl-isa", "kernel.flydsl.isa_backend", "the compiled FlyDSL kernel on the ISA interpreter (CPU)", "flydsl_isa_backend"
        ),
        BuiltinKernel(
            "flashmla", "kernel.peers.flashmla", "FlashMLA's sparse fp8 decode (sgl-flash-mla, SM90)", adapter="ADAPTER", bench_order=1
        ),
        BuiltinKernel(
            "flashmla-prefill",
            "kernel.peers.flashmla_prefill",
            "FlashMLA's sparse prefill over bf16 keys (sgl-flash-mla, SM90)",
            adapter="ADAPTER",
            bench_order=2,
        ),
        BuiltinKernel(
            "torch-sdpa", "kernel.peers.torch_sdpa", "PyTorch's fused SDPA kernels over dequantised keys", adapter="ADAPTER", bench_order=3
        ),
        BuiltinKernel("sglang-decode", "kernel.peers.sglang_decode", "sglang's Triton MLA decode (CUDA)", adapter="ADAPTER"),
        BuiltinKernel("vllm-decode", "kernel.peers.vllm_decode", "vLLM's Triton MLA decode (CUDA)", adapter="ADAPTER"),
        BuiltinKernel("vllm-sparse", "kernel.peers.vllm_sparse", "vLLM's Triton bf16 sparse MLA (CUDA)", adapter="ADAPTER"),
    )
}
BUILTIN_NAMES: tuple[str, ...] = tuple(BUILTINS)
ISA_PREFIX = "isa:"  # a compiled kernel on the ISA interpreter, per a launch spec (kernel/isa/contract_spec.py)
OTHER_FORMS = "package.module:attr or path/to/file.py:attr"


def builtin_lines() -> list[str]:
    """One line per built-in kernel, `name  description`, aligned: for help texts."""
    width = max(len(name) for name in BUILTINS)
    return [f"{k.name:<{width}}  {k.description}" for k in BUILTINS.values()]


def kernel_spec_help(default: str = "", lead: str = "kernel") -> str:
    """A `--kernel` option's help, `lead: ...`: every built-in name and the other spec forms
    (`default`: what applies when the option is not given, appended as '(default: ...)')."""
    text = f"{lead}: a built-in name ({', '.join(BUILTIN_NAMES)}), {OTHER_FORMS}"
    return f"{text} (default: {default})" if default else text


def _close(word: str, candidates: list[str] | tuple[str, ...]) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)


def _did_you_mean(word: str, candidates: list[str] | tuple[str, ...], lead: str = " ") -> str:
    """`lead` + 'did you mean A or B?' for the closest candidates (difflib), '' when none is close."""
    close = _close(word, candidates)
    return f"{lead}did you mean {' or '.join(close)}?" if close else ""


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
    """ " (FILE, line N)" of the innermost source frame that raised `err` (not importlib's own)."""
    import traceback

    skip = (__file__, importlib.__file__)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith("<") and f.filename not in skip]
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def _import_failure(what: str, spec: str, err: BaseException) -> BackendUnavailable:
    """The one-line refusal for a user's module or file that failed while importing."""
    if isinstance(err, SyntaxError):
        return BackendUnavailable(f"cannot import {what} for kernel {spec!r}: syntax error in {err.filename}, line {err.lineno}: {err.msg}")
    if isinstance(err, ImportError):
        return BackendUnavailable(f"cannot import {what} for kernel {spec!r}: {err}{_raised_at(err)}")
    return BackendUnavailable(f"cannot import {what} for kernel {spec!r}: {type(err).__name__} at import: {err}{_raised_at(err)}")


def _attribute(module: ModuleType, attr: str, where: str) -> object:
    """module.attr; BackendUnavailable naming `where` and the module's closest attribute names."""
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("__")]
        raise BackendUnavailable(f"{where} has no attribute {attr!r}{_did_you_mean(attr, names, '; ')}") from None


def is_file_spec(spec: str) -> bool:
    """Whether `spec` names a Python file (`path/to/file.py:attr`, see the module docstring)."""
    if spec.startswith(ISA_PREFIX) or ":" not in spec:
        return False
    left = spec.rpartition(":")[0]
    return left.endswith(".py") or "/" in left or os.sep in left


def _split_file_spec(spec: str) -> tuple[Path, str]:
    """(the file, relative to the working directory when not absolute; the attribute name)."""
    left, _, attr = spec.rpartition(":")
    if not left or not attr:
        raise BackendUnavailable(f"kernel {spec!r}: expected path/to/file.py:attr with both parts non-empty")
    return Path(left).expanduser(), attr


def file_module_name(path: Path) -> str:
    """The module name a kernel file is loaded under: its stem (made an identifier) and a hash of
    its resolved path."""
    resolved = path.resolve()
    stem = re.sub(r"\W", "_", resolved.stem) or "kernel"
    return f"{stem}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"


def load_kernel_file(path: Path, spec: str) -> ModuleType:
    """The module of Python file `path` (see the module docstring); BackendUnavailable (one line)
    for a missing file, a folder, a non-.py file, or a file that fails to import."""
    if not path.exists():
        raise BackendUnavailable(f"kernel {spec!r}: no such file: {path} (a path is relative to the working directory {os.getcwd()})")
    if path.is_dir():
        raise BackendUnavailable(f"kernel {spec!r}: {path} is a folder; give a Python file: path/to/file.py:attr")
    if path.suffix != ".py":
        raise BackendUnavailable(f"kernel {spec!r}: {path} is not a Python file (.py)")
    resolved = path.resolve()
    name = file_module_name(resolved)
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(resolved):
        return loaded
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise BackendUnavailable(f"kernel {spec!r}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    folder = str(resolved.parent)
    sys.modules[name] = module
    sys.path.insert(0, folder)
    try:
        module_spec.loader.exec_module(module)
    except BaseException as err:
        sys.modules.pop(name, None)
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        raise _import_failure(str(path), spec, err) from err
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def _resolve_file(spec: str) -> Backend:
    path, attr = _split_file_spec(spec)
    module = load_kernel_file(path, spec)
    return _wrap_external(spec, _attribute(module, attr, f"file {str(path)!r}"))


def _resolve_module(spec: str) -> Backend:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise BackendUnavailable(f"kernel {spec!r}: expected package.module:attr with both parts non-empty")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any failure while importing the user's module is a usage error
        if isinstance(err, ModuleNotFoundError) and Path(module_name).exists():  # a file or folder meant as one
            load_kernel_file(Path(module_name), spec)
        raise _import_failure(repr(module_name), spec, err) from err
    return _wrap_external(spec, _attribute(module, attr, f"module {module_name!r}"))


def unknown_kernel_message(name: str) -> str:
    """The one line for a spec that is no built-in name and no other form (closest names first)."""
    hint = _did_you_mean(name, BUILTIN_NAMES)
    if name.endswith(".py") or "/" in name:
        hint = f" a file needs the attribute to test: {name}:ATTR;{hint}"
    return f"unknown kernel {name!r}:{hint} built-in kernels: {', '.join(BUILTIN_NAMES)}; or {OTHER_FORMS}"


def _project_config_asm(heads: int, has_invalid: bool, return_lse: bool) -> Path:
    """The ISA of one configuration of the project's kernel from its cache (kernel.flydsl.isa_cache,
    compiled on a cold cache), for `isa:@h.._i.._l..:SPEC.toml`; BackendUnavailable saying why not."""
    from kernel.flydsl.isa_cache import IsaBuildError, kernel_asm_path

    try:
        return kernel_asm_path(heads, has_invalid, return_lse)
    except IsaBuildError as err:
        raise BackendUnavailable(str(err)) from err


def resolve(name: str) -> Backend:
    """The backend of kernel spec `name` (module docstring); BackendUnavailable says why not.

    The backend's `profile` is what the kernel declares (None for a callable that declares none);
    choosing the numerics a run judges by, an override included, is the caller's job
    (conformance.judging.target.build_target)."""
    builtin = BUILTINS.get(name)
    if builtin is not None:
        module = importlib.import_module(builtin.module)
        if builtin.adapter:
            from kernel.peers.protocol import backend_from_adapter

            return backend_from_adapter(getattr(module, builtin.adapter))
        return getattr(module, builtin.factory)()
    if name.startswith(ISA_PREFIX):
        from kernel.isa.contract_spec import isa_contract_backend

        return isa_contract_backend(name, config_asm=_project_config_asm)
    if is_file_spec(name):
        return _resolve_file(name)
    if ":" in name:
        return _resolve_module(name)
    raise BackendUnavailable(unknown_kernel_message(name))


def adapter(name: str) -> PeerAdapter | None:
    """The PeerAdapter of built-in kernel `name` (kernel.peers.protocol), None for a kernel that
    is not an adapter to another project's kernel (or not a built-in name)."""
    builtin = BUILTINS.get(name)
    if builtin is None or not builtin.adapter:
        return None
    return getattr(importlib.import_module(builtin.module), builtin.adapter)


def bench_kernels() -> tuple[str, ...]:
    """The built-in kernels of the bench's default list, in their bench_order."""
    listed = [k for k in BUILTINS.values() if k.bench_order is not None]
    return tuple(k.name for k in sorted(listed, key=lambda k: k.bench_order or 0))


def default_kernel_name() -> str:
    """The suite's default kernel for this machine: `flydsl` on gfx950, else `emulated`."""
    return "flydsl" if gfx950_available() else "emulated"


# ---------------------------------------------------------------------------------------------
# Specs that resolve in a fresh process from any working directory


def _module_location(spec: importlib.machinery.ModuleSpec | None) -> str:
    """Where a top-level module's spec points: its file, or its package folder (namespace
    packages); "" for none or a built-in module."""
    if spec is None:
        return ""
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return str(Path(spec.origin).resolve())
    locations = list(spec.submodule_search_locations or [])
    return str(Path(locations[0]).resolve()) if locations else ""


@functools.lru_cache(maxsize=64)
def _fresh_location(top: str) -> str:
    """Where a fresh interpreter (this one's executable, PYTHONPATH unset, started in an empty
    folder) finds top-level module `top`: _module_location of its spec, "" when it finds none."""
    code = (
        "import importlib.util, pathlib, sys\n"
        "s = importlib.util.find_spec(sys.argv[1])\n"
        "o = s and (s.origin if s.origin not in (None, 'built-in', 'frozen') else (list(s.submodule_search_locations or []) or [''])[0])\n"
        "print(str(pathlib.Path(o).resolve()) if o else '')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONSAFEPATH")}
    with tempfile.TemporaryDirectory(prefix="conformance-fresh-") as empty:
        proc = subprocess.run(
            [sys.executable, "-c", code, top], cwd=empty, env=env, capture_output=True, text=True, timeout=60, check=False
        )
    return proc.stdout.strip() if proc.returncode == 0 else ""


@dataclass(frozen=True)
class _Portable:
    spec: str
    env: tuple[tuple[str, str], ...] = ()


def _portable(name: str) -> _Portable:
    if name in BUILTINS or name.startswith(ISA_PREFIX) or ":" not in name:
        return _Portable(name)
    if is_file_spec(name):
        left, _, attr = name.rpartition(":")
        return _Portable(f"{os.path.abspath(os.path.expanduser(left))}:{attr}")
    module_name, _, attr = name.partition(":")
    top = module_name.split(".")[0]
    try:
        here = _module_location(importlib.util.find_spec(top))
    except (ImportError, ValueError):
        return _Portable(name)
    if not here or _fresh_location(top) == here:
        return _Portable(name)
    location = Path(here)
    if location.name == "__init__.py" or location.is_dir():  # a package: carry the folder above it
        package_dir = location.parent if location.name == "__init__.py" else location
        return _Portable(name, (("PYTHONPATH", str(package_dir.parent)),))
    if module_name == top and location.suffix == ".py":  # a plain top-level module file
        return _Portable(f"{location}:{attr}")
    return _Portable(name, (("PYTHONPATH", str(location.parent)),))


def portable_spec(name: str) -> str:
    """A spec for the kernel `name` that resolves from any working directory in a fresh process
    (with portable_env(name) set): built-in names and `isa:` specs unchanged; a file-path spec
    made absolute; a `module:attr` whose top-level module a fresh interpreter would not find where
    this one did (it came from the working directory, PYTHONPATH or a folder pytest put on
    sys.path) becomes `/abs/file.py:attr` for a plain top-level module file, and stays
    `module:attr` otherwise (portable_env carries its folder); any other spec unchanged."""
    return _portable(name).spec


def portable_env(name: str) -> dict[str, str]:
    """The environment variables a fresh process needs to resolve portable_spec(name): {} or
    {"PYTHONPATH": "<absolute folder>"} (the folder a package of a `module:attr` spec was found in)."""
    return dict(_portable(name).env)


__all__ = [
    "BUILTINS",
    "BUILTIN_NAMES",
    "BuiltinKernel",
    "adapter",
    "bench_kernels",
    "builtin_lines",
    "default_kernel_name",
    "file_module_name",
    "is_file_spec",
    "kernel_spec_help",
    "load_kernel_file",
    "portable_env",
    "portable_spec",
    "resolve",
    "unknown_kernel_message",
]
