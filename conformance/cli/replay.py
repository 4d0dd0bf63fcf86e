"""`python -m conformance replay ENTRY_OR_RECIPE.json`: run one corpus entry against a kernel, diagnosed.

The file is a corpus entry (conformance.records.corpus: {"name", "recipe", "expect", "provenance"}) or a
bare recipe (strategies.recipe fields; its expectation is inferred from the recipe: raw writer,
latent above the cap, corruptions or negative entries without has_invalid make it a
"precondition" recipe, --expect overrides). The tensors are built from the recipe on the device,
the kernel runs first (with the write-ahead record, in a temporary state folder), then:

- "conform" entries: the float64 reference and the profile's a-priori bound in both comparison
  modes ("exact-steps" and "float64"); per output (out, lse) and mode: max |err|, the worst
  err / bound and where, how many elements exceed; for a failure the top elements and which
  rows / heads / dims exceed and by how much;
- "precondition" entries: run as the suite does (conformance.judging.checks.violation_run) and judged
  only on what the contract still promises (no exception for a data violation, finite output
  under scale violations); the behaviour observed is printed;
- always: the precondition findings of the call (oracle.preconditions.check_call): which are
  violated, which notices apply, which hold.

--isolate runs the replay in a child process, so a kernel that kills its process (GPU fault,
abort, SIGKILL) is reported ("the process died with signal 9 (SIGKILL) during the kernel
call") instead of taking the command down; crash entries (provenance from conformance.records.crashes)
are isolated by default (--no-isolate to run them in-process).

Without --kernel the machine's default kernel runs (`flydsl` on gfx950, else `emulated`), not
the kernel named in the entry's provenance: the header says "the machine's default: no --kernel
given", an entry caught with another kernel gets a NOTE line naming both, and the verdict line
ends with the kernel that ran.

Before anything is built the recipe's memory estimate (strategies.recipe.memory_estimate) is
checked against the limit: by default half the RAM available now (and 80 % of a GPU's free
memory), else --memory-limit SIZE or $CONFORMANCE_MEMORY_LIMIT (e.g. 8GiB; 0 = no limit). A
recipe over it is refused with one line naming the estimate and the limit (exit 2).

Exit codes: 0 conforms (conform entries) or the contract's promises hold (precondition entries),
also when the kernel declares it does not take this call (printed as SKIPPED); 1 it fails (out
of bound, wrong types, the kernel raised, the process died or hung); 2 a malformed file (one line
naming the file and the problem, no traceback), an unknown kernel or device, a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from conformance.cli.args import (
    OutputError,
    add_command,
    add_kernel_option,
    finite_positive_seconds,
    output_file,
    target_for_recipe,
    write_output,
)
from conformance.records.crashes import is_crash_entry
from conformance.records.replay import (
    DEFAULT_ISOLATE_TIMEOUT_S,
    DEFAULT_TOP,
    EXIT_BAD_INPUT,
    EXIT_FAIL,
    EXIT_OK,
    Diagnosis,
    ReplayInputError,
    diagnose,
    format_diagnosis,
    format_header,
    load_replayable,
    run_isolated,
    sandbox_state,
)

# ---------------------------------------------------------------------------------------------
# The subcommand


def register(subparsers: Any) -> None:
    """Add the `replay` subcommand to an argparse subparsers object."""
    p = add_command(subparsers, "replay", "run a corpus entry (or a bare recipe JSON) against a kernel and diagnose it", __doc__)
    p.add_argument("file", metavar="ENTRY_OR_RECIPE.json", help="a corpus entry or a bare recipe")
    add_kernel_option(p, when_absent="the machine's default: flydsl on gfx950, else emulated", default=None)
    p.add_argument("--profile", default=None, help="numerics profile for a kernel that declares none (or to override)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available and the kernel runs there)")
    p.add_argument("--expect", choices=("conform", "precondition"), default=None, help="override the entry's expectation")
    p.add_argument(
        "--isolate",
        dest="isolate",
        action="store_true",
        default=None,
        help="run in a child process so a crash is reported instead of killing this one (default for crash entries)",
    )
    p.add_argument("--no-isolate", dest="isolate", action="store_false", help="run in this process even for a crash entry")
    p.add_argument(
        "--timeout",
        type=finite_positive_seconds,
        default=DEFAULT_ISOLATE_TIMEOUT_S,
        metavar="S",
        help=f"with --isolate: seconds before a hung child is killed (default {DEFAULT_ISOLATE_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--memory-limit",
        metavar="SIZE",
        default=None,
        help="refuse a recipe whose memory estimate exceeds SIZE (e.g. 8GiB; 0: no limit; default: half the available RAM, "
        "or $CONFORMANCE_MEMORY_LIMIT)",
    )
    p.add_argument(
        "--top", type=int, default=DEFAULT_TOP, metavar="N", help=f"worst elements / rows / heads / dims listed (default {DEFAULT_TOP})"
    )
    p.add_argument("--json", type=output_file, metavar="PATH", help="also write the diagnosis as JSON here (a file; its folder must exist)")
    p.set_defaults(func=run)


def _write_json(path: str | None, diag: Diagnosis) -> int | None:
    """Write the diagnosis to `path` (when given); EXIT_BAD_INPUT after one line when that fails."""
    if path:
        try:
            write_output(path, json.dumps(diag.to_json_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n")
        except OutputError as err:
            print(f"replay: --json: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return None


def _memory_limit_option(value: str | None) -> str | None:
    """Apply --memory-limit (through the environment, so an --isolate child inherits it); an
    error line for a malformed size, else None."""
    if value is None:
        return None
    import os

    from strategies.materialize import MEMORY_LIMIT_ENV, parse_size

    try:
        parse_size(value)
    except ValueError as err:
        return f"--memory-limit: {err}"
    os.environ[MEMORY_LIMIT_ENV] = value
    return None


def run(args: argparse.Namespace) -> int:
    """Handler of `replay`; returns the exit code."""
    path = Path(args.file)
    problem = _memory_limit_option(args.memory_limit)
    if problem:
        print(f"replay: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        entry, kind = load_replayable(path, expect=args.expect)
    except ReplayInputError as err:
        print(f"replay: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    isolate = args.isolate if args.isolate is not None else is_crash_entry(entry.provenance)
    if isolate:
        if args.isolate is None:
            print("replay: crash entry: running in a child process (--no-isolate to run here)", flush=True)
        result = run_isolated(
            path, kernel=args.kernel, profile=args.profile, device=args.device, expect=args.expect, top=args.top, timeout_s=args.timeout
        )
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        if result.diagnosis is None:
            return result.returncode if result.returncode in (EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT) else EXIT_FAIL
        if result.diagnosis.outcome == "crash":
            print(format_diagnosis(result.diagnosis))
        return _write_json(args.json, result.diagnosis) or result.diagnosis.exit_code

    from strategies.recipe import RecipeError

    target = target_for_recipe("replay", args.kernel, args.profile, args.device, entry.recipe, path)
    if target is None:
        return EXIT_BAD_INPUT
    print(format_header(entry, kind, path, target, kernel_given=args.kernel is not None), flush=True)
    try:
        with sandbox_state():
            diag = diagnose(entry, target, top=max(1, args.top))
    except RecipeError as err:  # the recipe cannot be built here (too large once the device is known, ...)
        print(f"replay: {path}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(format_diagnosis(diag))
    return _write_json(args.json, diag) or diag.exit_code
