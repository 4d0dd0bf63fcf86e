"""The `bench` subcommand of `python -m conformance`: options and the table (measurement: conformance.tools.bench).

Exit codes: 0 every case ran (kernels of the default list that are unavailable here are
reported and skipped), 1 a built-in kernel asked for by --kernel is unavailable on this machine
or a case raised, 2 usage error (an unknown kernel name, a `package.module:attr` or
`path/to/file.py:attr` that cannot be imported or is not callable, a bad option or output path).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from conformance.cli.args import OutputError, add_command, add_kernel_option, non_negative_int, output_file, positive_int, write_output
from conformance.tools import bench
from conformance.tools.bench import DEFAULT_HEADS, DEFAULT_KERNELS, DEFAULT_KEYS, DEFAULT_N_Q, ORACLE, render_table, run_bench

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `bench` subcommand to an argparse subparsers object."""
    p = add_command(
        subparsers, "bench", "time backends (and the float64 oracle) on realistic shapes; record bytes gathered per second", bench.__doc__
    )
    add_arguments(p)
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------ arguments


def _int_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("expected a comma-separated list of integers")
    return [positive_int(p) for p in parts]


def _heads(text: str) -> int:
    value = positive_int(text)
    if value > 16:
        raise argparse.ArgumentTypeError(f"the contract allows 1..16 heads, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The bench options."""
    add_kernel_option(
        p,
        lead=f"kernel to time (repeatable; {ORACLE!r}: the float64 oracle)",
        when_absent=", ".join(DEFAULT_KERNELS),
        action="append",
        metavar="NAME",
    )
    p.add_argument("--n-q", type=_int_list, default=list(DEFAULT_N_Q), metavar="N,N,...", help="query rows per call (default 1,64,1024)")
    p.add_argument("--keys", type=positive_int, default=DEFAULT_KEYS, metavar="K", help=f"keys per query row (default {DEFAULT_KEYS})")
    p.add_argument("--heads", type=_heads, default=DEFAULT_HEADS, metavar="H", help=f"query heads, 1..16 (default {DEFAULT_HEADS})")
    p.add_argument("--iters", type=positive_int, default=20, metavar="N", help="timed calls per case, at most (default 20)")
    p.add_argument("--warmup", type=non_negative_int, default=3, metavar="N", help="untimed calls before timing (default 3)")
    p.add_argument(
        "--max-seconds",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="wall-clock budget per case; timing stops after it (at least one timed call; default 10)",
    )
    p.add_argument(
        "--cache-rows",
        type=positive_int,
        default=None,
        metavar="N",
        help="records in the KV cache (default 1,048,576 on a GPU, 65,536 on the CPU)",
    )
    p.add_argument("--device", default=None, help="torch device (default cuda when available, else cpu)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="data seed (default 0)")
    p.add_argument(
        "--no-native", action="store_true", help="skip the bare-kernel rows (each external kernel alone on inputs its adapter prepared)"
    )
    p.add_argument("--json", type=output_file, metavar="PATH", help="also write the report as JSON to PATH (a file; its folder must exist)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _unusable_name(kernels: list[str]) -> str | None:
    """One line for the first name that is no built-in kernel and cannot be resolved (an unknown
    name, a `package.module:attr` or file spec with empty parts, an import or syntax error, no
    such attribute or file, not callable): a usage error. Built-in names that
    are unavailable on this machine are not: they are reported as skipped rows (exit 1)."""
    from kernel.backend import BackendUnavailable
    from kernel.registry import BUILTIN_NAMES, resolve

    for name in kernels:
        if name == ORACLE or name in BUILTIN_NAMES:
            continue
        try:
            resolve(name)  # bench needs no numerics profile: only the name is checked
        except BackendUnavailable as err:
            return f"--kernel {name}: {err}"
    return None


def run(args: argparse.Namespace) -> int:
    """Handler of the `bench` subcommand; returns the exit code."""
    explicit = bool(args.kernel)
    kernels = list(dict.fromkeys(args.kernel)) if args.kernel else list(DEFAULT_KERNELS)
    problem = _unusable_name(kernels) if explicit else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        device = torch.device(args.device) if args.device else None
    except RuntimeError as err:
        print(f"error: bad --device: {err}", file=sys.stderr)
        return EXIT_USAGE
    if device is not None and device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda asked for but torch sees no CUDA device", file=sys.stderr)
        return EXIT_USAGE
    for n_q in args.n_q:
        if n_q * args.keys >= 2**31:
            print(f"error: n_q {n_q} x keys {args.keys} index entries do not fit int32 positions", file=sys.stderr)
            return EXIT_USAGE
    report = run_bench(
        kernels,
        args.n_q,
        keys=args.keys,
        heads=args.heads,
        iters=args.iters,
        warmup=args.warmup,
        max_seconds=args.max_seconds,
        cache_rows=args.cache_rows,
        device=device,
        seed=args.seed,
        native=not args.no_native,
        explicit=explicit,
        progress=None if args.quiet else sys.stderr,
    )
    sys.stdout.write(render_table(report))
    sys.stdout.flush()
    if args.json:
        try:
            write_output(args.json, json.dumps(report, indent=2, allow_nan=False) + "\n")
        except OutputError as err:
            print(f"error: --json: {err}", file=sys.stderr)
            return EXIT_USAGE
    return int(report["exit_code"])
