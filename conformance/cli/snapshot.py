"""`python -m conformance snapshot oracle|materialize --write FILE | --check FILE`: bit-for-bit snapshots.

  oracle       the oracle, the bound (every shipped profile) and the emulated kernel over a fixed
               set of problems, on the CPU (conformance.tools.snapshot.oracle); a torch.save file
  materialize  the SHA-256 of every tensor materialize builds from a fixed set of recipes (the
               oracle snapshot's problems and recipes drawn from the strategies); a JSON file
               (conformance.tools.snapshot.materialize)

--write records today's outputs; --check recomputes them and names every difference (NEW, DIFFERS,
MISSING for the oracle; the recipe and field for materialize). Record a snapshot before a change
that must not move a bit, check it after.

Exit codes: 0 written, or checked with no difference; 1 at least one difference; 2 an unreadable or
malformed snapshot file, an unwritable path or a bad option.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from conformance.cli.args import add_command, positive_int

EXIT_OK, EXIT_DIFFERENT, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `snapshot` subcommand to an argparse subparsers object."""
    p = add_command(
        subparsers,
        "snapshot",
        "write or check a bit-for-bit snapshot of the oracle, the bound and the emulated kernel, or of materialize",
        __doc__,
    )
    sub = p.add_subparsers(dest="snapshot_kind", metavar="KIND", required=True)
    oracle = sub.add_parser(
        "oracle",
        help="the oracle, the bound and the emulated kernel over the fixed problems (CPU, a .pt file)",
        description="The oracle, the bound under every shipped profile and the emulated kernel over the fixed problems, "
        "on the CPU. Exit 0 no difference, 1 differences, 2 unreadable file.",
    )
    _mode(oracle, "a .pt file (torch.save)")
    oracle.add_argument("-k", dest="select", default="", metavar="TEXT", help="only the cases whose name contains TEXT")
    oracle.set_defaults(func=run_oracle)
    mat = sub.add_parser(
        "materialize",
        help="hashes of every tensor materialize builds from fixed and drawn recipes (a .json file)",
        description="SHA-256 of every tensor materialize builds. Exit 0 no difference, 1 differences, 2 unreadable file.",
    )
    _mode(mat, "a .json file")
    mat.add_argument(
        "--count", type=positive_int, default=120, metavar="N", help="recipes drawn from the strategies (--write; default 120)"
    )
    mat.add_argument(
        "--device",
        default="cpu",
        help="where to materialize (default cpu; the hashes are of the bytes read back, the same on every device)",
    )
    mat.set_defaults(func=run_materialize)


def _mode(parser: argparse.ArgumentParser, what: str) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, metavar="FILE", help=f"record the snapshot into FILE ({what})")
    group.add_argument("--check", type=Path, metavar="FILE", help="recompute and compare with FILE")


def run_oracle(args: argparse.Namespace) -> int:
    """Handler of `snapshot oracle`."""
    from conformance.tools.snapshot.oracle import SnapshotFileError, load, save, take

    started = time.perf_counter()
    try:
        stored = load(args.check) if args.check else None
        if args.write and not args.write.parent.is_dir():
            raise SnapshotFileError(f"{args.write}: no such folder {args.write.parent}")
    except SnapshotFileError as err:
        print(f"snapshot: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def on_case(name: str, outputs: int, seconds: float, differences: list[str]) -> None:
        for line in differences:
            print(line)
        print(f"{name}: {outputs} outputs, {seconds:.2f} s", flush=True)

    outcome = take(args.select, stored=stored, on_case=on_case)
    elapsed = time.perf_counter() - started
    if args.check:
        for line in outcome.differences:
            if line.startswith("MISSING"):
                print(line)
        print(f"compared {outcome.compared} outputs: {len(outcome.differences)} differences ({elapsed:.1f} s)")
        return EXIT_DIFFERENT if outcome.differences else EXIT_OK
    try:
        save(outcome.snapshot, args.write)
    except SnapshotFileError as err:
        print(f"snapshot: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {len(outcome.snapshot)} outputs ({outcome.errors} recorded errors) to {args.write} ({elapsed:.1f} s)")
    return EXIT_OK


def run_materialize(args: argparse.Namespace) -> int:
    """Handler of `snapshot materialize`."""
    import torch

    from conformance.tools.snapshot.materialize import SnapshotFileError, check, entries_of, load, recipes_to_record, save
    from strategies.recipe import RecipeError

    try:
        device = torch.device(args.device)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as err:  # AssertionError: torch without CUDA
        print(f"snapshot: --device {args.device!r}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args.write:
            if not args.write.parent.is_dir():
                raise SnapshotFileError(f"{args.write}: no such folder {args.write.parent}")
            entries = entries_of(recipes_to_record(args.count), device)
            save(entries, args.write)
            print(f"wrote {len(entries)} recipes to {args.write}")
            return EXIT_OK
        differences = check(load(args.check), device)
    except SnapshotFileError as err:
        print(f"snapshot: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RecipeError, KeyError, TypeError) as err:
        print(f"snapshot: {args.check}: a malformed entry ({type(err).__name__}: {err})", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in differences:
        print(line)
    print(f"{len(differences)} difference(s)")
    return EXIT_DIFFERENT if differences else EXIT_OK
