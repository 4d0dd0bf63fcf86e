"""Compiled ISA of the project's FlyDSL kernel, cached by kernel source hash.

`kernel_asm(heads, has_invalid, return_lse)` returns the gfx950 assembly text of one
configuration. It compiles with the FlyDSL compile-only driver of kernel.flydsl.compile
(`compile_configs`: its own subprocess per group, COMPILE_ONLY=1 ARCH=gfx950, flydsl's cache off,
final ISA dumped, ld.lld from `ensure_toolchain`) and keeps the result under
$FLYDSL_ISA_CACHE (default ~/.cache/sparse-mla-flydsl/isa)/<hash>/<label>.s, where <hash> covers
kernel/flydsl/gfx950.py with its layout.py and mlir_layer.py, and the flydsl version: each configuration of each kernel
version is compiled once per machine (CI: once per run, or never with a restored cache).

CLI: python -m kernel.flydsl.isa_cache --heads 1,5,8,16 --has-invalid 0,1 --return-lse 0,1
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KERNEL_SOURCE = Path(__file__).with_name("gfx950.py")


class IsaBuildError(RuntimeError):
    """The kernel could not be compiled to ISA here; the message says why."""


def cache_root() -> Path:
    env = os.environ.get("FLYDSL_ISA_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparse-mla-flydsl" / "isa"


def source_hash() -> str:
    """Hash of the kernel source and the flydsl version (the cache key)."""
    from kernel.flydsl.compile import flydsl_version
    from kernel.flydsl.gfx950 import SOURCE_FILES

    h = hashlib.sha256()
    for path in (KERNEL_SOURCE, *SOURCE_FILES):  # gfx950.py and the modules it is written with
        h.update(Path(path).read_bytes())
    h.update(str(flydsl_version()).encode())
    return h.hexdigest()[:16]


def label(heads: int, has_invalid: bool, return_lse: bool) -> str:
    return f"h{heads}_i{int(has_invalid)}_l{int(return_lse)}"


def _compile_into(root: Path, todo: Sequence[tuple[int, bool, bool]], jobs: int) -> None:
    from kernel.flydsl.compile import compile_configs

    try:
        import flydsl  # noqa: F401
    except ImportError as err:
        raise IsaBuildError(f"flydsl is not installed ({err}); the ISA cannot be compiled") from err
    dump = Path(tempfile.mkdtemp(prefix="isa_dump_"))
    try:
        results = compile_configs(list(todo), jobs=jobs, per_process=max(1, len(todo) // max(1, jobs)), dump_root=dump)
        for res in results:
            if not res.isa_path:
                raise IsaBuildError(f"{label(res.heads, res.has_invalid, res.return_lse)} did not compile: {res.error or res.failures}")
        store_compiled(results, root)
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def store_compiled(results: Sequence[Any], root: Path | None = None) -> int:
    """Put the ISA of compiled configurations (kernel.flydsl.compile.ConfigResult with
    an isa_path that still exists: compile_configs with a dump_root) into the cache under `root`
    (default: this source's folder, cache_root() / source_hash()), each file atomically; a result
    without ISA is skipped. Returns how many were stored. Used by the compile-only tests so that
    the interpreter's tests and the suite on flydsl-isa reuse what they compiled."""
    root = root if root is not None else cache_root() / source_hash()
    root.mkdir(parents=True, exist_ok=True)
    stored = 0
    for res in results:
        if not res.isa_path or not Path(res.isa_path).is_file():
            continue
        name = label(res.heads, res.has_invalid, res.return_lse)
        tmp = root / f".{name}.{os.getpid()}.tmp"
        shutil.copyfile(res.isa_path, tmp)
        os.replace(tmp, root / f"{name}.s")
        stored += 1
    return stored


def build_many(configs: Sequence[tuple[int, bool, bool]], jobs: int = 1) -> dict[tuple[int, bool, bool], Path]:
    """Compile the configurations missing from the cache and return every path. One lock file
    per configuration: this process compiles the ones it can lock at once (in one batch), then
    waits for those another process is compiling (and compiles any that process left missing)."""
    root = cache_root() / source_hash()
    root.mkdir(parents=True, exist_ok=True)
    path = {c: root / f"{label(*c)}.s" for c in configs}
    todo = sorted({c for c in configs if not path[c].exists()})
    if todo:
        held, busy = [], []
        try:
            for c in todo:
                fh = open(root / f".{label(*c)}.lock", "w")  # noqa: SIM115  held across the compile
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    fh.close()
                    busy.append(c)
                    continue
                held.append((c, fh))
            mine = [c for c, _ in held if not path[c].exists()]
            if mine:
                _compile_into(root, mine, jobs)
        finally:
            for _, fh in held:
                fh.close()
        for c in busy:
            with open(root / f".{label(*c)}.lock", "w") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)  # the other process is compiling it
                if not path[c].exists():
                    _compile_into(root, [c], 1)
    return dict(path)


def kernel_asm_path(heads: int, has_invalid: bool, return_lse: bool) -> Path:
    return build_many([(heads, bool(has_invalid), bool(return_lse))])[(heads, bool(has_invalid), bool(return_lse))]


def kernel_asm(heads: int, has_invalid: bool, return_lse: bool) -> str:
    """Assembly text of one configuration (compiled on first use, then cached)."""
    return kernel_asm_path(heads, has_invalid, return_lse).read_text()


def main(argv: Sequence[str] | None = None) -> int:
    from kernel.flydsl.compile import all_configs, parse_flags, parse_heads

    ap = argparse.ArgumentParser(prog="python -m kernel.flydsl.isa_cache", description="compile and cache the kernel's ISA")
    ap.add_argument("--heads", default="1..16")
    ap.add_argument("--has-invalid", default="0,1")
    ap.add_argument("--return-lse", default="0,1")
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args(argv)
    cfgs = all_configs(parse_heads(a.heads), parse_flags(a.has_invalid), parse_flags(a.return_lse))
    for cfg, path in build_many(cfgs, jobs=a.jobs).items():
        print(label(*cfg), path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
