"""Compile-only checks of the FlyDSL gfx950 kernel, runnable on a CPU machine.

Every configuration (heads, has_invalid, return_lse) is compiled for gfx950 in its own
subprocess (a failed lowering aborts the process) with flydsl's cache off and its final ISA
dumped; the ISA is then checked statically:

- the kernel uses v_mfma_scale_f32_16x16x128_f8f6f4 and global_load_lds_dwordx4 (and the other
  instructions the design names: ds_read_b64_tr_b8, the f16 and bf16 16x16x32 MFMAs);
- for a dump of one of the kernel's configurations (its symbol name says which), every check of
  kernel/flydsl/isa_checks.py: exact instruction counts derived from the algorithm,
  the 64-bit KV path, waits / M0 / barriers (a dataflow over the control-flow graph), MFMA
  operands and scales, the LDS layout, numerics (denormals, no FMA, no round-toward-zero),
  store guards and the reverse row order; failures read "[check id] message";
- no scratch: .private_segment_fixed_size == 0, .vgpr_spill_count == .sgpr_spill_count == 0,
  no scratch_* instruction, no private segment enabled;
- registers and LDS fit gfx950 at 2 waves per EU (SIMD), i.e. two 4-wave workgroups per CU.

gfx950 limits used (sources):
- Unified register file: 512 VGPRs per SIMD lane shared by the waves on the SIMD, at most 256
  arch VGPRs and 256 AGPRs per wave (LLVM commit b7611370, "The ISA states we can have a total
  of 512 registers, but a maximum of only 256 of each of AGPR and VGPR (gfx90a 3.6.4)"; ROCm GPU
  specifications: MI355X / gfx950 VGPR file 512 KiB per CU = 4 SIMDs x 64 lanes x 512 x 4 B).
  A wave's total is align(arch VGPRs, 4) + AGPRs when it uses AGPRs, else its arch VGPRs
  (LLVM AMDGPU::getTotalNumVGPRs for GFX90A-class targets, D119912), allocated in granules of
  8; at 2 waves per EU a wave may hold 512 / 2 = 256.
- SGPRs: at most 102 addressable per wave on the GFX9 family (LLVM AMDGPUUsage); the SGPR file
  (800 per SIMD) does not limit 2 waves.
- LDS: 160 KiB per CU on gfx950 (ROCm GPU specifications, MI355X: LDS 160 KiB; IREE's CDNA4
  target: max workgroup memory 160 * 1024); two workgroups per CU leave 80 KiB each.

Toolchain: flydsl 0.4.x ships MLIR/LLVM but links the code object with `ld.lld` found under
`$ROCM_PATH/llvm/bin`. `ensure_toolchain()` uses an existing ROCm (ROCM_PATH or /opt/rocm) when
it has one, else a directory it manages whose llvm/bin/ld.lld runs the system `ld.lld` (Debian's
lld) or `python -m ziglang ld.lld` (pip install ziglang); otherwise it fails saying so.

CLI:
    python -m kernel.flydsl.compile --heads 1..16 --has-invalid 0,1 --return-lse 0,1 \\
        [--jobs N] [--per-process K] [--json PATH] [--keep-isa DIR]

`compile_configs(..., source=PATH)` (and $FLYDSL_KERNEL_SOURCE in the worker) compiles a copy of
the kernel module instead of gfx950.py: the mutation self-test (isa_edits.py) uses it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernel.isa.asm import Program, parse_program

REPO_ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- gfx950 limits (see docstring)
GFX950_VGPRS_PER_SIMD_LANE = 512
GFX950_MAX_ARCH_VGPRS = 256
GFX950_MAX_AGPRS = 256
GFX950_VGPR_GRANULE = 8
GFX950_MAX_SGPRS = 102
GFX950_LDS_PER_CU = 160 * 1024
WAVES_PER_EU = 2
WAVES_PER_WORKGROUP = 4
SIMDS_PER_CU = 4
VGPR_BUDGET = GFX950_VGPRS_PER_SIMD_LANE // WAVES_PER_EU  # 256 per wave
WORKGROUPS_PER_CU = WAVES_PER_EU * SIMDS_PER_CU // WAVES_PER_WORKGROUP  # 2
LDS_BUDGET = GFX950_LDS_PER_CU // WORKGROUPS_PER_CU  # 80 KiB per workgroup

REQUIRED_INSTRUCTIONS = (
    "v_mfma_scale_f32_16x16x128_f8f6f4",
    "global_load_lds_dwordx4",
    "ds_read_b64_tr_b8",
    "v_mfma_f32_16x16x32_f16",
    "v_mfma_f32_16x16x32_bf16",
)

ALL_HEADS = tuple(range(1, 17))
Config = tuple[int, bool, bool]

DEFAULT_TIMEOUT_S = 900.0


class ToolchainError(RuntimeError):
    """No usable ld.lld for flydsl's final link; the message says how to get one."""


# ================================================================ configurations


def parse_heads(spec: str) -> list[int]:
    """'1..16', '4', '1,2,8' or '1..4,16' -> sorted distinct head counts in 1..16."""
    heads: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if ".." in part:
            lo, hi = (int(x) for x in part.split("..", 1))
            heads.update(range(lo, hi + 1))
        else:
            heads.add(int(part))
    bad = [h for h in heads if not 1 <= h <= 16]
    if bad or not heads:
        raise ValueError(f"heads must lie in 1..16, got {spec!r}")
    return sorted(heads)


def parse_flags(spec: str) -> list[bool]:
    """'0,1' / '0' / '1' -> the booleans listed."""
    out: list[bool] = []
    for part in spec.split(","):
        part = part.strip()
        if part not in ("0", "1"):
            raise ValueError(f"flag values are 0 or 1, got {spec!r}")
        if bool(int(part)) not in out:
            out.append(bool(int(part)))
    return out


def all_configs(
    heads: Iterable[int] = ALL_HEADS, has_invalid: Iterable[bool] = (False, True), return_lse: Iterable[bool] = (False, True)
) -> list[Config]:
    """Every (heads, has_invalid, return_lse) combination, heads-major."""
    return [(h, hi, rl) for h in heads for hi in has_invalid for rl in return_lse]


def config_label(cfg: Config) -> str:
    h, hi, rl = cfg
    return f"h{h}_i{int(hi)}_l{int(rl)}"


# ================================================================ toolchain


def _is_exec(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def default_toolchain_dir() -> Path:
    """Where the managed ROCM_PATH-like directory lives (env FLYDSL_COMPILE_TOOLCHAIN_DIR wins)."""
    env = os.environ.get("FLYDSL_COMPILE_TOOLCHAIN_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "sparse-mla-flydsl" / "rocm"


def ensure_toolchain(managed_dir: Path | None = None) -> Path:
    """A directory to use as ROCM_PATH, whose llvm/bin/ld.lld works; ToolchainError otherwise.

    Order: $ROCM_PATH, /opt/rocm, then a managed directory whose ld.lld is a shim to the system
    ld.lld or to `python -m ziglang ld.lld` (created on first use, atomically). The managed
    directory also gets the project's stand-in device libraries (amdgcn/bitcode/ocml.bc and
    ockl.bc, kernel.flydsl.devicelibs: the few ocml / ockl functions FlyDSL kernels call,
    semantics stated there), so kernels using fx.log2 / fx.exp / grid_dim compile without ROCm.
    """
    from kernel.flydsl.devicelibs import write_device_libs

    for cand in (os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if cand and _is_exec(Path(cand) / "llvm" / "bin" / "ld.lld"):
            return Path(cand)
    root = managed_dir or default_toolchain_dir()
    shim = root / "llvm" / "bin" / "ld.lld"
    if _is_exec(shim) and _linker_works(shim):
        write_device_libs(root)
        return root
    system_lld = shutil.which("ld.lld")
    if system_lld is None:
        versioned = sorted(Path("/usr/bin").glob("ld.lld-*"))
        system_lld = str(versioned[-1]) if versioned else None
    if system_lld is not None:
        body = f'#!/bin/sh\nexec "{system_lld}" "$@"\n'
    else:
        try:
            import ziglang  # noqa: F401
        except ImportError:
            raise ToolchainError(
                "flydsl needs ld.lld under $ROCM_PATH/llvm/bin for its final link and none was found: "
                "pip install ziglang (a shim running `python -m ziglang ld.lld` is then created), "
                "or apt-get install lld, or set ROCM_PATH to a ROCm installation"
            ) from None
        body = f'#!/bin/sh\nexec "{sys.executable}" -m ziglang ld.lld "$@"\n'
    shim.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=shim.parent, prefix=".ld.lld.")
    with os.fdopen(fd, "w") as fh:
        fh.write(body)
    os.chmod(tmp, 0o755)
    os.replace(tmp, shim)
    if not _linker_works(shim):
        raise ToolchainError(f"the ld.lld shim {shim} does not run (`ld.lld --version` failed)")
    write_device_libs(root)
    return root


def _linker_works(path: Path) -> bool:
    try:
        res = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and "LLD" in (res.stdout + res.stderr)


def flydsl_version() -> str | None:
    """Installed flydsl version, or None when it is not installed (imports nothing heavy)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version("flydsl")
    except PackageNotFoundError:
        return None


def compile_env(rocm_path: Path, dump_dir: Path) -> dict[str, str]:
    """Environment of a compile subprocess: gfx950 compile-only, cache off, ISA dumped."""
    env = dict(os.environ)
    env.update(
        {
            "COMPILE_ONLY": "1",
            "ARCH": "gfx950",
            "FLYDSL_GPU_ARCH": "gfx950",
            "FLYDSL_RUNTIME_ENABLE_CACHE": "0",
            "FLYDSL_DEBUG_DUMP_ASM": "1",
            "FLYDSL_DUMP_DIR": str(dump_dir),
            "ROCM_PATH": str(rocm_path),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
        }
    )
    env.pop("FLYDSL_DUMP_IR", None)
    return env


# ================================================================ ISA checks


@dataclass
class IsaStats:
    """Resource use read from one kernel's ISA dump (counts in registers, sizes in bytes)."""

    arch_vgprs: int
    agprs: int
    total_vgprs: int  # align(arch, 4) + agprs when agprs > 0 (GFX90A rule), else arch
    allocated_vgprs: int  # total rounded up to the allocation granule (8)
    sgprs: int
    lds_bytes: int
    private_segment_bytes: int
    vgpr_spills: int
    sgpr_spills: int
    scratch_instructions: int
    instruction_counts: dict[str, int] = field(default_factory=dict)


def _symbol_int(prog: Program, suffix: str) -> int | None:
    """The first `.set NAME.suffix, N` of the dump."""
    return next((v for k, v in prog.symbols.items() if k.endswith("." + suffix)), None)


def parse_isa(text: str | Program) -> IsaStats:
    """Resource use and instruction counts of the (single) kernel in an ISA dump (its text or
    the kernel.isa.asm parse of it)."""
    prog = parse_program(text) if isinstance(text, str) else text
    arch = _symbol_int(prog, "num_vgpr")
    if arch is None:
        arch = prog.directives.get(".amdhsa_next_free_vgpr") or 0
    agpr = _symbol_int(prog, "num_agpr")
    if agpr is None:
        agpr = prog.meta_int(".agpr_count") or 0
    total = ((arch + 3) // 4) * 4 + agpr if agpr > 0 else arch
    allocated = ((max(total, 1) + GFX950_VGPR_GRANULE - 1) // GFX950_VGPR_GRANULE) * GFX950_VGPR_GRANULE
    mnemonics = [i.mnemonic for i in prog.instrs]
    counts: dict[str, int] = {}
    for name in REQUIRED_INSTRUCTIONS:
        counts[name] = sum(1 for m in mnemonics if m == name)
    # Flat-scratch instructions; MUBUF scratch would need a private segment, checked separately.
    scratch = sum(1 for m in mnemonics if m.startswith("scratch_"))
    return IsaStats(
        arch_vgprs=arch,
        agprs=agpr,
        total_vgprs=total,
        allocated_vgprs=allocated,
        sgprs=prog.meta_int(".sgpr_count") or 0,
        lds_bytes=prog.meta_int(".group_segment_fixed_size") or 0,
        private_segment_bytes=prog.meta_int(".private_segment_fixed_size") or 0,
        vgpr_spills=prog.meta_int(".vgpr_spill_count") or 0,
        sgpr_spills=prog.meta_int(".sgpr_spill_count") or 0,
        scratch_instructions=scratch,
        instruction_counts=counts,
    )


def check_isa(text: str) -> tuple[IsaStats, list[str]]:
    """Parse an ISA dump and list every violated check (empty list: all pass; AsmParseError
    naming the line for a dump the reader cannot read)."""
    failures: list[str] = []
    prog = parse_program(text)
    for key in (".private_segment_fixed_size", ".vgpr_spill_count", ".sgpr_spill_count", ".group_segment_fixed_size"):
        if prog.meta_int(key) is None:
            failures.append(f"metadata key {key} missing from the ISA dump")
    st = parse_isa(prog)
    for name, n in st.instruction_counts.items():
        if n == 0:
            failures.append(f"{name} not used")
    if st.private_segment_bytes != 0:
        failures.append(f"private segment (scratch) of {st.private_segment_bytes} bytes")
    if prog.directives.get(".amdhsa_enable_private_segment", 0) != 0:
        failures.append("private segment enabled")
    if st.vgpr_spills:
        failures.append(f"{st.vgpr_spills} VGPR spills")
    if st.sgpr_spills:
        failures.append(f"{st.sgpr_spills} SGPR spills")
    if st.scratch_instructions:
        failures.append(f"{st.scratch_instructions} scratch instructions")
    if st.arch_vgprs > GFX950_MAX_ARCH_VGPRS:
        failures.append(f"{st.arch_vgprs} arch VGPRs > {GFX950_MAX_ARCH_VGPRS}")
    if st.agprs > GFX950_MAX_AGPRS:
        failures.append(f"{st.agprs} AGPRs > {GFX950_MAX_AGPRS}")
    if st.allocated_vgprs > VGPR_BUDGET:
        failures.append(
            f"{st.allocated_vgprs} VGPRs (arch {st.arch_vgprs} + AGPR {st.agprs}, granule {GFX950_VGPR_GRANULE}) "
            f"> {VGPR_BUDGET} allowed at {WAVES_PER_EU} waves per EU"
        )
    if st.sgprs > GFX950_MAX_SGPRS:
        failures.append(f"{st.sgprs} SGPRs > {GFX950_MAX_SGPRS}")
    if st.lds_bytes > LDS_BUDGET:
        failures.append(f"{st.lds_bytes} bytes of LDS > {LDS_BUDGET} ({WORKGROUPS_PER_CU} workgroups per CU)")
    # The algorithm checks (kernel/flydsl/isa_checks.py) apply to a dump of one of the
    # kernel's configurations (its symbol name says which).
    from kernel.flydsl import isa_checks

    if isa_checks.KERNEL_RE.search(text):
        failures += [str(f) for f in isa_checks.check_program(prog)]
    return st, failures


# ================================================================ compiling


@dataclass
class ConfigResult:
    """Outcome for one configuration; seconds = in-process build + lowering + ISA dump."""

    heads: int
    has_invalid: bool
    return_lse: bool
    ok: bool
    seconds: float | None = None
    cpu_seconds: float | None = None  # CPU time of the build + lowering + ISA dump
    process_seconds: float | None = None  # wall time of its subprocess (shared when grouped)
    process_cpu_seconds: float | None = None  # CPU time of that subprocess, imports included
    configs_in_process: int = 1
    stats: IsaStats | None = None
    failures: list[str] = field(default_factory=list)
    error: str = ""
    isa_path: str = ""

    @property
    def label(self) -> str:
        return config_label((self.heads, self.has_invalid, self.return_lse))


def _kernel_module(source: str | None):  # type: ignore[no-untyped-def]
    """The kernel module: kernel.flydsl.gfx950, or a copy of it at `source` (a mutant
    of the self-test, isa_edits.py), loaded under its own module name."""
    if not source:
        from kernel.flydsl import gfx950

        return gfx950
    import importlib.util

    spec = importlib.util.spec_from_file_location("flydsl_gfx950_variant", source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a kernel module from {source}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _worker(configs: Sequence[Config]) -> int:
    """Subprocess body: compile each configuration in turn, one JSON line per finished one.
    $FLYDSL_KERNEL_SOURCE names a copy of the kernel source to compile instead of gfx950.py."""
    mod = _kernel_module(os.environ.get("FLYDSL_KERNEL_SOURCE"))
    build_launcher, kernel_name = mod.build_launcher, mod.kernel_name

    for h, hi, rl in configs:
        t0, c0 = time.perf_counter(), time.process_time()
        launcher = build_launcher(h, hi, rl)
        # Compile-only: dummy addresses and sizes; nothing is launched.
        launcher(1 << 40, 1 << 41, 1 << 42, 1 << 43, 1 << 44, 1 << 45, 1 << 46, 1, 576 * h, 576, 512 * h, 512, 4096, 0.1)
        rec = {
            "config": [h, hi, rl],
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
            "kernel": kernel_name(h, hi, rl),
        }
        print(json.dumps(rec), flush=True)
    t = os.times()  # the linker runs as a child process: count it too
    print(json.dumps({"process_cpu_seconds": t.user + t.system + t.children_user + t.children_system}), flush=True)
    return 0


def _find_isa(dump_dir: Path, name: str) -> Path | None:
    hits = sorted((dump_dir / name).glob("*final_isa.s"))
    return hits[-1] if hits else None


def _run_group(
    configs: Sequence[Config], rocm_path: Path, dump_root: Path, timeout: float, source: str | None = None
) -> list[ConfigResult]:
    from kernel.flydsl.gfx950 import kernel_name

    dump_dir = Path(tempfile.mkdtemp(prefix="grp_", dir=dump_root))
    spec = ";".join(f"{h},{int(hi)},{int(rl)}" for h, hi, rl in configs)
    cmd = [sys.executable, "-m", "kernel.flydsl.compile", "--worker", spec]
    env = compile_env(rocm_path, dump_dir)
    if source:
        env["FLYDSL_KERNEL_SOURCE"] = str(source)
    else:
        env.pop("FLYDSL_KERNEL_SOURCE", None)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(REPO_ROOT),
            check=False,
        )
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        stderr = f"timed out after {timeout:.0f} s"
        rc = -1
    wall = time.perf_counter() - t0
    done: dict[Config, dict] = {}
    proc_cpu = None
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if "config" in rec:
            h, hi, rl = rec["config"]
            done[(int(h), bool(hi), bool(rl))] = rec
        elif "process_cpu_seconds" in rec:
            proc_cpu = float(rec["process_cpu_seconds"])
    results = []
    for cfg in configs:
        h, hi, rl = cfg
        if cfg not in done:
            tail = "\n".join((stderr or "").strip().splitlines()[-25:])
            results.append(
                ConfigResult(
                    h,
                    hi,
                    rl,
                    ok=False,
                    process_seconds=wall,
                    configs_in_process=len(configs),
                    error=f"compile process exited with {rc} before finishing {config_label(cfg)}:\n{tail}",
                )
            )
            continue
        times = {
            "seconds": float(done[cfg]["seconds"]),
            "cpu_seconds": float(done[cfg]["cpu_seconds"]),
            "process_seconds": wall,
            "process_cpu_seconds": proc_cpu,
            "configs_in_process": len(configs),
        }
        isa = _find_isa(dump_dir, kernel_name(h, hi, rl))
        if isa is None:
            results.append(ConfigResult(h, hi, rl, ok=False, error=f"no ISA dump found under {dump_dir}", **times))
            continue
        stats, failures = check_isa(isa.read_text())
        results.append(ConfigResult(h, hi, rl, ok=not failures, stats=stats, failures=failures, isa_path=str(isa), **times))
    return results


def compile_configs(
    configs: Sequence[Config],
    *,
    jobs: int = 1,
    per_process: int = 1,
    dump_root: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    source: str | None = None,
) -> list[ConfigResult]:
    """Compile and check every configuration: `per_process` configurations per subprocess (a
    group whose process dies is retried one configuration per process), `jobs` subprocesses at
    once. ISA dumps go under `dump_root` (a temporary directory when None; it is then removed).
    `source`: a copy of the kernel module to compile instead of gfx950.py (isa_edits.py)."""
    rocm_path = ensure_toolchain()
    own_root = dump_root is None
    root = Path(tempfile.mkdtemp(prefix="flydsl_isa_")) if own_root else Path(dump_root)
    root.mkdir(parents=True, exist_ok=True)
    per_process = max(1, int(per_process))
    groups = [list(configs[i : i + per_process]) for i in range(0, len(configs), per_process)]
    out: dict[Config, ConfigResult] = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, int(jobs))) as pool:
            futures = [pool.submit(_run_group, g, rocm_path, root, timeout, source) for g in groups]
            for fut in futures:
                for res in fut.result():
                    out[(res.heads, res.has_invalid, res.return_lse)] = res
        retry = [cfg for cfg, res in out.items() if not res.ok and res.seconds is None and res.configs_in_process > 1]
        if retry:
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, int(jobs))) as pool:
                for fut in [pool.submit(_run_group, [cfg], rocm_path, root, timeout, source) for cfg in retry]:
                    for res in fut.result():
                        out[(res.heads, res.has_invalid, res.return_lse)] = res
    finally:
        if own_root:
            shutil.rmtree(root, ignore_errors=True)
    return [out[cfg] for cfg in configs]


# ================================================================ CLI


def _format_table(results: Sequence[ConfigResult]) -> str:
    head = (
        f"{'config':<14} {'ok':<4} {'compile_s':>9} {'cpu_s':>6} {'proc_s':>7} {'pcpu_s':>6} "
        f"{'vgpr':>5} {'agpr':>5} {'alloc':>5} {'sgpr':>5} {'lds':>7} {'scratch':>7}  notes"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        st = r.stats
        cols = [
            f"{r.label:<14}",
            f"{'yes' if r.ok else 'NO':<4}",
            f"{r.seconds:9.2f}" if r.seconds is not None else f"{'-':>9}",
            f"{r.cpu_seconds:6.2f}" if r.cpu_seconds is not None else f"{'-':>6}",
            f"{r.process_seconds:7.2f}" if r.process_seconds is not None else f"{'-':>7}",
            f"{r.process_cpu_seconds:6.2f}" if r.process_cpu_seconds is not None else f"{'-':>6}",
        ]
        if st is not None:
            cols += [
                f"{st.arch_vgprs:5d}",
                f"{st.agprs:5d}",
                f"{st.allocated_vgprs:5d}",
                f"{st.sgprs:5d}",
                f"{st.lds_bytes:7d}",
                f"{st.private_segment_bytes:7d}",
            ]
        else:
            cols += [f"{'-':>5}"] * 4 + [f"{'-':>7}"] * 2
        notes = "; ".join(r.failures) if r.failures else (r.error.splitlines()[0] if r.error else "")
        lines.append(" ".join(cols) + "  " + notes)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; exit status 0 when every configuration compiled and passed its checks,
    1 when one did not, 2 when the toolchain or flydsl is missing."""
    ap = argparse.ArgumentParser(prog="python -m kernel.flydsl.compile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", default="1..16", help="head counts: 1..16, 8, or 1,2,16 (default 1..16)")
    ap.add_argument("--has-invalid", default="0,1", help="0, 1 or 0,1 (default 0,1)")
    ap.add_argument("--return-lse", default="0,1", help="0, 1 or 0,1 (default 0,1)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile subprocesses at once (default: CPUs)")
    ap.add_argument("--per-process", type=int, default=1, help="configurations per subprocess (default 1)")
    ap.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here")
    ap.add_argument("--keep-isa", default=None, help="keep the ISA dumps under this directory")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per subprocess")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker is not None:
        cfgs = []
        for item in args.worker.split(";"):
            h, hi, rl = item.split(",")
            cfgs.append((int(h), bool(int(hi)), bool(int(rl))))
        return _worker(cfgs)

    try:
        configs = all_configs(parse_heads(args.heads), parse_flags(args.has_invalid), parse_flags(args.return_lse))
    except ValueError as err:
        ap.error(str(err))
    ver = flydsl_version()
    if ver is None:
        print("flydsl is not installed: pip install 'flydsl>=0.4,<0.5'", file=sys.stderr)
        return 2
    if not ver.startswith("0.4."):
        print(f"flydsl {ver} is installed; the kernel is written for flydsl 0.4.x", file=sys.stderr)
        return 2
    try:
        rocm = ensure_toolchain()
    except ToolchainError as err:
        print(str(err), file=sys.stderr)
        return 2
    print(
        f"flydsl {ver}; ROCM_PATH for the link: {rocm}; {len(configs)} configurations, {args.per_process} per process, {args.jobs} at once",
        flush=True,
    )
    t0 = time.perf_counter()
    results = compile_configs(
        configs,
        jobs=args.jobs,
        per_process=args.per_process,
        dump_root=Path(args.keep_isa) if args.keep_isa else None,
        timeout=args.timeout,
    )
    wall = time.perf_counter() - t0
    print(_format_table(results))
    secs = [r.seconds for r in results if r.seconds is not None]
    cpus = [r.cpu_seconds for r in results if r.cpu_seconds is not None]
    # Process CPU time, counted once per subprocess.
    proc_cpu = {(r.process_seconds, r.process_cpu_seconds) for r in results if r.process_cpu_seconds is not None}
    n_ok = sum(r.ok for r in results)
    summary = (
        f"{n_ok}/{len(results)} passed; wall {wall:.1f} s with {args.jobs} jobs; compile seconds "
        f"sum {sum(secs):.1f}, mean {sum(secs) / max(1, len(secs)):.2f}, max {max(secs, default=0.0):.2f}; "
        f"compile CPU seconds sum {sum(cpus):.1f}; subprocess CPU seconds sum {sum(c for _, c in proc_cpu):.1f}"
    )
    print(summary)
    if args.json_path:
        payload = {
            "flydsl": ver,
            "rocm_path": str(rocm),
            "jobs": args.jobs,
            "per_process": args.per_process,
            "wall_seconds": wall,
            "limits": {"vgpr_budget": VGPR_BUDGET, "lds_budget": LDS_BUDGET, "max_sgprs": GFX950_MAX_SGPRS},
            "results": [dict(asdict(r), label=r.label) for r in results],
        }
        Path(args.json_path).write_text(json.dumps(payload, indent=2))
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
