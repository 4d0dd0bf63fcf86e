"""Compile other people's public FlyDSL kernels for gfx950 (compile-only, on the CPU), dump their
ISA, and measure the ISA interpreter's coverage of them.

Nothing of those kernels is kept in this repository: give the command paths to checkouts you
fetched (ROCm/aiter at a commit that has the kernel, ROCm/FlyDSL); each target below is a recipe
that imports one kernel module from such a checkout and calls its builder with placeholder CPU
tensors, so that flydsl compiles it (COMPILE_ONLY=1 ARCH=gfx950, cache off, final ISA dumped;
ld.lld from kernel.flydsl.compile.ensure_toolchain). Each target compiles in its own
subprocess (a failed lowering aborts it).

    python -m tools.foreign_isa compile --checkout PATH [--checkout PATH ...] --out DIR \\
        [--buffer-ops PATH] [--compat flydsl.expr.MOD=PATH ...] [--only NAME,...]
    python -m tools.foreign_isa table DIR [--json]   # kernels, instructions, opcodes, modelled
    python -m tools.foreign_isa run DIR              # load, then run with tools/foreign_isa/specs/<kernel>.toml

Run from the repository root. Exit codes: compile 0 when every target found compiled, 1 otherwise;
table 0, 2 when DIR is not a folder; run 0 when every kernel ran, 1 when one has no spec or failed.

Compatibility: kernels written for flydsl < 0.4 import `flydsl.expr.buffer_ops`, which later
flydsl releases moved out (aiter carries it as aiter/ops/flydsl/kernels/buffer_ops.py, FlyDSL as
kernels/common/buffer_ops.py), and `flydsl.expr.vector`, which FlyDSL deleted in the same change
(python/flydsl/expr/vector.py before ROCm/FlyDSL commit 7dac0826). `--buffer-ops PATH` /
`--compat flydsl.expr.vector=PATH` register such a file (from your fetched checkouts) under its
old name when the installed flydsl lacks it; nothing else is patched.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).resolve().parent / "specs"


# ----------------------------------------------------------------------------- worker side


def _alias_packages(root: Path) -> None:
    """Make `aiter.ops.flydsl.kernels.X` (and `kernels.X` for FlyDSL) importable from the
    checkout without running the packages' __init__ (which pull in the rest of aiter)."""
    for pkg in ("aiter", "aiter.ops", "aiter.ops.flydsl", "aiter.ops.flydsl.kernels"):
        path = root / pkg.replace(".", "/")
        if path.is_dir() and pkg not in sys.modules:
            m = types.ModuleType(pkg)
            m.__path__ = [str(path)]
            sys.modules[pkg] = m
    if (root / "kernels").is_dir():
        sys.path.insert(0, str(root))
        marker = types.ModuleType("__flydsl_root__")
        marker.__file__ = str(root / "__init__.py")
        sys.modules["__flydsl_root__"] = marker


def _register_compat(pairs: str) -> None:
    """`MODULE=PATH;MODULE=PATH`: load each file as that flydsl.expr submodule when the installed
    flydsl lacks it (modules later flydsl releases moved out; see the module docstring)."""
    import flydsl.expr as fe

    for pair in filter(None, pairs.split(";")):
        name, _, path = pair.partition("=")
        attr = name.rsplit(".", 1)[-1]
        if not name.startswith("flydsl.expr.") or hasattr(fe, attr):
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} as {name}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        setattr(fe, attr, mod)


def _z(*shape: int, dtype: str = "float32"):  # type: ignore[no-untyped-def]
    import torch

    return torch.zeros(*shape, dtype=getattr(torch, dtype))


def _aiter(name: str):  # type: ignore[no-untyped-def]
    return importlib.import_module("aiter.ops.flydsl.kernels." + name)


def _t_sparse_mla_prefill() -> None:
    """aiter sparse MLA prefill (flat fp8 cache, 128 heads, 512 latent): one CTA per query."""
    m = _aiter("sparse_mla_prefill")
    launch = m.compile_sparse_mla_prefill()
    nq, rows = 2, 64
    launch(
        _z(nq, 128, 512, dtype="bfloat16"),
        _z(rows, 512, dtype="uint8"),
        _z(32, dtype="int32"),
        _z(nq + 1, dtype="int32"),
        _z(nq, 128, 512, dtype="bfloat16"),
        nq,
        rows,
    )


def _pa_decode(shape: str, waves: int, splits: int, h: int) -> None:
    m = _aiter("pa_decode_sparse")
    mfma = m._MFMA_MAP[shape]
    d, t, pages = 512, 2, 64
    launch = m._compile_pa_decode_sparse_mfma(
        H=h, D=d, BLOCK_K=mfma.MFMA_N, KV_SPLITS=splits, softmax_scale=d**-0.5, mfma=mfma, n_waves=waves
    )
    out = _z(t, h, d, dtype="bfloat16")
    part = (_z(t, splits, h), _z(t, splits, h), _z(t, splits, h, d)) if splits > 1 else (out, out, out)
    launch(
        _z(t, h, d, dtype="bfloat16"),
        _z(pages, d, dtype="bfloat16"),
        _z(1),
        _z(64, dtype="int32"),
        _z(t + 1, dtype="int32"),
        _z(h),
        *part,
        out,
        t,
    )


def _t_pa_decode_sparse() -> None:
    """aiter sparse paged decode (bf16 KV, H 16, D 512, 16x16x16 MFMA, 4 waves, one split)."""
    _pa_decode("16x16x16", 4, 1, 16)


def _t_pa_decode_sparse_32x32() -> None:
    """aiter sparse paged decode, 32x32x8 MFMA, 4 waves, H 32 (= its BLOCK_H), 2 KV splits
    (partials out)."""
    _pa_decode("32x32x8", 4, 2, 32)


def _t_mla_reduce() -> None:
    """aiter MLA reduce (combine split-KV partial outputs by their lse), H 16, Dv 512, bf16 out,
    lse out; its launcher takes typed raw pointers (flyc.from_c_void_p)."""
    import flydsl.compiler as flyc
    import flydsl.expr as fx

    m = _aiter("mla_reduce")
    launch = m.compile_mla_reduce(H=16, Dv=512, out_dtype="bf16", output_lse=True)
    bufs = [
        (_z(64, 16, 512), fx.Float32),
        (_z(64, 16), fx.Float32),
        (_z(5, dtype="int32"), fx.Int32),
        (_z(64, dtype="int32"), fx.Int32),
        (_z(4, dtype="int32"), fx.Int32),
        (_z(4, 16, 512, dtype="bfloat16"), fx.BFloat16),
        (_z(4, 16), fx.Float32),
    ]
    ptrs = [flyc.from_c_void_p(dt, t.data_ptr()) for t, dt in bufs]
    launch(*ptrs, 16 * 512, 512, 16, 4, 1, 64, 4)


def _t_flydsl_mla_decode_fp8() -> None:
    """FlyDSL kernels/attention/mla_fwd_decode_m16x8_fp8_fp8.py (128 heads, fp8 Q and KV, 576 / 512
    head dims, persistent over num_cus CTAs driven by aiter-style work metadata)."""
    import torch
    from kernels.attention import mla_fwd_decode_m16x8_fp8_fp8 as m

    f8 = torch.float8_e4m3fn
    seqs, pages, parts = 2, 64, 4
    q = torch.zeros(seqs * 128, m.QK_HEAD_DIM, dtype=f8)
    kv = torch.zeros(pages, m.QK_HEAD_DIM, dtype=f8)
    m.launch_mla_fwd_decode_m16x8_fp8_fp8(
        q, kv, _z(64, dtype="int32"), _z(5, dtype="int32"), _z(4, 8, dtype="int32"),
        _z(seqs * 128, m.V_HEAD_DIM, dtype="bfloat16"), _z(parts * 128, m.V_HEAD_DIM), _z(parts * 128),
        m.QK_HEAD_DIM**-0.5, 4, 160 * 1024,
    )  # fmt: skip


def _t_flydsl_vector_add() -> None:
    """FlyDSL examples/01-vectorAdd.py: its kernel and launcher (the file's definitions, without
    the GPU demo that follows them), for a [100, 1000] f32 add."""
    src = Path(sys.modules["__flydsl_root__"].__file__).parent / "examples" / "01-vectorAdd.py"  # type: ignore[arg-type]
    text = src.read_text()
    head = text[: text.index("\nM, N = ")]  # definitions only; the demo allocates CUDA tensors
    ns: dict = {"__name__": "flydsl_example_vector_add"}
    exec(compile(head, str(src), "exec"), ns)  # noqa: S102 - the user's fetched example, by request
    ns["vector_add"](_z(100, 1000), _z(100, 1000), _z(100, 1000))


TARGETS: dict[str, tuple[str, Callable[[], None]]] = {
    # name: (file that must exist in the checkout, recipe)
    "aiter_sparse_mla_prefill": ("aiter/ops/flydsl/kernels/sparse_mla_prefill.py", _t_sparse_mla_prefill),
    "aiter_pa_decode_sparse": ("aiter/ops/flydsl/kernels/pa_decode_sparse.py", _t_pa_decode_sparse),
    "aiter_pa_decode_sparse_32x32": ("aiter/ops/flydsl/kernels/pa_decode_sparse.py", _t_pa_decode_sparse_32x32),
    "aiter_mla_reduce": ("aiter/ops/flydsl/kernels/mla_reduce.py", _t_mla_reduce),
    "flydsl_mla_decode_fp8": ("kernels/attention/mla_fwd_decode_m16x8_fp8_fp8.py", _t_flydsl_mla_decode_fp8),
    "flydsl_vector_add": ("examples/01-vectorAdd.py", _t_flydsl_vector_add),
}


def _worker(target: str, checkout: str, compat: str) -> int:
    _alias_packages(Path(checkout))
    _register_compat(compat)
    TARGETS[target][1]()
    return 0


# ----------------------------------------------------------------------------- driver side


def compile_targets(checkouts: list[Path], out: Path, compat: list[str], only: set[str] | None) -> list[dict]:
    """Compile every target found in a checkout (first checkout that has its file wins) into
    out/<target>.s; returns one record per target (name, checkout, seconds, error)."""
    from kernel.flydsl.compile import compile_env, ensure_toolchain

    rocm = ensure_toolchain()
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    for name, (rel, _fn) in TARGETS.items():
        if only and name not in only:
            continue
        src = next((c for c in checkouts if (c / rel).is_file()), None)
        if src is None:
            continue
        dump = out / f".dump_{name}"
        shutil.rmtree(dump, ignore_errors=True)
        for old in out.glob(f"{name}.*s"):
            old.unlink()
        env = compile_env(rocm, dump)
        t0 = time.perf_counter()
        print(f"compiling {name} from {src} ...", flush=True)
        res = subprocess.run(
            [sys.executable, "-m", "tools.foreign_isa", "_worker", name, str(src), ";".join(compat)],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        hits = sorted(dump.glob("*/*final_isa.s"))
        rec = {"target": name, "checkout": str(src), "seconds": round(time.perf_counter() - t0, 1), "kernels": []}
        if res.returncode != 0 and not hits:
            from kernel.flydsl.devicelibs import undefined_in_dump

            missing = undefined_in_dump(dump)
            last = (res.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
            rec["error"] = f"calls device-library functions no bitcode here defines: {', '.join(missing)}" if missing else last
        for i, h in enumerate(hits):
            dst = out / (f"{name}.s" if len(hits) == 1 else f"{name}.{i}.s")
            dst.write_text(h.read_text())
            rec["kernels"].append(dst.name)
        print(json.dumps(rec), flush=True)
        recs.append(rec)
    (out / "compile.json").write_text(json.dumps(recs, indent=1))
    return recs


def coverage(path: Path) -> dict:
    """Instructions, opcodes and the opcodes (with counts) the interpreter does not model."""
    from kernel.isa.asm import parse_program
    from kernel.isa.errors import IsaError
    from kernel.isa.interp import DecodeCtx, factory_for

    text = path.read_text()
    try:
        prog = parse_program(text)
        descriptor = prog.descriptor  # read on first use: its errors are parse errors here
    except IsaError as err:
        return {"kernel": path.stem, "parse_error": str(err)}
    ctx = DecodeCtx(prog.labels, descriptor.next_free_vgpr)
    counts: collections.Counter[str] = collections.Counter()
    missing: dict[str, str] = {}
    for ins in prog.instrs:
        counts[ins.mnemonic] += 1
        try:
            factory_for(ins)(ins, ctx)
        except IsaError as err:
            missing.setdefault(ins.mnemonic, str(err).splitlines()[0][:200])
    return {
        "kernel": path.stem,
        "symbol": descriptor.name,
        "instructions": len(prog.instrs),
        "opcodes": sorted(counts),
        "unmodelled": missing,
    }


def table(out: Path) -> str:
    rows = ["| kernel | instructions | opcodes | modelled | not modelled |", "|---|---:|---:|---:|---|"]
    for p in sorted(out.glob("*.s")):
        c = coverage(p)
        if "parse_error" in c:
            rows.append(f"| {c['kernel']} | - | - | - | parse error: {c['parse_error']} |")
            continue
        n = len(c["opcodes"])
        miss = ", ".join(f"`{k}`" for k in sorted(c["unmodelled"])) or "-"
        rows.append(f"| {c['kernel']} | {c['instructions']:,} | {n} | {n - len(c['unmodelled'])} | {miss} |")
    return "\n".join(rows)


def run_all(out: Path, checks: str) -> int:
    """Run every kernel that has a spec tools/foreign_isa/specs/<target>.toml; print its stats
    and findings. Exit status 1 when one failed to load or run."""
    from kernel.isa.spec import run_spec_file

    bad = 0
    for p in sorted(out.glob("*.s")):
        spec = SPECS / f"{p.stem}.toml"
        if not spec.exists():
            print(f"{p.stem}: no spec {spec}")
            bad = 1
            continue
        try:
            rep = run_spec_file(p, spec, checks=checks)
        except Exception as err:  # noqa: BLE001 - report and go on to the next kernel
            print(f"{p.stem}: FAILED {type(err).__name__}: {str(err).splitlines()[0][:300]}")
            bad = 1
            continue
        print(rep.summary())
    return bad


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_worker":
        return _worker(argv[1], argv[2], argv[3])
    ap = argparse.ArgumentParser(prog="python -m tools.foreign_isa", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--checkout", action="append", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--buffer-ops", default=None, help="shorthand for --compat flydsl.expr.buffer_ops=PATH")
    c.add_argument("--compat", action="append", default=[], help="MODULE=PATH: a flydsl.expr submodule the installed flydsl lacks")
    c.add_argument("--only", default="")
    t = sub.add_parser("table")
    t.add_argument("out", type=Path)
    t.add_argument("--json", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--checks", default="collect")
    a = ap.parse_args(argv)
    if a.cmd in ("table", "run") and not a.out.is_dir():
        print(f"foreign_isa: {a.out}: not a folder", file=sys.stderr)
        return 2
    if a.cmd == "compile":  # the workers run from the repository root: paths made absolute first
        compat = a.compat + ([f"flydsl.expr.buffer_ops={a.buffer_ops}"] if a.buffer_ops else [])
        if any("=" not in pair for pair in compat):
            ap.error(f"--compat takes MODULE=PATH, got {next(p for p in compat if '=' not in p)!r}")
        compat = [f"{name}={Path(path).resolve()}" for name, _, path in (pair.partition("=") for pair in compat)]
        checkouts = [c.resolve() for c in a.checkout]
        recs = compile_targets(checkouts, a.out.resolve(), compat, set(a.only.split(",")) - {""} or None)
        return 0 if all("error" not in r for r in recs) else 1
    if a.cmd == "table":
        if a.json:
            print(json.dumps([coverage(p) for p in sorted(a.out.glob("*.s"))], indent=1))
        else:
            print(table(a.out))
        return 0
    return run_all(a.out, a.checks)


if __name__ == "__main__":
    raise SystemExit(main())
