"""The `probe` subcommand: measure a kernel's numerics with directed problems and write its profile.

    python -m conformance probe --kernel K [--out my-kernel.toml] [--device cuda] [--quick | --thorough]
                                [--json evidence.json] [--bringup]

Prints the evidence of every probe (problem, candidates, observation, what matched, the
decision), a summary with timings, and writes the measured profile (TOML, a comment per field
naming the probe that set it; conservative values where undecided). `--bringup` adds the gfx950
bring-up checks (finding F1's distinct-scale probe and the gfx950 agreement property) and prints
a Markdown report to paste into an issue (docs/how-to/measure-a-profile.md).

Exit codes: 0 probed (and, with --bringup, every check passed), 1 a probe call failed or a
bring-up check failed, 2 usage error (unknown kernel, unavailable backend, bad output path).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from conformance.cli.args import OutputError, add_command, add_kernel_option, output_file, write_output
from conformance.durability.state import kernel_slug

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "probe", "measure a kernel's arithmetic with directed problems and write its numerics profile", __doc__)
    add_kernel_option(p, required=True)
    p.add_argument(
        "--out", type=output_file, default=None, help="profile file to write (default: probed-<kernel>.toml in the working folder)"
    )
    p.add_argument("--device", default=None, help="torch device for the calls (default: cpu when the backend runs there, else cuda)")
    p.add_argument("--quick", action="store_true", help="fewer and shorter rows (for slow kernels such as flydsl-isa)")
    p.add_argument("--thorough", action="store_true", help="also probe row splitting at 4096 and 8192 keys")
    p.add_argument("--json", type=output_file, default=None, help="also write the evidence as JSON")
    p.add_argument("--bringup", action="store_true", help="gfx950 bring-up: F1 probe and the agreement property, Markdown report")
    p.add_argument(
        "--agreement-profile",
        default="ci",
        help="Hypothesis profile of the agreement property under --bringup (ci: 25 examples, nightly: 1000; none: skip)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.tools.probe.build import ProbeSkipped
    from conformance.tools.probe.run import probe_kernel
    from kernel.backend import BackendUnavailable
    from kernel.registry import resolve

    try:
        backend = resolve(args.kernel)
    except BackendUnavailable as err:
        print(f"probe: {err}", file=sys.stderr)
        return EXIT_USAGE
    device = args.device or ("cpu" if "cpu" in backend.devices else "cuda")
    try:
        report = probe_kernel(
            backend, name=args.kernel, device=device, quick=args.quick, thorough=args.thorough, log=lambda s: print(s, flush=True)
        )
    except ProbeSkipped as err:
        print(f"probe: the kernel refused a probe call: {err}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:  # a kernel raising on a valid call: report it as a failure, not a traceback
        print(f"probe: a probe call failed: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
    print("\n".join(report.summary_lines()))
    out_path = args.out or f"probed-{kernel_slug(args.kernel)}.toml"
    try:
        write_output(out_path, report.text)
        if args.json:
            write_output(
                args.json,
                json.dumps(
                    {"kernel": args.kernel, "device": device, "seconds": report.seconds, "evidence": [asdict(e) for e in report.evidence]},
                    indent=1,
                    default=str,
                ),
            )
    except OutputError as err:
        print(f"probe: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(f"profile written to {out_path}")
    if not args.bringup:
        return EXIT_OK
    from conformance.tools.probe.bringup import bringup_report

    ok, text = bringup_report(backend, args.kernel, device, report, agreement_profile=args.agreement_profile)
    print(text)
    return EXIT_OK if ok else EXIT_FAILED
