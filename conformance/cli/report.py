"""`python -m conformance report [RUN_DIR]`: (re)build and print a run's report.

RUN_DIR is a run folder (`<state dir>/runs/<run id>`, the state dir being $CONFORMANCE_DIR or
.conformance) or a run id; without it, the most recently active run that recorded anything. The
report is aggregated from every worker's files of the run (conformance.records.report) and written as
report.json (strict JSON), report.md and, with matplotlib (the optional extra `plots`),
report.png in the run folder; the Markdown is printed (--json prints the JSON instead).

The status (conformance.records.report) is "clean" only for a run whose session finished with exit
status 0 and that recorded no failure and no crash; a run killed before it finished
("unfinished"), still running ("running"), or whose session exited non-zero ("failed") is not
clean, and the report says why (`status_reasons`; the status line also goes to stderr).

`--features RUN_DIR [RUN_DIR ...]` prints instead, per run folder, what its judged examples
exercised: examples per second, outcomes per property and writer, the strategy features hit and
the err/bound of passing examples (conformance.records.features; --json: a JSON list). It writes
nothing and exits 0, or 2 for a folder without examples.

Exit codes: 0 the run is clean; 1 it is not (failing examples or tests, crashes, unfinished,
still running, or its session exited non-zero); 2 no such run (or no run at all), a folder that is
not a run folder (nothing is written into it) or an unreadable folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from conformance.cli.args import add_command
from conformance.durability.state import runs_root

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `report` subcommand to an argparse subparsers object."""
    p = add_command(subparsers, "report", "render a run's report (default: the last run)", __doc__)
    p.add_argument(
        "run_dir", metavar="RUN_DIR", nargs="*", default=[], help="run folder or run id (default: the last run; several with --features)"
    )
    p.add_argument("--json", action="store_true", help="print report.json instead of the Markdown")
    p.add_argument("--features", action="store_true", help="what the examples of each RUN_DIR exercised (rates, features, err/bound)")
    p.add_argument("--no-plot", action="store_true", help="do not draw report.png")
    p.set_defaults(func=run)


def resolve_run(arg: str | None) -> Path:
    """The run folder named by `arg` (a path or a run id), or the last run; FileNotFoundError
    with a message naming what was looked for."""
    from conformance.records.report import latest_run

    if arg is None:
        found = latest_run()
        if found is None:
            raise FileNotFoundError(f"no run with recorded examples under {runs_root()} (run the suite first, or name a run folder)")
        return found
    path = Path(arg)
    if path.is_dir():
        return path
    by_id = runs_root() / arg
    if by_id.is_dir():
        return by_id
    raise FileNotFoundError(f"{arg}: no such run folder (nor a run id under {runs_root()})")


def run(args: argparse.Namespace) -> int:
    """Handler of `report`."""
    from conformance.records.report import CLEAN, write_report

    if args.features:
        return run_features(args)
    if len(args.run_dir) > 1:
        print("report: one RUN_DIR at a time (several only with --features)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        run_dir = resolve_run(args.run_dir[0] if args.run_dir else None)
        files = write_report(run_dir, plot=not args.no_plot)
    except OSError as err:  # no such folder, not a run folder, unreadable or read-only folder
        print(f"report: {err.strerror + ': ' + str(err.filename) if err.filename and err.strerror else err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(files.report, indent=2, sort_keys=True, allow_nan=False))
    else:
        print(files.md_path.read_text(encoding="utf-8"))
        print(f"(written: {files.json_path}, {files.md_path}" + (f", {files.png_path}" if files.png_path else "") + ")")
    status = files.report["status"]
    if status != CLEAN:
        print(
            f"report: {run_dir.name}: status {status}: " + "; ".join(files.report.get("status_reasons") or ["not clean"]), file=sys.stderr
        )
    return EXIT_OK if status == CLEAN else EXIT_FAIL


def run_features(args: argparse.Namespace) -> int:
    """Handler of `report --features`."""
    from conformance.records.features import NoExamples, render, summarise

    summaries = []
    try:
        for arg in args.run_dir or [None]:
            summaries.append(summarise(resolve_run(arg)))
    except (OSError, NoExamples) as err:
        print(f"report: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(summaries, indent=1, sort_keys=True))
    else:
        print("\n\n".join(render(s) for s in summaries))
    return EXIT_OK
