"""The `bench` subcommand of `python -m conformance` (see conformance.bench for what it measures)."""

from __future__ import annotations

import argparse
from typing import Any

from conformance import bench


def register(subparsers: Any) -> None:
    """Add the `bench` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "bench",
        help="time backends (and the float64 oracle) on realistic shapes; record bytes gathered per second",
        description=bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_arguments(p)
    p.set_defaults(func=bench.run)
