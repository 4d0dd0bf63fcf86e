"""`python -m conformance fuzz --kernel NAME`: a time-budgeted differential fuzzing campaign outside pytest.

Hypothesis draws recipes for the chosen properties and judges each call exactly as the suite does
(conformance.judging.checks.differential, with target() on every output's error / bound so the search
climbs toward large errors; conformance.judging.checks.violation_run for precondition violations).
The campaign runs in chunks, each a fresh Hypothesis run with its own seed (ci: seeds 0, 1, 2,
... so a campaign is reproducible), until the budget is spent (counted from the end of the
set-up; a chunk stops the moment its time is up, not after drawing the rest of its examples).
Problem sizes ramp up per chunk: the first chunk draws at most 1024 keys per call, each next
chunk 4x more, up to the suite's own limits (on a CPU from the third chunk, on a GPU from the
fifth; quick feedback, quick shrinks). The examples per chunk grow too: 25 in the first, 2x per
chunk up to the Hypothesis profile's max_examples (--hypothesis-profile: ci 25, dev 40, nightly
1000; nightly: 25, 50, 100, 200, 400, 800, 1000, ...), so a campaign of any profile reaches the
full sizes within its first 375 examples (seconds, not the 4000 of chunks of 1000), and a long
one still spends nearly all its examples in chunks of max_examples at full size (reasons:
conformance.campaign.fuzz). --chunk-examples N makes every chunk N examples.
A failure is shrunk by Hypothesis, for at most --shrink-seconds after it was found (the campaign
may overrun its budget by that much), then saved to the kernel's pending folder,
.conformance/pending/<kernel>/ of the working folder (content-hash names: the same failure is
stored once; CONFORMANCE_PENDING_DIR moves the pending folder). An example failing the same way
as a failure already saved counts, but is not shrunk again. A call that hangs, or that breaks the
process's GPU context (a device-side assert, an illegal memory access: a crash), is saved as found,
not shrunk, and ends the campaign. After --max-failures distinct
failures the campaign stops, and after --max-chunks chunks even with budget left: a campaign
bounded by its examples (the sum of those chunks' examples: --chunk-examples x N, else 25 + 50 +
... as above).

Properties (--property, repeatable; default all three):
    differential   the general differential property (test_differential.py's recipes)
    long_rows      few rows of up to 8192 keys
    preconditions  one violated precondition per recipe, judged on the contract's promises

Every example is recorded in the campaign's own run folder `<state>/runs/fuzz-<time>-<pid>/`
(with the write-ahead record of each kernel call: a process that dies in the kernel loses
nothing, the next session turns it into a crash entry), and the run report is written there at
the end. Progress goes to stderr (a live line on a terminal, a line every 10 s otherwise); the
summary to stdout.

Throughput and coverage: the summary gives examples per second, overall (examples / wall time,
shrinking and Hypothesis included) and per property (its examples / the seconds spent judging
them), and the strategy features the campaign exercised, per family (row-length classes, index
patterns, writers, precondition violations, distributions, heads, ...: conformance.records.coverage),
as drawn / drawable by the properties' strategies at full size, with the classes never drawn.
Every judged example counts, failing ones and shrink candidates included. The same numbers go
to `fuzz-summary.json` in the run folder (FUZZ_SUMMARY; schema in `summary_json`).

Fleet (docs/fleet.md): --shard I/N (default $CONFORMANCE_SHARD or the CI system's variables:
conformance.fleet.shards) makes this campaign shard I of N: chunk k's seed is
seed-base + k * N + I - 1 (plus a fixed offset per Hypothesis profile but ci), disjoint from the
other shards' and the same on a rerun; --seed-base B (default 0 for ci, else random seeds)
is what the shards of one campaign share (e.g. the CI build number). --shared-store URL (default
$CONFORMANCE_SHARED_STORE: redis://, rediss://, unix://) pushes each failure to the store's inbox
the moment it is first seen (marked unshrunk; its finder recorded), and shrinks it only under the
lease of its failure group: a runner that does not hold the lease goes on searching. A store
that is down or never answers costs at most its timeouts once: the run says so and uses local
state only, and what it could not push waits in the state folder for `corpus push`. The exit
code does not depend on the store unless --require-shared-store is given (then a store missing
or unreachable at any point is exit 2).

Exit codes: 0 nothing found, 1 failures found (and saved), 2 usage error (unknown kernel,
device or property; bad budget, shard or store address; a required store unreachable) or a
campaign Hypothesis could not run (every draw rejected by the kernel, ...), 130 interrupted (the
summary and report are still written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from conformance.campaign.fuzz import (
    DEFAULT_PACK,
    PACK_FROM_CHUNK,
    PACK_PART_SOURCES,
    PROPERTIES,
    RECIPES_PER_EXAMPLE,
    Campaign,
    ProgressLine,
    campaign,
    default_pack,
    format_summary,
    fuzz_reachable,
    summary_json,
)
from conformance.cli import print_result
from conformance.cli.args import add_command, add_kernel_option, non_negative_int, positive_float, positive_int
from conformance.durability.state import RUN_ID_ENV, current_run_dir, kernel_pending_dir
from conformance.records.coverage import Coverage
from conformance.records.crashes import mark_session_finish, mark_session_start, recover_leftovers
from conformance.records.report import FUZZ_SUMMARY  # the machine-readable summary in the run folder

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
HYPOTHESIS_PROFILES = ("ci", "dev", "nightly")


def register(subparsers: Any) -> None:
    """Add the `fuzz` subcommand to an argparse subparsers object."""
    p = add_command(
        subparsers, "fuzz", "time-budgeted Hypothesis campaign against a kernel; failures saved (shrunk) to the pending corpus", __doc__
    )
    add_kernel_option(p, required=True)
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=positive_float, default=None, metavar="M", help="search budget in minutes (default 5)")
    budget.add_argument("--seconds", type=positive_float, default=None, metavar="S", help="search budget in seconds")
    p.add_argument(
        "--hypothesis-profile",
        dest="hypothesis_profile",
        choices=HYPOTHESIS_PROFILES,
        default="dev",
        help="Hypothesis profile: chunk size and seeding (default dev)",
    )
    p.add_argument(
        "--profile",
        "--numerics-profile",
        dest="numerics_profile",
        default=None,
        metavar="NAME",
        help="numerics profile for a kernel that declares none (or to override), as in pytest and replay",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available and the kernel runs there)")
    p.add_argument("--property", action="append", choices=PROPERTIES, default=None, help="property to fuzz (repeatable; default: all)")
    p.add_argument(
        "--shrink-seconds",
        type=positive_float,
        default=None,
        metavar="S",
        help="longest shrink of one failure, from when it is found (default: max(30, 20%% of the budget))",
    )
    p.add_argument("--max-failures", type=positive_int, default=5, metavar="N", help="stop after N distinct failures (default 5)")
    p.add_argument(
        "--chunk-examples",
        type=positive_int,
        default=None,
        metavar="N",
        help="examples of every chunk (default: 25 in the first, 2x per chunk up to the Hypothesis profile's max_examples); "
        "smaller chunks ramp sizes up sooner",
    )
    p.add_argument(
        "--max-chunks",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop after N chunks even with budget left (a campaign bounded by its examples: the sum of the N chunks' examples)",
    )
    p.add_argument(
        "--recipes-per-example",
        dest="recipes_per_example",
        type=positive_int,
        default=RECIPES_PER_EXAMPLE,
        metavar="N",
        help=f"each example draws 1 to N recipes, one kernel call each, judged together; a recipe that passed is not judged "
        f"again (default {RECIPES_PER_EXAMPLE}: one recipe per example)",
    )
    p.add_argument(
        "--pack",
        type=positive_int,
        default=None,
        metavar="N",
        help="from the third chunk on, the differential and long_rows properties draw, half of the time, one kernel call whose "
        "query rows are drawn as a call's alone and filled by up to N recipes (the calls' shapes are kept); 1: no packed calls "
        "(a failing pack's recipes are judged alone; not with --recipes-per-example) "
        f"(default: {DEFAULT_PACK}; 1 with --recipes-per-example)",
    )
    p.add_argument(
        "--pack-parts",
        dest="pack_parts",
        choices=PACK_PART_SOURCES,
        default=PACK_PART_SOURCES[0],
        help="a packed call's parts after its first: fresh draws of the same strategy, seeded by what the example drew before "
        "them, so every example Hypothesis builds holds new recipes (fresh), or drawn from the example's own choices, which "
        f"Hypothesis's mutations repeat (drawn) (default: {PACK_PART_SOURCES[0]})",
    )
    p.add_argument("--no-save", action="store_true", help="do not write failures to the pending corpus (report them only)")
    p.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="run shard I of N (1 <= I <= N): its own seed stream (default: $CONFORMANCE_SHARD or the CI system's variables)",
    )
    p.add_argument(
        "--seed-base",
        dest="seed_base",
        type=non_negative_int,
        default=None,
        metavar="B",
        help="the seed base every shard of one campaign shares (default 0 for the ci profile, else random seeds)",
    )
    p.add_argument(
        "--shared-store",
        dest="shared_store",
        default=None,
        metavar="URL",
        help="the fleet's Redis/Valkey store: failures pushed to its inbox, shrinking leased per failure group "
        "(default: $CONFORMANCE_SHARED_STORE)",
    )
    p.add_argument(
        "--require-shared-store",
        dest="require_shared_store",
        action="store_true",
        help="exit 2 when the store is missing or unreachable at any point (default: the run uses local state and says so)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler of `fuzz`; returns the exit code."""
    from conformance.judging.target import TargetError, build_target

    budget_s = args.seconds if args.seconds is not None else 60.0 * (args.minutes if args.minutes is not None else 5.0)
    properties = list(dict.fromkeys(args.property or PROPERTIES))
    shrink_s = args.shrink_seconds if args.shrink_seconds is not None else max(30.0, 0.2 * budget_s)
    if args.pack is not None and args.pack > 1 and args.recipes_per_example > 1:
        print("fuzz: --pack and --recipes-per-example are not taken together (a packed call holds several recipes)", file=sys.stderr)
        return EXIT_USAGE
    try:
        target = build_target(args.kernel, profile=args.numerics_profile, device=args.device)
    except TargetError as err:
        hint = (
            f" ({args.numerics_profile!r} is a Hypothesis profile: --hypothesis-profile {args.numerics_profile})"
            if args.numerics_profile in HYPOTHESIS_PROFILES
            else ""
        )
        print(f"fuzz: {err}{hint}", file=sys.stderr)
        return EXIT_USAGE

    from conformance.durability.state import StateDirError, check_state_dir
    from conformance.fleet import shards
    from conformance.fleet.store import StoreError, address_from, open_store

    try:
        check_state_dir()
        shard = shards.resolve(args.shard)
        address = address_from(args.shared_store)
        store = open_store(address) if address is not None else None
        if store is not None:
            _ = store.client  # redis-py missing or a URL it cannot read: a usage error now
    except (StateDirError, shards.ShardError, StoreError) as err:
        print(f"fuzz: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.require_shared_store and store is None:
        print("fuzz: --require-shared-store needs a store: --shared-store URL or $CONFORMANCE_SHARED_STORE", file=sys.stderr)
        return EXIT_USAGE
    if store is not None and not store.ping() and args.require_shared_store:
        print(f"fuzz: {store.breaker.reason.split('; this run')[0]} (--require-shared-store)", file=sys.stderr)
        return EXIT_USAGE

    saved_run_id = os.environ.get(RUN_ID_ENV)
    os.environ[RUN_ID_ENV] = f"fuzz-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run_dir = current_run_dir()
    assert run_dir is not None
    seed_base = args.seed_base if args.seed_base is not None else (0 if args.hypothesis_profile == "ci" else None)
    fleet = None
    if store is not None:
        from conformance.fleet.runner import FleetRunner, finder_id

        fleet = FleetRunner.for_target(
            store, args.kernel, target.profile.name, finder_id(run_dir.name, shard), profile_option=args.numerics_profile, shard=shard
        )
    progress = ProgressLine(sys.stderr)
    interrupted = False
    state = Campaign()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        mark_session_start(run_dir, kind="fuzz", kernel=target.name)
        for line in recover_leftovers(run_dir.name, kernel_pending_dir, recovering_run=run_dir):
            from conformance.records.crashes import describe

            print("fuzz: recovered " + describe(line), file=sys.stderr)
        pack = args.pack if args.pack is not None else default_pack(args.recipes_per_example)
        packed = (
            f"packed calls of up to {pack} recipes ({args.pack_parts} parts) from chunk {PACK_FROM_CHUNK + 1}"
            if pack > 1
            else "no packed calls"
        )
        print(
            f"fuzz: kernel {target.name} (profile {target.profile.name}) on {target.device}; properties {', '.join(properties)}; "
            f"budget {budget_s:g} s (+ up to {shrink_s:g} s shrinking); Hypothesis profile {args.hypothesis_profile}; {packed}; "
            f"run folder {run_dir}",
            file=sys.stderr,
            flush=True,
        )
        if shard.sharded:
            base = seed_base
            note = (
                f"seed base {base}"
                if base is not None
                else "random seeds (give every shard the same --seed-base for disjoint, repeatable streams)"
            )
            print(f"fuzz: {shard.describe()}; {note}", file=sys.stderr, flush=True)
        if fleet is not None:
            print(f"fuzz: {fleet.store_line()}; {fleet.unpushed_line()}", file=sys.stderr, flush=True)
        try:
            campaign(
                target,
                state,
                budget_s=budget_s,
                hypothesis_profile=args.hypothesis_profile,
                properties=properties,
                shrink_s=shrink_s,
                max_failures=args.max_failures,
                save=not args.no_save,
                progress=progress,
                chunk_examples=args.chunk_examples,
                max_chunks=args.max_chunks,
                shard=shard,
                seed_base=args.seed_base,
                fleet=fleet,
                recipes_per_example=args.recipes_per_example,
                pack=pack,
                pack_parts=args.pack_parts,
            )
        except KeyboardInterrupt:
            interrupted = True
        if state.finished is None:
            state.finished = time.monotonic()
        progress.done()
        required = bool(args.require_shared_store)
        mark_session_finish(run_dir, exitstatus=_exit_code(state, interrupted, fleet, required))
        summary_path: Path | None = run_dir / FUZZ_SUMMARY
        try:
            from conformance.durability.wal import atomic_write_text

            if state.coverage is None:  # interrupted before the first chunk: nothing counted, still the denominators
                state.coverage = Coverage(fuzz_reachable(target, properties))
            data = summary_json(
                state,
                target,
                budget_s=budget_s,
                hypothesis_profile=args.hypothesis_profile,
                properties=properties,
                exit_code=_exit_code(state, interrupted, fleet, required),
                fleet=fleet,
                shard=shard,
                seed_base=seed_base,
            )
            atomic_write_text(summary_path, json.dumps(data, indent=2, allow_nan=False) + "\n")
        except Exception as err:  # noqa: BLE001 - the summary must still be printed
            summary_path = None
            print(f"fuzz: {FUZZ_SUMMARY} not written: {type(err).__name__}: {err}", file=sys.stderr)
        report_path = None
        try:
            from conformance.records.report import write_report

            report_path = write_report(run_dir).md_path
        except Exception as err:  # noqa: BLE001 - the summary must still be printed
            print(f"fuzz: run report not written: {type(err).__name__}: {err}", file=sys.stderr)
        if interrupted:
            print("fuzz: interrupted", file=sys.stderr)
        print_result(  # a closed stdout (`| head -1`) keeps the exit code
            format_summary(
                state,
                target,
                budget_s=budget_s,
                hypothesis_profile=args.hypothesis_profile,
                report_path=report_path,
                summary_path=summary_path,
                fleet=fleet,
                shard=shard,
                seed_base=seed_base,
            )
        )
        if required and fleet is not None and fleet.store is not None and fleet.store.down and not interrupted:
            print("fuzz: --require-shared-store: the store was lost during the run: exit 2", file=sys.stderr)
    finally:
        if saved_run_id is None:
            os.environ.pop(RUN_ID_ENV, None)
        else:
            os.environ[RUN_ID_ENV] = saved_run_id
    return _exit_code(state, interrupted, fleet, bool(args.require_shared_store))


def _exit_code(state: Campaign, interrupted: bool, fleet: Any = None, required: bool = False) -> int:
    """The campaign's exit code (see the module docstring); also recorded in session.json."""
    if interrupted:
        return 130
    if required and fleet is not None and fleet.store is not None and fleet.store.down:
        return EXIT_USAGE
    if state.failures:
        return EXIT_FAIL
    return EXIT_USAGE if state.stopped else EXIT_OK
