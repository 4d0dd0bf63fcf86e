"""`python -m conformance dumps sglang-writer --out DIR`: KV caches written by a real engine's writer.

  sglang-writer  caches written by sglang's fp8_ds_mla quantiser (kernel.writers.sglang) from
                 activation-like rows and from the strategies' latent distributions, each checked
                 (the writer's rounding check) and compared byte by byte with the project's writers
                 (pow2, pow2-floor, raw); saved as .pt dumps that `python -m conformance
                 preconditions` reads, with DIR/summary.json (conformance.tools.writer_dumps)

The engine's bytes need a CUDA GPU with Triton and sglang (0.5.10.post1, --no-deps);
--interpreter runs sglang's kernel under Triton's CPU interpreter instead (its bytes differ from a
GPU's: compare them with --compare-with tests/kernel/writers/data/sglang_writer_h200.pt).

Exit codes: 0 written; 2 the writer cannot run here, an unreadable --compare-with file or a bad option.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from conformance.cli.args import add_command, positive_int

EXIT_OK, EXIT_UNAVAILABLE = 0, 2


def register(subparsers: Any) -> None:
    """Add the `dumps` subcommand to an argparse subparsers object."""
    p = add_command(
        subparsers,
        "dumps",
        "write KV cache dumps with a real engine's writer (sglang's quantiser), checked and compared with the project's writers",
        __doc__,
    )
    sub = p.add_subparsers(dest="dumps_kind", metavar="WRITER", required=True)
    s = sub.add_parser("sglang-writer", help="caches written by sglang's fp8_ds_mla quantiser", description=__doc__)
    s.formatter_class = argparse.RawDescriptionHelpFormatter
    s.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder for the dumps and summary.json (created)")
    s.add_argument("--rows", type=positive_int, default=4096, metavar="N", help="activation-like rows (default 4096)")
    s.add_argument("--interpreter", action="store_true", help="Triton's CPU interpreter on CPU tensors (not the engine's bytes)")
    s.add_argument("--compare-with", type=Path, default=None, metavar="PT", help="records written elsewhere: .pt of latent, rope, sglang")
    s.set_defaults(func=run_sglang_writer)


def run_sglang_writer(args: argparse.Namespace) -> int:
    """Handler of `dumps sglang-writer`."""
    from conformance.tools.writer_dumps import WriterDumpError, write_caches

    if args.out.exists() and not args.out.is_dir():
        print(f"dumps: --out {args.out}: not a folder", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        summary = write_caches(
            args.out, rows=args.rows, interpreter=args.interpreter, compare_with=args.compare_with, log=lambda s: print(s, flush=True)
        )
    except WriterDumpError as err:
        print(f"dumps: {err}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    print(json.dumps(summary, indent=1))
    return EXIT_OK
