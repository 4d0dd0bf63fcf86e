"""`python -m conformance fast-paths [--device D] [--check] [--exhaustive]`: the fast paths on a device.

A fast path is a kernel (Triton, CUDA) that replaces a sequence of torch operations in an
adapter, the emulated kernel or the oracle, used on a device only after its self-check reproduced
those operations' results there (kernel.fastpath). This prints, per path, the variant it takes on
the device under the current CONFORMANCE_FAST_PATHS setting (`torch`: the torch operations) and
why the others are not taken. --check runs every variant's self-check where it may run and prints
each result; --exhaustive adds the emulated kernel's fp8 conversions checked on every f32 bit
pattern (2^32, minutes; without it 2^24 random ones).

CONFORMANCE_FAST_PATHS: unset or `auto` (each path's default variants), `off` (every path takes the
torch operations), or a comma list of PATH=auto|off|triton|VARIANT (a leading `auto` or `off` sets
the paths not listed), e.g. `emulated.pv=triton,oracle.products=off`.

Exit codes: 0 listed, and with --check every self-check that could run passed; 1 a self-check or a
conversion check failed; 2 a bad setting or device.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from conformance.cli.args import add_command

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `fast-paths` subcommand to an argparse subparsers object."""
    p = add_command(
        subparsers,
        "fast-paths",
        "the fast paths (kernels used after a self-check against the torch operations) and their variant on a device",
        __doc__,
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--check", action="store_true", help="run every variant's self-check where it may run, and the conversion checks")
    p.add_argument("--exhaustive", action="store_true", help="with --check: the fp8 conversions on all 2^32 f32 patterns")
    p.set_defaults(func=run)


def _load_paths() -> None:
    """Import the modules that register the fast paths."""
    import kernel.emulated.gfx950  # noqa: F401 - emulated.decode, state, scores, pv, qk
    import kernel.peers.bf16_key_decode  # noqa: F401 - peers.bf16-keys
    import oracle.fused_products  # noqa: F401 - oracle.products
    import oracle.rows  # noqa: F401 - oracle.key-decode


def run(args: argparse.Namespace) -> int:
    """Handler of `fast-paths`."""
    import torch

    from kernel import fastpath

    try:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("no CUDA device is visible to torch")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    except (RuntimeError, ValueError) as err:
        print(f"fast-paths: --device {args.device}: {err}", file=sys.stderr)
        return EXIT_USAGE
    _load_paths()
    paths = fastpath.registered()
    try:
        settings = {name: fastpath.setting(name) for name in paths}
    except ValueError as err:
        print(f"fast-paths: {err}", file=sys.stderr)
        return EXIT_USAGE
    failed = False
    width = max(len(name) for name in paths)
    raw = os.environ.get(fastpath.SETTING, "")
    print(f"device {device}; {fastpath.SETTING}={raw or '(unset: auto)'}")
    for name, path in paths.items():
        variant = fastpath.choose(name, device)
        others = [v for v in (*path.variants, *path.opt_in) if v != variant]
        why = [f"{v}: {path.eligible(device, v) or 'eligible'}" for v in others]
        print(f"{name:<{width}}  {variant or 'torch':<6}  setting {settings[name]}; {'; '.join(why) or 'no other variant'}")
        print(f"{'':<{width}}  {fastpath.PATHS[name]}")
        if args.check:
            for v in (*path.variants, *path.opt_in):
                reason = path.eligible(device, v)
                if reason:
                    print(f"{'':<{width}}  check {v}: not run ({reason})")
                    continue
                ok = fastpath.self_check(name, device, v)
                failed = failed or not ok
                print(f"{'':<{width}}  check {v}: {'passed' if ok else 'FAILED'}")
    if args.check:
        from kernel.emulated.gfx950 import check_codes

        for line, ok in check_codes(device, exhaustive=args.exhaustive):
            failed = failed or not ok
            print(line)
    return EXIT_FAILED if failed else EXIT_OK
