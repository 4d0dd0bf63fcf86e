"""`python -m conformance fuzz --kernel NAME`: a time-budgeted differential fuzzing campaign outside pytest.

Hypothesis draws recipes for the chosen properties and judges each call exactly as the suite does
(conformance.checks.differential, with target() on every output's error / bound so the search
climbs toward large errors; conformance.checks.violation_run for precondition violations).
The campaign runs in chunks of the Hypothesis profile's max_examples (--hypothesis-profile: ci
25, dev 40, nightly 1000), each with a fresh seed (ci: seeds 0, 1, 2, ... so a campaign is \
reproducible), until the
budget is spent (counted from the end of the set-up; a chunk stops the moment its time is up, not
after drawing the rest of its examples). Problem sizes ramp up: the first chunk draws at most 1024 keys per call, each
next chunk 4x more, up to the suite's own limits (quick feedback, quick shrinks). \
A failure is shrunk by Hypothesis, for at most --shrink-seconds after it was
found (the campaign may overrun its budget by that much), then saved to the pending corpus
(content-hash names: the same failure is stored once; CONFORMANCE_PENDING_DIR overrides the
folder). An example failing the same way as a failure already saved counts, but is not shrunk
again. After --max-failures distinct failures the campaign stops.

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
patterns, writers, precondition violations, distributions, heads, ...: conformance.coverage),
as drawn / drawable by the properties' strategies at full size, with the classes never drawn.
Every judged example counts, failing ones and shrink candidates included. The same numbers go
to `fuzz-summary.json` in the run folder (FUZZ_SUMMARY; schema in `summary_json`).

Exit codes: 0 nothing found, 1 failures found (and saved), 2 usage error (unknown kernel,
device or property; bad budget) or a campaign Hypothesis could not run (every draw rejected by
the kernel, ...), 130 interrupted (the summary and report are still written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from conformance.cli.args import positive_float, positive_int
from conformance.coverage import Coverage, reachable_union, recipes_space, violating_space
from conformance.crashes import mark_session_finish, mark_session_start, recover_leftovers
from conformance.report import FUZZ_SUMMARY  # the machine-readable summary in the run folder
from conformance.state import RUN_ID_ENV, call_timeout_s, current_run_dir, pending_dir
from conformance.watchdog import KernelHung

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
PROPERTIES = ("differential", "long_rows", "preconditions")
HYPOTHESIS_PROFILES = ("ci", "dev", "nightly")
OUTPUT_MODES = ("out/exact-steps", "out/float64", "lse/exact-steps", "lse/float64")
SUMMARY_SCHEMA = 1


def register(subparsers: Any) -> None:
    """Add the `fuzz` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "fuzz",
        help="time-budgeted Hypothesis campaign against a kernel; failures saved (shrunk) to the pending corpus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kernel", required=True, help="kernel: emulated, flydsl, flashmla or package.module:attr")
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
        help="examples per chunk (default: the Hypothesis profile's max_examples); smaller chunks ramp sizes up sooner",
    )
    p.add_argument("--no-save", action="store_true", help="do not write failures to the pending corpus (report them only)")
    p.set_defaults(func=run)


# ---------------------------------------------------------------------------------------------


class ProgressLine:
    """A status line on `stream`: rewritten in place on a terminal, else one line per `every` s."""

    def __init__(self, stream: TextIO, *, every: float = 10.0):
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.every = every if not self.tty else 0.2
        self.last = 0.0
        self.width = 0

    def show(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class Failure:
    """One distinct failure: its last (smallest) failing recipe and message."""

    property: str
    recipe: Any
    message: str
    signature: frozenset[str]
    found_at: float
    path: Path | None = None
    new: bool = False
    minimised: list[str] = field(default_factory=list)


@dataclass
class Campaign:
    """Counters and failures of a campaign."""

    started: float = field(default_factory=time.monotonic)
    examples: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)  # per property: seconds spent judging its examples
    coverage: Coverage | None = None  # strategy features of the judged examples (campaign() sets it)
    outcomes: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    max_ratio: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OUTPUT_MODES, 0.0))
    failures: dict[frozenset[str], Failure] = field(default_factory=dict)  # by failure signature
    chunks: int = 0
    seeds: list[int] = field(default_factory=list)
    shrinking: bool = False
    stopped: str = ""
    known_failures: int = 0
    finished: float | None = None  # when the search (and shrinking) ended; the run report comes after

    def elapsed(self) -> float:
        """Wall seconds of the campaign: until it finished, else until now."""
        return (self.finished if self.finished is not None else time.monotonic()) - self.started

    def rate(self, prop: str | None = None) -> float:
        """Examples per second: overall (prop None: all examples / wall time of the campaign) or of
        one property (its examples / the seconds spent judging them); 0 before any."""
        if prop is None:
            elapsed = self.elapsed()
            return sum(self.examples.values()) / elapsed if elapsed > 0 else 0.0
        return self.examples[prop] / self.seconds[prop] if self.seconds[prop] > 0 else 0.0

    def status(self, budget: float) -> str:
        elapsed = self.elapsed()
        total = sum(self.examples.values())
        fails = sum(c["fail"] for c in self.outcomes.values())
        ratios = " ".join(f"{k} {v:.3g}" for k, v in self.max_ratio.items() if k.endswith("exact-steps"))
        state = " shrinking" if self.shrinking else ""
        features = f"  features {self.coverage.headline()}" if self.coverage is not None else ""
        return (
            f"fuzz {elapsed:6.1f}/{budget:.0f} s  chunk {self.chunks}  examples {total} ({self.rate():.2f}/s)  failing {fails}  "
            f"distinct failures {len(self.failures)}  max err/bound {ratios}{features}{state}"
        )


HUNG_GRACE_S = 5.0  # seconds a call may run past the budget before it counts as hung


class _OutOfTime(BaseException):
    """Raised in a chunk's test body once its time is up (the budget, or a failure's shrink
    window): a BaseException, so Hypothesis stops the chunk at once instead of drawing (and
    mutating) the rest of its max_examples recipes for nothing."""


RAMP_KEYS = 1024  # total keys of the first chunk's problems; x4 per chunk up to the suite's sizes


def _fuzz_parameters(suite: Any, properties: list[str], chunk: int = 99) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per property, its strategy (strategies.hypothesis_recipes: "recipes" or "violating_recipes")
    and the arguments, sized for chunk number `chunk` (size ramp: the first chunk draws problems
    of at most RAMP_KEYS keys, each next one 4x more, up to the suite's own limits; small
    problems first give quick feedback and quick shrinks)."""
    from conformance.checks import backend_limits, size_limits

    limits = backend_limits(suite)
    cap = RAMP_KEYS * 4 ** min(chunk, 10)
    general = size_limits(suite)
    general = {"max_n_q": min(general["max_n_q"], max(8, cap // 64)), "max_total_keys": min(general["max_total_keys"], cap)}
    long_keys = min(8192 if suite.device.type == "cpu" else 1 << 15, cap)
    made = {
        "differential": ("recipes", {**general, **limits}),
        "long_rows": ("recipes", {"max_n_q": 4, "max_row": long_keys, "max_total_keys": long_keys, **limits}),
        "preconditions": (
            "violating_recipes",
            {
                "allow_out_of_range": suite.backend.bounded_index_reads,
                "max_total_keys": min(4096, cap),
                "heads": suite.backend.head_counts,
            },
        ),
    }
    return {name: made[name] for name in properties}


def _fuzz_strategies(suite: Any, properties: list[str], chunk: int = 99) -> dict[str, Any]:
    """The properties' recipe strategies, sized for chunk number `chunk` (see _fuzz_parameters)."""
    from strategies.hypothesis_recipes import recipes, violating_recipes

    made = {"recipes": recipes, "violating_recipes": violating_recipes}
    return {name: made[kind](**kwargs) for name, (kind, kwargs) in _fuzz_parameters(suite, properties, chunk).items()}


def fuzz_reachable(suite: Any, properties: list[str]) -> dict[str, tuple[str, ...]]:
    """Per coverage family, the classes the properties' strategies can draw at full size (the
    ramp's later chunks): the denominators of the campaign's coverage."""
    made = {"recipes": recipes_space, "violating_recipes": violating_space}
    return reachable_union(made[kind](**kwargs) for kind, kwargs in _fuzz_parameters(suite, properties).values())


def campaign(
    suite: Any,
    state: Campaign,
    *,
    budget_s: float,
    hypothesis_profile: str,
    properties: list[str],
    shrink_s: float,
    max_failures: int,
    save: bool,
    progress: ProgressLine,
    chunk_examples: int | None = None,
) -> Campaign:
    """Run the campaign (see the module docstring) into `state` (its counters and failures stay
    valid when the campaign is interrupted); returns `state`."""
    from hypothesis import HealthCheck, Verbosity, given, seed, settings
    from hypothesis import strategies as st
    from hypothesis.errors import HypothesisException

    from conformance.checks import differential, violation_run
    from conformance.corpus import new_entry, save_entry
    from conformance.hypothesis_profiles import PROFILES
    from conformance.replay import failure_signature

    strategies: dict[str, Any] = {}
    configured_timeout = call_timeout_s()
    base = PROFILES[hypothesis_profile]
    chunk_settings = settings(
        parent=base,
        max_examples=chunk_examples or base.max_examples,
        database=None,
        derandomize=False,
        deadline=None,
        verbosity=Verbosity.quiet,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=True,
    )
    chunk_failures: dict[frozenset[str], Failure] = {}
    if state.coverage is None:
        state.coverage = Coverage(fuzz_reachable(suite, properties))
    coverage = state.coverage
    # the budget is the search's: it starts once the campaign is set up (imports, the session
    # marker, leftover recovery and the coverage denominators are not part of it)
    state.started = time.monotonic()
    deadline = state.started + budget_s
    stop_at = [deadline]

    def body(data: Any) -> None:
        prop = data.draw(st.sampled_from(properties), label="property")
        recipe = data.draw(strategies[prop], label="recipe")
        if time.monotonic() >= stop_at[0]:
            # the chunk stops here (the failures seen so far are in chunk_failures); only after
            # the draws: a test case that draws less when time is up than the same choices drew
            # before is inconsistent data generation to Hypothesis (FlakyStrategyDefinition)
            raise _OutOfTime
        name = f"fuzz:{prop}"
        # no call may outlive the budget: the per-call limit shrinks to what is left (+ grace)
        left = max(HUNG_GRACE_S, stop_at[0] - time.monotonic() + HUNG_GRACE_S)
        call_limit = min(configured_timeout or left, left)
        judged_before, started = state.examples[prop], time.monotonic()
        try:
            if prop == "preconditions":
                violation_run(suite, recipe, name, timeout_s=call_limit)
                state.outcomes[prop]["observed"] += 1
            else:
                for verdict, mode in zip(differential(suite, recipe, name, timeout_s=call_limit), ("exact-steps", "float64"), strict=False):
                    for output, value in (("out", verdict.out_ratio), ("lse", verdict.lse_ratio)):
                        key = f"{output}/{mode}"
                        state.max_ratio[key] = max(state.max_ratio[key], value)
                state.outcomes[prop]["pass"] += 1
            state.examples[prop] += 1
        except HypothesisException:
            raise  # a rejection (the backend does not take the call): not an example
        except KernelHung as err:
            # not shrunk (every candidate could hang for the whole limit): saved as found, campaign over
            state.examples[prop] += 1
            state.outcomes[prop]["fail"] += 1
            message = str(err)
            chunk_failures[failure_signature(message)] = Failure(prop, recipe, message, failure_signature(message), time.monotonic())
            state.stopped = f"a kernel call hung ({message}); the campaign stops"
            raise
        except Exception as err:
            state.examples[prop] += 1
            state.outcomes[prop]["fail"] += 1
            message = f"{type(err).__name__}: {err}" if not isinstance(err, AssertionError) else str(err)
            key = failure_signature(message)  # the same failure through two properties is one failure
            if key in state.failures and key not in chunk_failures:
                state.known_failures += 1
                return  # already saved: not shrunk again, the search goes on for other failures
            now = time.monotonic()
            if not chunk_failures:
                stop_at[0] = now + shrink_s
                state.shrinking = True
            previous = chunk_failures.get(key)
            chunk_failures[key] = Failure(prop, recipe, message, key, previous.found_at if previous else now)
            raise
        finally:
            if state.examples[prop] > judged_before:  # an example (passing or failing), not a rejection
                state.seconds[prop] += time.monotonic() - started
                coverage.add(recipe)
            progress.show(state.status(budget_s))

    chunk = 0
    while time.monotonic() < deadline and len(state.failures) < max_failures:
        chunk_seed = chunk if hypothesis_profile == "ci" else int.from_bytes(os.urandom(4), "little")
        state.seeds.append(chunk_seed)
        state.chunks = chunk = chunk + 1
        chunk_failures.clear()
        strategies.clear()
        strategies.update(_fuzz_strategies(suite, properties, chunk - 1))
        stop_at[0] = deadline
        state.shrinking = False

        def chunk_test(data: Any) -> None:
            body(data)

        test = seed(chunk_seed)(chunk_settings(given(data=st.data())(chunk_test)))
        hung = False
        try:
            test()
        except _OutOfTime:
            pass
        except KernelHung:
            hung = True
        except Exception as err:  # noqa: BLE001 - the failures were tracked in the body; anything else is reported
            if not chunk_failures:
                state.stopped = f"Hypothesis stopped: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                break
        state.shrinking = False
        for key, failure in chunk_failures.items():
            if key in state.failures:
                continue
            if not hung:
                _minimise_failure(suite, failure, shrink_s, progress)
            if save:
                expect = "precondition" if failure.property == "preconditions" else "conform"
                first = failure.message.strip().splitlines()
                caught = (
                    f"fuzz {failure.property}: "
                    f"{(first[1] if len(first) > 1 and first[0].startswith('kernel output') else first[0]) if first else 'failure'}"
                )
                entry = new_entry(
                    failure.recipe, caught=caught[:500], kernel=suite.name, property_name=f"fuzz:{failure.property}", expect=expect
                )
                directory = pending_dir()
                existed = (directory / f"{_hash(failure.recipe)}.json").exists()
                failure.path = save_entry(entry, directory)
                failure.new = not existed
            state.failures[key] = failure
        progress.show(state.status(budget_s), force=True)
        if hung:
            break
    state.finished = time.monotonic()
    return state


def _minimise_failure(suite: Any, failure: Failure, budget_s: float, progress: ProgressLine) -> None:
    """Shrink Hypothesis's result further with the greedy passes of conformance.minimise (the
    Hypothesis shrink of a large example may be cut by its time window)."""
    from conformance.minimise import in_process_check, minimise

    expect = "precondition" if failure.property == "preconditions" else "conform"
    progress.show(
        f"fuzz: minimising the {failure.property} failure (n_q {failure.recipe.n_q}, heads {failure.recipe.heads}, "
        f"{failure.recipe.total_keys} keys)",
        force=True,
    )
    result = minimise(failure.recipe, in_process_check(suite, expect, name=f"fuzz:{failure.property}"), max_seconds=budget_s)
    if result.changed:
        from conformance.corpus import CorpusEntry
        from conformance.replay import diagnose, sandbox_state

        failure.recipe = result.recipe
        failure.minimised = result.accepted
        with sandbox_state():
            diag = diagnose(CorpusEntry(name="fuzz", recipe=result.recipe, expect=expect), suite, findings=False)
        if diag.reasons:
            failure.message = "\n".join(diag.reasons)


def _hash(recipe: Any) -> str:
    from conformance.corpus import recipe_hash

    return recipe_hash(recipe)


def format_summary(
    state: Campaign, suite: Any, *, budget_s: float, hypothesis_profile: str, report_path: Path | None, summary_path: Path | None = None
) -> str:
    """The end-of-campaign summary (stdout)."""
    elapsed = state.elapsed()
    seeds = f"{state.seeds[:8]}{' ...' if len(state.seeds) > 8 else ''}"
    lines = [
        (
            f"fuzz summary: kernel {suite.name} (profile {suite.profile.name}) on {suite.device}, Hypothesis profile {hypothesis_profile}, "
            f"{elapsed:.1f} s (budget {budget_s:g} s), {state.chunks} chunk(s), seeds {seeds}"
        )
    ]
    lines.append(f"  {'property':<14} {'examples':>8} {'pass':>6} {'fail':>6} {'observed':>9} {'judging s':>10} {'examples/s':>11}")
    for prop in sorted(set(state.examples) | set(state.outcomes)):
        o = state.outcomes[prop]
        lines.append(
            f"  {prop:<14} {state.examples[prop]:>8} {o['pass']:>6} {o['fail']:>6} {o['observed']:>9} "
            f"{state.seconds[prop]:>10.1f} {state.rate(prop):>11.2f}"
        )
    lines += [f"  {line}" for line in _rate_and_coverage_lines(state)]
    lines.append("  largest err/bound of passing examples: " + ", ".join(f"{k} {v:.3g}" for k, v in state.max_ratio.items()))
    if state.known_failures:
        lines.append(f"  {state.known_failures} further example(s) failed the same way as a failure already saved (not shrunk again)")
    if state.stopped:
        lines.append(f"  {state.stopped}")
    if state.failures:
        lines.append(f"  FAILURES: {len(state.failures)} distinct")
        for failure in state.failures.values():
            r = failure.recipe
            first = [line for line in failure.message.splitlines() if line.strip() and not line.startswith("kernel output outside")]
            lines.append(f"  - {failure.property}: {(first[0] if first else '')[:300]}")
            lines.append(
                f"    shrunk recipe: n_q {r.n_q}, heads {r.heads}, row lengths {list(r.row_lengths)[:8]}{' ...' if r.n_q > 8 else ''} "
                f"({r.total_keys} keys), latent {r.latent}, q {r.q}, writer {r.writer}"
                + (f" (greedy passes after Hypothesis: {len(failure.minimised)} steps)" if failure.minimised else "")
            )
            if failure.path is not None:
                lines.append(f"    saved to {failure.path}{'' if failure.new else ' (already there)'}")
                lines.append(f"    replay: python -m conformance replay {failure.path} --kernel {suite.name}")
    else:
        lines.append("  no failures found")
    if report_path is not None:
        lines.append(f"  run report: {report_path}")
    if summary_path is not None:
        lines.append(f"  summary (JSON): {summary_path}")
    return "\n".join(lines)


def _rate_and_coverage_lines(state: Campaign) -> list[str]:
    """The summary's examples/s line and coverage lines (also in FUZZ_SUMMARY and the run report)."""
    elapsed = state.elapsed()
    per_property = ", ".join(f"{prop} {state.rate(prop):.2f}" for prop in sorted(state.examples))
    lines = [
        f"examples/s: {state.rate():.2f} overall ({sum(state.examples.values())} examples in {elapsed:.1f} s of wall time, "
        f"shrinking included); per property (examples / seconds judging them): {per_property or '-'}"
    ]
    return lines + (state.coverage.summary_lines() if state.coverage is not None else [])


def summary_json(
    state: Campaign, suite: Any, *, budget_s: float, hypothesis_profile: str, properties: list[str], exit_code: int
) -> dict[str, Any]:
    """The machine-readable summary (FUZZ_SUMMARY). Keys: schema, kernel, numerics_profile,
    device, hypothesis_profile, properties, budget_s, seconds (wall time), chunks, seeds,
    examples, examples_per_s (overall), per_property {prop: examples, pass, fail, observed,
    seconds (judging), examples_per_s}, failures (distinct), known_failures, stopped,
    exit_code, features {family: title, hit, reachable, counts per reachable class, never_hit,
    not_drawable, outside} (conformance.coverage.Coverage.to_json), summary_lines (the
    examples/s and coverage lines of the text summary, which the run report shows)."""
    elapsed = state.elapsed()
    coverage = state.coverage
    return {
        "schema": SUMMARY_SCHEMA,
        "kernel": suite.name,
        "numerics_profile": suite.profile.name,
        "device": str(suite.device),
        "hypothesis_profile": hypothesis_profile,
        "properties": list(properties),
        "budget_s": budget_s,
        "seconds": round(elapsed, 3),
        "chunks": state.chunks,
        "seeds": list(state.seeds),
        "examples": sum(state.examples.values()),
        "examples_per_s": round(state.rate(), 4),
        "per_property": {
            prop: {
                "examples": state.examples[prop],
                **{k: state.outcomes[prop][k] for k in ("pass", "fail", "observed")},
                "seconds": round(state.seconds[prop], 3),
                "examples_per_s": round(state.rate(prop), 4),
            }
            for prop in properties
        },
        "failures": len(state.failures),
        "known_failures": state.known_failures,
        "stopped": state.stopped,
        "exit_code": exit_code,
        "features": coverage.to_json() if coverage is not None else {},
        "summary_lines": _rate_and_coverage_lines(state),
    }


def run(args: argparse.Namespace) -> int:
    """Handler of `fuzz`; returns the exit code."""
    from conformance.target import TargetError, build_target

    budget_s = args.seconds if args.seconds is not None else 60.0 * (args.minutes if args.minutes is not None else 5.0)
    properties = list(dict.fromkeys(args.property or PROPERTIES))
    shrink_s = args.shrink_seconds if args.shrink_seconds is not None else max(30.0, 0.2 * budget_s)
    try:
        suite = build_target(args.kernel, profile=args.numerics_profile, device=args.device)
    except TargetError as err:
        hint = (
            f" ({args.numerics_profile!r} is a Hypothesis profile: --hypothesis-profile {args.numerics_profile})"
            if args.numerics_profile in HYPOTHESIS_PROFILES
            else ""
        )
        print(f"fuzz: {err}{hint}", file=sys.stderr)
        return EXIT_USAGE

    from conformance.state import StateDirError, check_state_dir

    try:
        check_state_dir()
    except StateDirError as err:
        print(f"fuzz: {err}", file=sys.stderr)
        return EXIT_USAGE

    saved_run_id = os.environ.get(RUN_ID_ENV)
    os.environ[RUN_ID_ENV] = f"fuzz-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run_dir = current_run_dir()
    assert run_dir is not None
    progress = ProgressLine(sys.stderr)
    interrupted = False
    state = Campaign()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        mark_session_start(run_dir, kind="fuzz", kernel=suite.name)
        for line in recover_leftovers(run_dir.name, pending_dir(), recovering_run=run_dir):
            from conformance.crashes import describe

            print("fuzz: recovered " + describe(line), file=sys.stderr)
        print(
            f"fuzz: kernel {suite.name} (profile {suite.profile.name}) on {suite.device}; properties {', '.join(properties)}; "
            f"budget {budget_s:g} s (+ up to {shrink_s:g} s shrinking); Hypothesis profile {args.hypothesis_profile}; run folder {run_dir}",
            file=sys.stderr,
            flush=True,
        )
        try:
            campaign(
                suite,
                state,
                budget_s=budget_s,
                hypothesis_profile=args.hypothesis_profile,
                properties=properties,
                shrink_s=shrink_s,
                max_failures=args.max_failures,
                save=not args.no_save,
                progress=progress,
                chunk_examples=args.chunk_examples,
            )
        except KeyboardInterrupt:
            interrupted = True
        if state.finished is None:
            state.finished = time.monotonic()
        progress.done()
        mark_session_finish(run_dir, exitstatus=_exit_code(state, interrupted))
        summary_path: Path | None = run_dir / FUZZ_SUMMARY
        try:
            from conformance.wal import atomic_write_text

            if state.coverage is None:  # interrupted before the first chunk: nothing counted, still the denominators
                state.coverage = Coverage(fuzz_reachable(suite, properties))
            data = summary_json(
                state,
                suite,
                budget_s=budget_s,
                hypothesis_profile=args.hypothesis_profile,
                properties=properties,
                exit_code=_exit_code(state, interrupted),
            )
            atomic_write_text(summary_path, json.dumps(data, indent=2, allow_nan=False) + "\n")
        except Exception as err:  # noqa: BLE001 - the summary must still be printed
            summary_path = None
            print(f"fuzz: {FUZZ_SUMMARY} not written: {type(err).__name__}: {err}", file=sys.stderr)
        report_path = None
        try:
            from conformance.report import write_report

            report_path = write_report(run_dir).md_path
        except Exception as err:  # noqa: BLE001 - the summary must still be printed
            print(f"fuzz: run report not written: {type(err).__name__}: {err}", file=sys.stderr)
        if interrupted:
            print("fuzz: interrupted", file=sys.stderr)
        print(
            format_summary(
                state,
                suite,
                budget_s=budget_s,
                hypothesis_profile=args.hypothesis_profile,
                report_path=report_path,
                summary_path=summary_path,
            )
        )
    finally:
        if saved_run_id is None:
            os.environ.pop(RUN_ID_ENV, None)
        else:
            os.environ[RUN_ID_ENV] = saved_run_id
    return _exit_code(state, interrupted)


def _exit_code(state: Campaign, interrupted: bool) -> int:
    """The campaign's exit code (see the module docstring); also recorded in session.json."""
    if interrupted:
        return 130
    if state.failures:
        return EXIT_FAIL
    return EXIT_USAGE if state.stopped else EXIT_OK
