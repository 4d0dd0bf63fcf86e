"""Throughput of sparse MLA backends on realistic shapes (the library of `python -m conformance bench`).

Each backend runs the same call shape: n_q query rows (default 1, 64 and 1024), KEYS keys per
row (default 2048) drawn uniformly from a cache of CACHE_ROWS records (default 1,048,576 on a
GPU, 65,536 on the CPU; pow2 writer), H heads (default 16), softmax_scale 576^-0.5. A call is
timed with device events on a GPU (torch.cuda.Event around each call, so the time is device
time of the call including its host-side launches) or with time.perf_counter on the CPU (the
report says which). After WARMUP untimed calls, up to ITERS calls are timed, stopping early once
a case has used MAX_SECONDS; the median (and min) per call is reported.

Throughput is stated as record bytes gathered per second, n_q * KEYS * 656 B / median time, and
as a share of the device's peak memory bandwidth when the device is known by name (H200:
4.8 TB/s; otherwise "unknown"); TFLOP/s counts QK and PV of the row's heads,
2 * H * n_q * KEYS * (576 + 512) per call (FlashMLA computes 64 heads whatever H is). \
Several rows per call can hit the same record and caches help,
so the figure can exceed what DRAM alone would give at small shapes; it is a like-for-like
measure between backends, not a DRAM measurement.

Kernels (--kernel, repeatable; default: the catalogue's bench list, kernel.registry.bench_kernels(),
then oracle: flashmla, flashmla-prefill, torch-sdpa, emulated, oracle):
- any kernel spec (a built-in name of kernel.registry, `package.module:attr`, a file spec), run
  through its contract callable: the whole adapter. Each adapter to another project's kernel
  (kernel.peers) adds the row its declaration's `bare` names: the bare kernel on inputs the
  adapter prepared beforehand (kernel.peers.protocol.bare_call; --no-native leaves them out),
  e.g. `flashmla:h64-kernel` (flash_mla_with_kvcache at its native 64 heads, scheduler metadata
  reused as a server would), `flashmla-prefill:h64-kernel` (flash_mla_sparse_fwd on the prepared
  bf16 KV and slot indices, 64 heads), `torch-sdpa:bare-kernel`
  (aten._scaled_dot_product_efficient_attention on the gathered keys and bias; CUDA only), and
  `sglang-decode:bare-kernel`, `vllm-decode:bare-kernel`, `vllm-sparse:bare-kernel`;
- `oracle`: oracle.reference.reference, the float64 reference, on the same device.

Limits beside each row (when the device is known by name): gather = bytes per call / peak
memory bandwidth; fp64 = FLOP per call / peak fp64 (tensor-core) rate (H200: 67 TFLOP/s, spec
sheet). The oracle's limit is gather + fp64 (it must gather the records and do the arithmetic in
float64); every other row's limit is the gather limit. "x LIMIT" is the median over the limit.

Progress goes to stderr, the table to stdout, and the whole report as JSON to --json PATH.
The report's "exit_code" is 0 when every case ran (kernels of the default list that are
unavailable here are reported and skipped), 1 when a kernel asked for explicitly was
unavailable or a case raised.
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

import torch

from kernel.peers.protocol import PeerAdapter, bare_call
from kernel.record import LATENT_DIM, RECORD_BYTES, ROPE_DIM, encode_records
from kernel.registry import BackendUnavailable, adapter, bench_kernels, resolve

SCHEMA = 1
ORACLE = "oracle"
DEFAULT_KERNELS = (*bench_kernels(), ORACLE)
DEFAULT_N_Q = (1, 64, 1024)
DEFAULT_KEYS = 2048
DEFAULT_HEADS = 16
DEFAULT_CACHE_ROWS = {"cuda": 1 << 20, "cpu": 1 << 16}
SOFTMAX_SCALE = 576**-0.5

# Peak memory bandwidth (bytes/s) from vendor spec sheets, matched in order against the device
# name (more specific names first).
PEAK_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),
    ("H800", 3.35e12),
    ("H20", 4.0e12),
    ("B200", 8.0e12),
    ("MI355X", 8.0e12),
    ("MI350X", 8.0e12),
    ("MI325X", 6.0e12),
    ("MI300X", 5.3e12),
)

# Peak fp64 rate (FLOP/s, tensor-core / matrix units) from vendor spec sheets, matched like
# PEAK_BANDWIDTH; only devices whose sheet states it.
PEAK_FP64: tuple[tuple[str, float], ...] = (
    ("H200", 67e12),
    ("H100 NVL", 60e12),
    ("H100 PCIe", 51e12),
    ("H100", 67e12),
)


# ------------------------------------------------------------------------------ inputs


@dataclass
class BenchInputs:
    """One call's arguments: q bf16 [n_q, H, 576]; kv_cache uint8 [rows, 656]; indices int32
    [n_q * keys]; indptr int32 [n_q + 1] (row q = keys q*keys .. q*keys + keys - 1)."""

    q: torch.Tensor
    kv_cache: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    softmax_scale: float

    @property
    def n_q(self) -> int:
        return int(self.q.shape[0])

    @property
    def keys(self) -> int:
        return self.indices.numel() // max(self.n_q, 1)


def _generator(device: torch.device, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def build_cache(rows: int, device: torch.device | str, *, seed: int = 0, writer: str = "pow2", chunk_rows: int = 1 << 16) -> torch.Tensor:
    """A uint8 [rows, 656] cache of records from normal latent (block magnitudes 2^-4..2^4) and
    rope, encoded by `writer`, built on `device` in chunks of `chunk_rows`."""
    device = torch.device(device)
    gen = _generator(device, seed)
    cache = torch.empty(rows, RECORD_BYTES, dtype=torch.uint8, device=device)
    for begin in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - begin)
        mag = torch.pow(2.0, torch.randint(-4, 5, (n, 4, 1), generator=gen, device=device).to(torch.float32))
        latent = (torch.randn(n, 4, LATENT_DIM // 4, generator=gen, device=device) * mag).reshape(n, LATENT_DIM)
        rope = torch.randn(n, ROPE_DIM, generator=gen, device=device).to(torch.bfloat16)
        cache[begin : begin + n] = encode_records(latent, rope, writer)  # type: ignore[arg-type]
    return cache


def build_inputs(cache: torch.Tensor, n_q: int, keys: int, heads: int, *, seed: int = 0) -> BenchInputs:
    """n_q rows of `keys` indices uniform over the cache's rows, and a normal bf16 q."""
    device = cache.device
    gen = _generator(device, seed + 1 + n_q)
    rows = cache.shape[0]
    if n_q * keys >= 2**31:
        raise ValueError(f"n_q * keys = {n_q * keys} index entries do not fit int32 positions")
    indices = torch.randint(0, rows, (n_q * keys,), generator=gen, device=device, dtype=torch.int64).to(torch.int32)
    indptr = (torch.arange(n_q + 1, device=device, dtype=torch.int64) * keys).to(torch.int32)
    q = torch.randn(n_q, heads, LATENT_DIM + ROPE_DIM, generator=gen, device=device).to(torch.bfloat16)
    return BenchInputs(q=q, kv_cache=cache, indices=indices, indptr=indptr, softmax_scale=SOFTMAX_SCALE)


# ------------------------------------------------------------------------------ timing


@dataclass
class Timing:
    """Per-call times in milliseconds of the timed calls, and the timer that measured them."""

    samples_ms: list[float]
    timer: str
    warmup: int

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)


def timer_name(device: torch.device) -> str:
    """'cuda-events' on a GPU, 'perf_counter' otherwise."""
    return "cuda-events" if device.type == "cuda" else "perf_counter"


def call_ms(fn: Callable[[], object], device: torch.device) -> float:
    """One call of fn in ms: CUDA events around it on a GPU (device time), this process's CPU
    time on a CPU (all threads; not wall time, so other processes' load does not count)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) * 1e3


def time_calls(fn: Callable[[], object], device: torch.device, *, warmup: int, iters: int, max_seconds: float) -> Timing:
    """Run fn `warmup` times untimed, then time up to `iters` calls (at least one), stopping once
    `max_seconds` of wall time have passed since the first warm-up call."""
    t0 = time.perf_counter()
    done_warmup = 0
    for _ in range(warmup):
        fn()
        done_warmup += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if time.perf_counter() - t0 > max_seconds / 2:
            break
    samples: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(float(start.elapsed_time(end)))
            if time.perf_counter() - t0 > max_seconds:
                break
    else:
        for _ in range(iters):
            s = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - s) * 1e3)
            if time.perf_counter() - t0 > max_seconds:
                break
    return Timing(samples_ms=samples, timer=timer_name(device), warmup=done_warmup)


# ------------------------------------------------------------------------------ device facts


def peak_for_name(name: str) -> float | None:
    """Peak memory bandwidth in bytes/s of a device called `name` (PEAK_BANDWIDTH), None if unknown."""
    for key, value in PEAK_BANDWIDTH:
        if key.lower() in name.lower():
            return value
    return None


def fp64_peak_for_name(name: str) -> float | None:
    """Peak fp64 FLOP/s of a device called `name` (PEAK_FP64), None if unknown."""
    for key, value in PEAK_FP64:
        if key.lower() in name.lower():
            return value
    return None


def limits_ms(n_q: int, keys: int, heads: int, peak_bw: float | None, peak_fp64: float | None) -> tuple[float | None, float | None]:
    """(gather limit, fp64 arithmetic limit) in ms of one call: n_q * keys * 656 B / peak
    bandwidth, and 2 * H * n_q * keys * (576 + 512) FLOP / peak fp64 (None when unknown)."""
    gather = None if peak_bw is None else n_q * keys * RECORD_BYTES / peak_bw * 1e3
    arith = None if peak_fp64 is None else flops(n_q, keys, heads) / peak_fp64 * 1e3
    return gather, arith


def peak_bandwidth(device: torch.device) -> tuple[float | None, str]:
    """(peak bytes/s or None, device name) for `device`; CPUs are not in the table."""
    if device.type != "cuda":
        return None, platform.processor() or platform.machine() or "cpu"
    name = torch.cuda.get_device_name(device)
    return peak_for_name(name), name


def device_info(device: torch.device) -> dict[str, Any]:
    """Name, peak bandwidth and software versions of `device` (JSON-able)."""
    peak, name = peak_bandwidth(device)
    info: dict[str, Any] = {
        "device": str(device),
        "name": name,
        "peak_bandwidth_bytes_per_s": peak,
        "peak_bandwidth_source": "vendor spec sheet, matched by device name" if peak else "unknown for this device",
        "peak_fp64_flops_per_s": fp64_peak_for_name(name) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "timer": timer_name(device),
    }
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["hip"] = getattr(torch.version, "hip", None)
        props = torch.cuda.get_device_properties(device)
        info["multiprocessors"] = props.multi_processor_count
        info["memory_bytes"] = props.total_memory
    else:
        info["threads"] = torch.get_num_threads()
    return info


# ------------------------------------------------------------------------------ cases


@dataclass
class CaseResult:
    """One (kernel, n_q) measurement; status "ok", "skipped: ..." or "error: ...".

    Times in ms per call; bytes_per_call = n_q * keys * 656; gbps = bytes_per_call / median (1e9
    B/s); pct_peak = share of the device's peak bandwidth (None when unknown); flops_per_call =
    2 * heads * n_q * keys * (576 + 512) (QK and PV of the row's heads, padding not counted);
    tflops = flops_per_call / median (1e12 FLOP/s); gather_limit_ms / fp64_limit_ms = the call's
    limits (module docstring), limit_ms = the row's limit (oracle: gather + fp64; others: gather),
    x_limit = median / limit_ms (None where a limit is unknown)."""

    kernel: str
    label: str
    n_q: int
    keys: int
    heads: int
    status: str
    iters: int = 0
    warmup: int = 0
    median_ms: float | None = None
    min_ms: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    bytes_per_call: int = 0
    gbps: float | None = None
    pct_peak: float | None = None
    flops_per_call: int = 0
    tflops: float | None = None
    gather_limit_ms: float | None = None
    fp64_limit_ms: float | None = None
    limit_ms: float | None = None
    x_limit: float | None = None
    note: str = ""


class _Runner:
    """A kernel name turned into per-input callables (or the reason it cannot run)."""

    def __init__(self, name: str, device: torch.device, *, native: bool) -> None:
        self.name = name
        self.device = device
        self.native = native
        self.unavailable = ""
        self.backend: Any = None
        self.adapter: PeerAdapter | None = None
        self.engine: Any = None
        if name == ORACLE:
            return
        try:
            self.backend = resolve(name)
        except BackendUnavailable as err:
            self.unavailable = str(err)
            return
        if device.type not in self.backend.devices:
            self.unavailable = f"{name} runs on {'/'.join(self.backend.devices)} devices, not {device.type}"
            return
        self.adapter = adapter(name)
        if self.adapter is not None and self.adapter.declaration.bare is not None and native:
            try:
                self.engine = self.adapter.load()
            except BackendUnavailable:
                self.engine = None  # no bare row where the engine does not load

    def _bare_id(self) -> str:
        """The bare row's kernel id, "" when this runner has none."""
        bare = None if self.adapter is None or self.engine is None else self.adapter.declaration.bare
        return "" if bare is None else self.name + bare.suffix

    def variants(self, heads: int) -> list[tuple[str, str, str]]:
        """(kernel id, label, note) per row this runner produces."""
        if self.name == ORACLE:
            return [(ORACLE, "oracle (float64 reference)", "oracle.reference.reference, float64 on the device")]
        if self.adapter is None:
            return [(self.name, self.name, "")]
        d = self.adapter.declaration
        rows = [(self.name, d.label.format(heads=heads) if d.label else self.name, d.note)]
        if self._bare_id() and d.bare is not None:
            rows.append((self._bare_id(), d.bare.label, d.bare.note))
        return rows

    def row_heads(self, kernel_id: str, heads: int) -> int:
        """The heads row `kernel_id` computes: the bare kernel's own count where it declares one."""
        if kernel_id == self._bare_id() and self.adapter is not None and self.adapter.declaration.bare is not None:
            return self.adapter.declaration.bare.heads or heads
        return heads

    def callable_for(self, kernel_id: str, inputs: BenchInputs, heads: int, seed: int) -> tuple[Callable[[], object], str]:
        """(fn timed per call, reason it is refused or "")."""
        args = (inputs.q, inputs.kv_cache, inputs.indices, inputs.indptr, inputs.softmax_scale)
        if kernel_id == ORACLE:
            from oracle.reference import reference

            return (lambda: reference(*args)), ""
        if kernel_id == self._bare_id():
            assert self.adapter is not None and self.adapter.declaration.bare is not None  # what _bare_id checks
            q = inputs.q
            bare_heads = self.adapter.declaration.bare.heads
            if bare_heads is not None:  # a fresh q of the bare kernel's own head count
                gen = _generator(inputs.q.device, seed + 7)
                q = torch.randn(inputs.n_q, bare_heads, inputs.q.shape[-1], generator=gen, device=inputs.q.device).to(torch.bfloat16)
            return bare_call(self.adapter, self.engine, q, *args[1:]), ""
        support = self.backend.supports(*args, return_lse=True)
        if not support:
            return (lambda: None), support.reason
        backend = self.backend
        return (lambda: backend(*args, return_lse=True)), ""


def flops(n_q: int, keys: int, heads: int) -> int:
    """Multiply-adds x 2 of QK (576 dims) and PV (512 dims) for n_q rows of `keys` keys and `heads` heads."""
    return 2 * heads * n_q * keys * (LATENT_DIM + ROPE_DIM + LATENT_DIM)


def _progress(stream: TextIO | None, text: str) -> None:
    if stream is not None:
        stream.write(f"bench: {text}\n")
        stream.flush()


def run_bench(
    kernels: Sequence[str],
    n_qs: Sequence[int],
    *,
    keys: int = DEFAULT_KEYS,
    heads: int = DEFAULT_HEADS,
    iters: int = 20,
    warmup: int = 3,
    max_seconds: float = 10.0,
    cache_rows: int | None = None,
    device: torch.device | str | None = None,
    seed: int = 0,
    native: bool = True,
    explicit: bool = True,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Time `kernels` on each n_q; returns the report (JSON-able dict, see `render_table`).

    explicit: the kernels were asked for by name (an unavailable one makes the exit code 1)."""
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    rows = cache_rows or DEFAULT_CACHE_ROWS.get(device.type, DEFAULT_CACHE_ROWS["cpu"])
    info = device_info(device)
    peak = info["peak_bandwidth_bytes_per_s"]
    peak_fp64 = info["peak_fp64_flops_per_s"]
    _progress(
        progress,
        f"device {info['name']} ({device}); timer {info['timer']}"
        + ("" if device.type == "cuda" else " (CPU: wall clock per call, no device events)"),
    )
    _progress(progress, f"building a {rows:,}-row cache ({rows * RECORD_BYTES / 2**30:.2f} GiB, pow2 writer) on {device}")
    t0 = time.perf_counter()
    cache = build_cache(rows, device, seed=seed)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    _progress(progress, f"cache built in {time.perf_counter() - t0:.1f} s")

    runners = [_Runner(name, device, native=native) for name in kernels]
    results: list[CaseResult] = []
    failed = False
    for runner in runners:
        if runner.unavailable:
            _progress(progress, f"{runner.name}: unavailable: {runner.unavailable}")
            failed = failed or explicit
    for n_q in n_qs:
        inputs = build_inputs(cache, n_q, keys, heads, seed=seed)
        bytes_per_call = n_q * keys * RECORD_BYTES
        for runner in runners:
            if runner.unavailable:
                results.append(
                    CaseResult(
                        runner.name, runner.name, n_q, keys, heads, status=f"skipped: {runner.unavailable}", bytes_per_call=bytes_per_call
                    )
                )
                continue
            for kernel_id, label, note in runner.variants(heads):
                case_heads = runner.row_heads(kernel_id, heads)
                gather_ms, fp64_ms = limits_ms(n_q, keys, heads, peak, peak_fp64)
                limit = gather_ms if kernel_id != ORACLE else (None if gather_ms is None or fp64_ms is None else gather_ms + fp64_ms)
                result = CaseResult(
                    kernel_id,
                    label,
                    n_q,
                    keys,
                    case_heads,
                    status="ok",
                    bytes_per_call=bytes_per_call,
                    flops_per_call=flops(n_q, keys, case_heads),
                    gather_limit_ms=gather_ms,
                    fp64_limit_ms=fp64_ms,
                    limit_ms=limit,
                    note=note,
                )
                try:
                    fn, refused = runner.callable_for(kernel_id, inputs, heads, seed)
                    if refused:
                        result.status = f"skipped: {refused}"
                        results.append(result)
                        _progress(progress, f"{label} n_q={n_q}: skipped: {refused}")
                        continue
                    timing = time_calls(fn, device, warmup=warmup, iters=iters, max_seconds=max_seconds)
                except Exception as err:  # noqa: BLE001 -- a kernel that raises is reported, the others still run
                    result.status = f"error: {type(err).__name__}: {err}"
                    failed = True
                    results.append(result)
                    _progress(progress, f"{label} n_q={n_q}: {result.status}")
                    continue
                result.iters = len(timing.samples_ms)
                result.warmup = timing.warmup
                result.samples_ms = [round(s, 6) for s in timing.samples_ms]
                result.median_ms = timing.median_ms
                result.min_ms = timing.min_ms
                result.gbps = bytes_per_call / (timing.median_ms * 1e-3) / 1e9
                result.pct_peak = None if peak is None else 100.0 * bytes_per_call / (timing.median_ms * 1e-3) / peak
                result.tflops = result.flops_per_call / (timing.median_ms * 1e-3) / 1e12
                result.x_limit = None if not result.limit_ms else timing.median_ms / result.limit_ms
                results.append(result)
                _progress(
                    progress,
                    f"{label} n_q={n_q} keys={keys} H={case_heads}: median {timing.median_ms:.4f} ms over {result.iters} calls, "
                    f"{result.gbps:.4g} GB/s gathered",
                )
        del inputs
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {
        "tool": "conformance bench",
        "schema": SCHEMA,
        "device": info,
        "config": {
            "kernels": list(kernels),
            "n_q": list(n_qs),
            "keys": keys,
            "heads": heads,
            "iters": iters,
            "warmup": warmup,
            "max_seconds": max_seconds,
            "cache_rows": rows,
            "cache_bytes": rows * RECORD_BYTES,
            "writer": "pow2",
            "index_distribution": "uniform over the cache rows",
            "softmax_scale": SOFTMAX_SCALE,
            "seed": seed,
            "record_bytes": RECORD_BYTES,
            "bytes_per_call": "n_q * keys * 656",
        },
        "results": [asdict(r) for r in results],
        "exit_code": 1 if failed else 0,
    }


# ------------------------------------------------------------------------------ output


def _fmt(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def render_table(report: dict[str, Any]) -> str:
    """The report as a fixed-width text table (what goes to stdout)."""
    info, cfg = report["device"], report["config"]
    peak = info["peak_bandwidth_bytes_per_s"]
    peak_text = f"{peak / 1e12:.2f} TB/s ({info['peak_bandwidth_source']})" if peak else "unknown"
    timer = (
        "CUDA events around each call (device time)"
        if info["timer"] == "cuda-events"
        else "time.perf_counter around each call (CPU device: wall clock, no device events)"
    )
    lines = [
        f"device      {info['name']} ({info['device']}), torch {info['torch']}",
        f"peak BW     {peak_text}",
        (
            f"peak fp64   {_fmt(info.get('peak_fp64_flops_per_s') and info['peak_fp64_flops_per_s'] / 1e12, '.1f', 'unknown')}"
            f"{' TFLOP/s (vendor spec sheet, matched by device name)' if info.get('peak_fp64_flops_per_s') else ''}"
        ),
        (
            "limits      GATHER = n_q * keys * 656 B / peak BW; FP64 = FLOP / peak fp64; "
            "LIMIT = GATHER + FP64 for the oracle, GATHER for the others; x LIMIT = median / LIMIT"
        ),
        (
            f"timer       {timer}; median of up to {cfg['iters']} calls after {cfg['warmup']} warm-up calls, "
            f"<= {cfg['max_seconds']:g} s per case"
        ),
        (
            f"cache       {cfg['cache_rows']:,} records x {RECORD_BYTES} B = {cfg['cache_bytes'] / 2**30:.2f} GiB "
            f"({cfg['writer']} writer); indices {cfg['index_distribution']}"
        ),
        (
            f"call        {cfg['keys']} keys per row, H {cfg['heads']}, softmax_scale {cfg['softmax_scale']:.6g}; "
            "bytes gathered = n_q * keys * 656; FLOP = 2 * H * n_q * keys * (576 + 512)"
        ),
        "",
    ]
    header = (
        f"{'KERNEL':<40} {'N_Q':>5} {'KEYS':>5} {'H':>3} {'CALLS':>5} {'MEDIAN ms':>11} {'MIN ms':>11} "
        f"{'GB/s':>9} {'% PEAK':>7} {'TFLOP/s':>8} "
        f"{'GATHER ms':>10} {'FP64 ms':>9} {'x LIMIT':>8}  STATUS"
    )
    lines.append(header)
    lines.append("-" * len(header))
    for r in report["results"]:
        lines.append(
            f"{r['label'][:40]:<40} {r['n_q']:>5} {r['keys']:>5} {r['heads']:>3} {r['iters']:>5} "
            f"{_fmt(r['median_ms'], '.4f'):>11} {_fmt(r['min_ms'], '.4f'):>11} {_fmt(r['gbps'], '.4g'):>9} "
            f"{_fmt(r['pct_peak'], '.1f'):>7} {_fmt(r['tflops'], '.4g'):>8} "
            f"{_fmt(r.get('gather_limit_ms'), '.4f'):>10} {_fmt(r.get('fp64_limit_ms'), '.4f'):>9} "
            f"{_fmt(r.get('x_limit'), '.1f'):>8}  {r['status']}"
        )
    notes = sorted({(r["label"], r["note"]) for r in report["results"] if r["note"]})
    if notes:
        lines.append("")
        for label, note in notes:
            lines.append(f"note: {label}: {note}")
    return "\n".join(lines) + "\n"
