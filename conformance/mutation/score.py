"""The mutation score: every run (the baselines: `emulated` and the correct variants, which must
pass; each selected mutant, which must be killed), the score and its tables."""

from __future__ import annotations

import concurrent.futures
import datetime
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from conformance.mutation.runner import SUITE_PATH, RunResult, RunSpec, run_one

BASELINE_KERNEL = "emulated"
DEFAULT_TIMEOUT_S = 1200.0


@dataclass
class Score:
    """A mutation-score run: every result, and what it was run with.

    mutants: results in catalogue order; baselines: the runs that must pass (emulated first,
    then the correct variants; empty with no baseline);
    wall_s: seconds the whole score took; jobs: runs in parallel; date: ISO local date-time of
    the start; command: how to reproduce it; hypothesis_profile: the Hypothesis profile of the
    suite runs (`--hypothesis-profile`; the numerics profile, `--conformance-profile`, goes to the runs as a
    pytest option)."""

    mutants: list[RunResult]
    baselines: list[RunResult]
    hypothesis_profile: str
    jobs: int
    wall_s: float
    date: str
    command: str
    shrink: bool = False

    @property
    def killed(self) -> list[RunResult]:
        return [r for r in self.mutants if r.status == "killed"]

    @property
    def ok(self) -> bool:
        """Every mutant killed and every baseline (when run) passed."""
        return all(r.ok for r in self.mutants) and all(b.ok for b in self.baselines)

    @property
    def baseline(self) -> RunResult | None:
        """The emulated run (the first baseline), None with no baseline."""
        return self.baselines[0] if self.baselines else None

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def median_kill_s(self) -> float | None:
        """Median seconds to the first failure over killed mutants (None if none killed)."""
        times = [r.first_failure_s if r.first_failure_s is not None else r.wall_s for r in self.killed]
        return statistics.median(times) if times else None

    def median_kill_wall_s(self) -> float | None:
        """Median wall seconds of the killed mutants' runs (start to process exit)."""
        times = [r.wall_s for r in self.killed]
        return statistics.median(times) if times else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "date": self.date,
            "command": self.command,
            "profile": self.hypothesis_profile,  # the Hypothesis profile (kept under this key for older readers)
            "hypothesis_profile": self.hypothesis_profile,
            "jobs": self.jobs,
            "shrink": self.shrink,
            "cpus": os.cpu_count(),
            "wall_s": self.wall_s,
            "killed": len(self.killed),
            "total": len(self.mutants),
            "median_kill_s": self.median_kill_s(),
            "median_kill_wall_s": self.median_kill_wall_s(),
            "ok": self.ok,
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "baselines": [b.to_json() for b in self.baselines],
            "mutants": [r.to_json() for r in self.mutants],
        }


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _short_test(nodeid: str | None) -> str:
    if not nodeid:
        return "-"
    return nodeid.removeprefix(f"{SUITE_PATH}/").removeprefix("suite/")


def table_rows(score: Score) -> list[list[str]]:
    """Rows (header first) of the result table: mutant, result, killed by, examples, first
    failure (s), wall (s)."""
    rows = [["mutant", "result", "killed by", "examples", "first failure (s)", "wall (s)"]]
    for r in score.mutants:
        rows.append(
            [
                r.name,
                r.label,
                _short_test(r.test) if r.status == "killed" else (r.message[:60] or "-"),
                str(r.examples),
                _fmt_s(r.first_failure_s),
                _fmt_s(r.wall_s),
            ]
        )
    for b in score.baselines:
        rows.append(
            [
                f"{b.name} (baseline)",
                b.label,
                _short_test(b.test) if b.test else f"{b.tests} tests, {b.skipped} skipped",
                str(b.examples),
                _fmt_s(b.first_failure_s),
                _fmt_s(b.wall_s),
            ]
        )
    return rows


def summary_lines(score: Score) -> list[str]:
    """The summary under the table (plain text)."""
    lines = [
        f"killed {len(score.killed)}/{len(score.mutants)} mutants "
        f"(Hypothesis profile {score.hypothesis_profile}, jobs {score.jobs}, shrinking {'on' if score.shrink else 'off'})"
    ]
    survivors = [r for r in score.mutants if not r.ok]
    for r in survivors:
        lines.append(f"NOT KILLED: {r.name} ({r.label}): {r.message or 'the whole suite passed'}")
    lines += [f"recorded kill differs: {line}" for line in kills_off_record(score)]
    median, median_wall = score.median_kill_s(), score.median_kill_wall_s()
    if median is not None:
        lines.append(f"median seconds to kill: {median:.1f} to the first failure, {median_wall:.1f} wall (per run, start to exit)")
    if not score.baselines:
        lines.append("baseline: not run")
    for b in score.baselines:
        extra = f"{b.tests} tests, {b.skipped} skipped, {b.examples} examples, {b.wall_s:.1f} s"
        lines.append(f"baseline {b.name}: {b.label} ({extra})" + (f": {b.test} {b.message}" if not b.ok else ""))
    lines.append(f"total wall time: {score.wall_s:.1f} s")
    lines.append("result: " + ("PASS" if score.ok else "FAIL"))
    return lines


def kills_off_record(score: Score) -> list[str]:
    """One line per killed mutant whose killing test is not the one conformance.mutation.kills
    records (update KILLED_BY there when the suite's cheapest kill has changed)."""
    from conformance.mutation.kills import KILLED_BY

    return [
        f"{r.name} killed by {_short_test(r.test)}, recorded {KILLED_BY.get(r.name, 'nothing')} (conformance/mutation/kills.py)"
        for r in score.killed
        if _short_test(r.test) != KILLED_BY.get(r.name)
    ]


def format_table(score: Score) -> str:
    """A plain-text, column-aligned table with its summary."""
    rows = table_rows(score)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    numeric = {3, 4, 5}
    out = []
    for n, row in enumerate(rows):
        cells = [cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out + [""] + summary_lines(score)) + "\n"


def format_markdown(score: Score) -> str:
    """A Markdown table with the command, date and summary."""
    rows = table_rows(score)

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"Mutation score, {score.date}: `{score.command}`", "", line(rows[0]), "|---|---|---|---:|---:|---:|"]
    out += [line(r[:2] + [f"`{r[2]}`" if "::" in r[2] else r[2]] + r[3:]) for r in rows[1:]]
    out += [""] + [f"- {s}" for s in summary_lines(score)]
    return "\n".join(out) + "\n"


def progress_line(result: RunResult, done: int, total: int) -> str:
    """One stderr line for a finished run."""
    head = f"[{done}/{total}] {result.label:<18} {result.name}"
    if result.status in ("killed", "false_alarm"):
        return (
            f"{head} by {_short_test(result.test)} after {result.examples} examples, "
            f"{_fmt_s(result.first_failure_s)} s to the failure, {result.wall_s:.1f} s wall"
        )
    if result.status in ("passed", "survived"):
        return f"{head}: {result.tests} tests, {result.examples} examples, {result.wall_s:.1f} s"
    return f"{head}: {result.message} ({result.wall_s:.1f} s)"


def catalogue_specs() -> dict[str, str]:
    """{name: --conformance-kernel spec} of the mutants to kill: the catalogued emulator mutants, then the
    independent precision defects, in catalogue order (imports conformance.mutation.catalogue,
    hence torch)."""
    from conformance.mutation.catalogue import CATALOGUE, PRECISION_DEFECTS

    return {name: mutant.spec for name, mutant in {**CATALOGUE, **PRECISION_DEFECTS}.items()}


def baseline_specs() -> dict[str, str]:
    """{name: --conformance-kernel spec} of the kernels that must pass: `emulated`, then the correct variants
    of other numerics that run in the ci profile on a CPU (the nightly-only ones are left out)."""
    from conformance.mutation.catalogue import CORRECT_VARIANTS

    return {BASELINE_KERNEL: BASELINE_KERNEL, **{v.name: v.spec for v in CORRECT_VARIANTS.values() if not v.nightly}}


def select_runs(
    only: Sequence[str] | None, *, baseline: bool = True, specs: dict[str, str] | None = None, baselines: dict[str, str] | None = None
) -> list[RunSpec]:
    """The runs to make: the baselines first (they run the whole suite, so they start first),
    then the selected mutants in catalogue order. KeyError naming the unknown ones for a bad `only`.

    specs: {name: --conformance-kernel spec} of the mutants (default: catalogue_specs()); baselines: of the
    kernels that must pass (default: baseline_specs(); with specs given, only emulated)."""
    known = dict(specs) if specs is not None else catalogue_specs()
    chosen = list(known)
    if only:
        unknown = [n for n in only if n not in known]
        if unknown:
            raise KeyError(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(known)}")
        chosen = [n for n in known if n in set(only)]
    if baselines is None:
        baselines = baseline_specs() if specs is None else {BASELINE_KERNEL: BASELINE_KERNEL}
    runs = [RunSpec(name, spec, "baseline") for name, spec in baselines.items()] if baseline else []
    return runs + [RunSpec(n, known[n], "mutant") for n in chosen]


def run_mutation_score(
    runs: Sequence[RunSpec],
    *,
    hypothesis_profile: str = "ci",
    jobs: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    device: str | None = None,
    shrink: bool = False,
    progress: TextIO | None = None,
    command: Sequence[str] | None = None,
    suite: Sequence[str] = (SUITE_PATH,),
    extra: Sequence[str] = (),
    keep: Path | None = None,
    command_line: str = "",
    on_result: Callable[[RunResult], None] | None = None,
) -> Score:
    """Run every `runs` entry, `jobs` at a time (default: CPU count), and collect the score.

    Each run works in its own subfolder of a temporary folder (of `keep` when given, which is
    then left in place for inspection). When more than one run goes at a time, each
    subprocess's torch gets one intra-op thread (OMP/MKL_NUM_THREADS, unless already set).
    `progress` gets one line per finished run."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    threads = 1 if jobs > 1 else None
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    root = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="mutation-score-"))
    root.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    results: dict[RunSpec, RunResult] = {}
    t0 = time.perf_counter()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {
                pool.submit(
                    run_one,
                    run,
                    work_dir=root / run.name,
                    hypothesis_profile=hypothesis_profile,
                    timeout_s=timeout_s,
                    device=device,
                    shrink=shrink,
                    threads=threads,
                    command=command,
                    suite=suite,
                    extra=extra,
                ): run
                for run in runs
            }
            for future in concurrent.futures.as_completed(futures):
                run = futures[future]
                result = future.result()
                with lock:
                    results[run] = result
                    if progress is not None:
                        print(progress_line(result, len(results), len(runs)), file=progress, flush=True)
                if on_result is not None:
                    on_result(result)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    wall_s = time.perf_counter() - t0
    baselines = [results[r] for r in runs if r.role == "baseline"]
    mutants = [results[r] for r in runs if r.role == "mutant"]
    return Score(
        mutants=mutants,
        baselines=baselines,
        hypothesis_profile=hypothesis_profile,
        jobs=jobs,
        wall_s=wall_s,
        date=date,
        command=command_line,
        shrink=shrink,
    )
