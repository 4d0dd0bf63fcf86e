"""What the routines share: argparse types and options (device, problem shape, timing, --json,
--against), and writing a routine's JSON report. Inputs, timers and the machine's limits come from
conformance.tools.bench (`build_cache`, `build_inputs`, `time_calls`, `call_ms`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from conformance.tools.bench import DEFAULT_CACHE_ROWS


def int_list(text: str) -> list[int]:
    """argparse type: comma-separated positive integers."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def device(text: str) -> torch.device:
    """argparse type: a torch device that exists here ("cuda" needs a CUDA GPU)."""
    try:
        dev = torch.device(text)
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as err:  # AssertionError: torch without CUDA
        raise argparse.ArgumentTypeError(f"{text!r} is not usable here: {str(err).splitlines()[0]}") from None
    return dev


def default_device() -> str:
    """cuda when a GPU is there, else cpu."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def add_device(parser: argparse.ArgumentParser) -> None:
    """--device (default: cuda when available, else cpu)."""
    parser.add_argument("--device", type=device, default=None, help="cpu or cuda (default: cuda when available, else cpu)")


def resolve_device(args: argparse.Namespace) -> torch.device:
    """args.device, or the default device."""
    return args.device if args.device is not None else torch.device(default_device())


def add_shape(
    parser: argparse.ArgumentParser, *, n_q: Sequence[int] = (1, 64, 1024), keys: int = 2048, heads: int = 16, cache_rows: bool = True
) -> None:
    """The bench's problem shape: --n-q N,N,..., --keys, --heads and (cache_rows) --cache-rows."""
    parser.add_argument("--n-q", type=int_list, default=list(n_q), metavar="N,N,...", help=f"query rows per call (default {n_q})")
    parser.add_argument("--keys", type=positive, default=keys, metavar="K", help=f"keys per query row (default {keys})")
    parser.add_argument("--heads", type=positive, default=heads, metavar="H", help=f"query heads (default {heads})")
    if cache_rows:
        default = ", ".join(f"{d} {n}" for d, n in DEFAULT_CACHE_ROWS.items())
        parser.add_argument("--cache-rows", type=positive, default=None, metavar="R", help=f"records in the cache (default: {default})")


def cache_rows(args: argparse.Namespace, dev: torch.device) -> int:
    """args.cache_rows, or the bench's default for the device."""
    return args.cache_rows or DEFAULT_CACHE_ROWS["cuda" if dev.type == "cuda" else "cpu"]


def add_timing(parser: argparse.ArgumentParser, *, iters: int = 20, warmup: int = 3) -> None:
    """--iters (timed calls) and --warmup (untimed calls first)."""
    parser.add_argument("--iters", type=positive, default=iters, metavar="N", help=f"timed calls per case (default {iters})")
    parser.add_argument("--warmup", type=int, default=warmup, metavar="N", help=f"untimed calls first (default {warmup})")


def add_json(parser: argparse.ArgumentParser) -> None:
    """--json PATH: the routine's numbers as JSON."""
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write every number as JSON here")


def add_against(parser: argparse.ArgumentParser, what: str) -> None:
    """--against REV: compare with `what` as committed at a git revision (benchmarks.revisions)."""
    parser.add_argument("--against", default=None, metavar="REV", help=f"also run {what} as committed at git revision REV")


def write_json(path: Path | None, data: Any) -> None:
    """Write `data` to `path` (when given) as indented JSON; OSError names the path."""
    if path is not None:
        path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    """Parse argv; the exit code instead when argparse exits (0 for --help, 2 for a usage error)."""
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
