"""Where a kernel call's device and host time goes: torch.profiler over a few calls of each
kernel at each n_q (conformance.tools.bench's inputs: 16 heads, KEYS uniform keys per row).

For each (kernel row, n_q) prints the top operators by self device time and by self host time
(microseconds per call, summed over the profiled calls / calls), and writes a Chrome trace per
row under --trace-dir when given. Kernel rows are scripts/speed21_ops.kernel_calls's (oracle,
bound, emulated, each adapter and its bare kernel on a kept cache).

Usage: python3 scripts/gpu_op_profile.py [--n-q 64,4096] [--kernels oracle,emulated] [--calls 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed21_ops import kernel_calls  # noqa: E402

from conformance.tools.bench import build_cache, build_inputs  # noqa: E402


def _table(prof: profile, key: str, calls: int, top: int) -> str:
    rows = prof.key_averages()
    attr = {"device": "self_device_time_total", "host": "self_cpu_time_total"}[key]
    rows = sorted(rows, key=lambda e: getattr(e, attr, 0.0), reverse=True)[:top]
    total = sum(getattr(e, attr, 0.0) for e in prof.key_averages())
    lines = [f"  top by self {key} time (us per call; total {total / calls:.0f} us per call)"]
    for e in rows:
        value = getattr(e, attr, 0.0) / calls
        if value <= 0:
            break
        lines.append(f"    {value:>10.1f}  {e.count // calls:>6} x  {e.key[:100]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-q", default="64,4096")
    parser.add_argument("--keys", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--cache-rows", type=int, default=1 << 20)
    parser.add_argument("--kernels", default="oracle,emulated")
    parser.add_argument("--calls", type=int, default=3, help="profiled calls per row (after 2 warm-up calls)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--trace-dir", default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.top < 1:
        parser.error("--calls and --top must be >= 1")
    device = torch.device(args.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    cache = build_cache(args.cache_rows, device)
    for n_q in [int(x) for x in args.n_q.split(",")]:
        inputs = build_inputs(cache, n_q, args.keys, args.heads)
        for name in args.kernels.split(","):
            for row, fn in kernel_calls(name, inputs):
                fn()
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                with profile(activities=activities) as prof:
                    for _ in range(args.calls):
                        fn()
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                print(f"== {row} n_q {n_q}", flush=True)
                if device.type == "cuda":
                    print(_table(prof, "device", args.calls, args.top))
                print(_table(prof, "host", args.calls, args.top), flush=True)
                if args.trace_dir:
                    Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
                    prof.export_chrome_trace(str(Path(args.trace_dir) / f"{row.replace(':', '_')}_{n_q}.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
