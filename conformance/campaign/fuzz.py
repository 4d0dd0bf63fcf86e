"""The fuzz campaign as a library: a time-budgeted Hypothesis search over the suite's properties.

`campaign(target, state, budget_s=..., ...)` draws recipes for the chosen properties and judges
each call exactly as the suite does (conformance.judging.checks.differential, with target() on
every output's error / bound so the search climbs toward large errors;
conformance.judging.checks.violation_run for precondition violations), in chunks (each a fresh
`@given` run with its own seed: `chunk_seed`) until the budget (seconds, counted from the end of
the set-up) is spent. Chunk k (from 0) draws problems of at most RAMP_KEYS * 4^k keys (up to the
suite's limits: `_fuzz_parameters`) and has `chunk_size(k, ...)` examples: RAMP_FIRST_EXAMPLES *
2^k up to the profile's max_examples (or --chunk-examples, every chunk). A failure is shrunk for
at most `shrink_s` seconds and saved to the pending corpus. `Campaign` holds what the campaign
counted (examples, seconds per property, failures, coverage); `format_summary` and
`summary_json` turn it into the summary printed by `python -m conformance fuzz`
(conformance.cli.fuzz, the command line) and written to the run folder (FUZZ_SUMMARY, schema
SUMMARY_SCHEMA).

Why the examples per chunk grow geometrically (the schedule's contract):
- a short campaign of any profile reaches the full sizes within seconds: chunk 4 (the first of
  full size on a GPU: 2^17 keys, 256 query rows from chunk 2) starts after 25 + 50 + 100 + 200 =
  375 examples of the nightly profile (on a CPU, full size from chunk 2, after 75), where a chunk
  of the profile's 1000 examples each kept a campaign of a few minutes in its 1024-key chunk;
- a long one spends its examples as before: from chunk log2(max_examples / 25) on, every chunk
  is of the profile's max_examples at full size, so Hypothesis's per-run machinery (its first
  examples drawn small, target() hill-climbing from half a run on, the shrink of a run's
  failure) works on the chunks where almost all examples are; the ramp's small problems stay
  first (quick feedback, quick shrinks), only fewer of them;
- reproducible: sizes and caps follow the chunk number, never the clock (a time-based ramp would
  make a ci campaign's recipes depend on the machine's speed and load); the ci profile's chunks
  are 25 examples from the first (seeds 0, 1, 2, ...), the same campaign as with fixed chunks;
- full-size examples interleaved in every chunk instead would cost most of the first chunk's
  time on a CPU (a 2^17-key call takes seconds) and put large recipes in the failures the ramp
  keeps small; coverage's "never hit" classes then mean "not drawn", not "not reached yet".

A fleet of campaigns (docs/fleet.md): a campaign that is shard i of n draws from its own seed
stream (conformance.fleet.shards.chunk_seed, from a seed base all shards share: disjoint
between shards, the same on a rerun). A failure leaves the runner the moment it is first seen:
its recipe is saved to the pending folder at once (marked unshrunk in its provenance) and, with
a FleetRunner (conformance.fleet.runner), pushed to the store's inbox marked unshrunk, and the
lease of its failure group is asked for: the holder shrinks and minimises it, then saves and
pushes the shrunk entry (the unshrunk file leaves its pending folder) and marks the lease done; a
runner that does not get the lease stops that chunk's shrinking at once and goes on searching
(what it found is in the inbox, with it as finder). A runner killed at any point has saved and
pushed (or queued) every failure it had seen.

Several recipes per example (`recipes_per_example` > 1, `fuzz --recipes-per-example N`): an
example draws a list of 1 to N recipes of its property, each drawn as alone and each its own
kernel call (the calls' shapes are the recipes' own), judged together around the calls
(conformance.judging.batch: one reference-and-bound pass, one comparison, each call's numbers bit
for bit its own); the first failing recipe fails the example with the failure it fails with
alone, and Hypothesis shrinks the list by dropping recipes down to that one, which is what is
saved and replayed. The counters (examples, pass, fail, coverage) count recipes judged; the
chunks' sizes count examples. Hypothesis builds most examples by mutating an earlier one (a span
copied over another), which for a list repeats its other recipes: a recipe that already passed
is not judged again (Campaign.repeats counts them; one recipe per example repeats about 6% of
its recipes, a list of up to 16 about half).

Packed calls (`pack` > 1, `fuzz --pack N`): the differential and long_rows properties draw, each
half of the time, a recipe alone (as without packing: every shape, layout and option they draw)
or a packed call (strategies.hypothesis_recipes.packs: the call's query rows drawn as the
property draws a call alone, then filled with up to N recipes of the property, sharing heads,
softmax scale, has_invalid and return_lse, the rows' keys capped as a call alone caps them: the
kernel sees the same distribution of call shapes as without packing), from chunk PACK_FROM_CHUNK
on (the first chunks, 25 + 50 examples, draw recipes alone: the quick kills happen there, as
without packing). One call and one judgement then cover several recipes, which is where a GPU
campaign's time goes (launches around a small call). A pack's first part is drawn from the
example's choices and its other parts are fresh draws of the same strategy seeded by what the
example drew before them (`pack_parts` "fresh", the default; strategies.fresh): Hypothesis builds
most examples by changing earlier ones (a span copied over another, one choice changed by
target()'s climb), which would repeat the other parts of a pack drawn from the choices
(`pack_parts` "drawn"), while fresh parts are new whenever anything before them changed. A
failing pack's parts are judged alone and the first that fails alone is the failure
(conformance.judging.batch.differential_pack), shrunk by Hypothesis where it is the drawn part
or where a smaller pack still fails, and by the greedy minimiser (conformance.records.minimise)
after it; a pack whose parts all pass alone is saved as the pack (it replays as the same call).
The counters count recipes: a passing call counts the recipes it holds that had not passed
before; a recipe that passed before is judged again in its new call but counted as a repeat
(Campaign.repeats), not as an example; a failure counts one. An example whose call passed
before (the same recipe alone, or the same pack: the same bytes through the same kernel) is not
judged again, as a list's recipes that passed are not (Campaign.repeated_calls; its recipes count
as repeats): Hypothesis is given the hypothesis.target() values that call gave, so the search
goes on as if it had been made. 6 to 8% of a CPU campaign's calls are such repeats, mostly small
recipes alone that Hypothesis drew again from other choices.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from conformance.durability.device_fault import describe as describe_fault
from conformance.durability.device_fault import fault_in
from conformance.durability.state import call_timeout_s, kernel_pending_dir
from conformance.durability.watchdog import KernelHung
from conformance.judging.progress import StatusLine
from conformance.records.coverage import Coverage, reachable_union, recipes_space, violating_space

PROPERTIES = ("differential", "long_rows", "preconditions")
OUTPUT_MODES = ("out/exact-steps", "out/float64", "lse/exact-steps", "lse/float64")
SUMMARY_SCHEMA = 1


class ProgressLine(StatusLine):
    """The campaign's status line (conformance.judging.progress.StatusLine): rewritten in place
    on a terminal, else one line per `every` seconds (default 10). Best effort: a failed write
    closes the line and raises nothing, so it can never end the campaign or count as a failure of
    the example in flight."""

    def __init__(self, stream: TextIO, *, every: float = 10.0) -> None:
        super().__init__(stream, every=every)


@dataclass
class Failure:
    """One distinct failure: its last (smallest) failing recipe and message."""

    property: str
    recipe: Any
    message: str
    signature: frozenset[str]
    found_at: float  # time.monotonic() when first seen
    examples_at: int = 0  # the campaign's examples (every property) when first seen, the failing one included
    path: Path | None = None
    new: bool = False
    minimised: list[str] = field(default_factory=list)
    finding: dict[str, str] = field(default_factory=dict)  # conformance.judging.finding, as found (then as minimised)
    raw_path: Path | None = None  # the recipe as first seen, saved at once (unshrunk)
    raw_created: bool = False  # whether this campaign wrote raw_path (else an earlier run had)
    lease: Any = None  # conformance.fleet.lease.Lease of its group, with a FleetRunner
    fleet: list[str] = field(default_factory=list)  # what happened to it in the fleet, one line each

    @property
    def finding_group(self) -> tuple[str, str]:
        """Its finding's group (conformance.judging.finding.Finding.group): the lease's key."""
        from conformance.judging.finding import SUITE_ERROR, Finding

        try:
            return Finding.from_json_dict(self.finding).group
        except (KeyError, ValueError):
            return (SUITE_ERROR, "unclassified failure")

    @property
    def shrink_here(self) -> bool:
        """Whether this runner shrinks it (no fleet, or the lease of its group was granted)."""
        return self.lease is None or self.lease.granted


@dataclass
class Campaign:
    """Counters and failures of a campaign."""

    started: float = field(default_factory=time.monotonic)
    cpu_started: float = field(default_factory=time.process_time)  # CPU seconds of this process (all threads)
    examples: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)  # per property: seconds spent judging its examples
    calls: Counter = field(default_factory=Counter)  # per property: kernel calls judged (a passing or failing example's; repeats included)
    packed_calls: Counter = field(default_factory=Counter)  # per property: those of them that held two recipes or more (pack > 1)
    coverage: Coverage | None = None  # strategy features of the judged examples (campaign() sets it)
    outcomes: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    max_ratio: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OUTPUT_MODES, 0.0))
    failures: dict[frozenset[str], Failure] = field(default_factory=dict)  # by failure signature
    chunks: int = 0
    seeds: list[int] = field(default_factory=list)
    chunk_examples: list[int] = field(default_factory=list)  # per chunk started: its max_examples (chunk_size)
    shrinking: bool = False
    stopped: str = ""
    known_failures: int = 0
    repeats: int = 0  # recipes drawn again after they had passed: not judged again (recipes_per_example > 1), not counted (pack > 1)
    repeated_calls: int = 0  # pack > 1: examples whose call (a recipe alone, or a whole pack) had passed before: not made again
    passed: set[str] = field(default_factory=set)  # content hashes of the recipes that passed (recipes_per_example > 1, pack > 1)
    # pack > 1: the content hash of each call that passed (a recipe alone, or a pack) -> the values it gave hypothesis.target()
    passed_calls: dict[str, dict[str, float]] = field(default_factory=dict)
    finished: float | None = None  # when the search (and shrinking) ended; the run report comes after
    cpu_finished: float | None = None  # process CPU time then

    def elapsed(self) -> float:
        """Wall seconds of the campaign: until it finished, else until now."""
        return (self.finished if self.finished is not None else time.monotonic()) - self.started

    def cpu_seconds(self) -> float:
        """CPU seconds this process spent on the campaign (every thread of it; a GPU's time is
        not in it): until it finished, else until now."""
        return (self.cpu_finished if self.cpu_finished is not None else time.process_time()) - self.cpu_started

    def cpu_rate(self) -> float:
        """Examples per CPU second (cpu_seconds): what a machine of busy cores buys, whatever
        else shares them; 0 before any."""
        cpu = self.cpu_seconds()
        return sum(self.examples.values()) / cpu if cpu > 0 else 0.0

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


RECIPES_PER_EXAMPLE = 1  # `fuzz --recipes-per-example`'s default: one recipe per example (module docstring)
PACK_PART_SOURCES = ("fresh", "drawn")  # `fuzz --pack-parts`: a pack's parts after the first fresh draws (the default) or the test's own
DEFAULT_PACK = 64  # `fuzz --pack`'s default (default_pack): the most recipes of one packed call


def default_pack(recipes_per_example: int = 1) -> int:
    """`fuzz --pack`'s default: DEFAULT_PACK, on a GPU and on a CPU alike (a packed call keeps
    the calls' shapes, and its fresh parts are new recipes: module docstring, "Packed calls"),
    or 1 (no packed calls) with `recipes_per_example` > 1 (not taken together)."""
    return DEFAULT_PACK if recipes_per_example == 1 else 1


# The first chunk that draws packed calls (`pack` > 1): the chunks before it draw recipes alone, as
# without packing, which is where the quick kills happen (most of the mutant catalogue dies in
# the first 25 examples: benchmarks.fuzz_kills); packing raises the examples per second after them.
PACK_FROM_CHUNK = 2
HUNG_GRACE_S = 5.0  # seconds a call may run past the budget before it counts as hung


class _ContextLost(BaseException):
    """Raised in a chunk's test body after a device fault in a kernel call
    (conformance.durability.device_fault): the process's GPU context is broken, so neither
    Hypothesis's shrinking nor any later example can run; a BaseException, so Hypothesis stops at
    once and the campaign saves what it found and ends."""


class _OutOfTime(BaseException):
    """Raised in a chunk's test body once its time is up (the budget, or a failure's shrink
    window): a BaseException, so Hypothesis stops the chunk at once instead of drawing (and
    mutating) the rest of its max_examples recipes for nothing."""


RAMP_KEYS = 1024  # total keys of the first chunk's problems; x4 per chunk up to the suite's sizes
RAMP_FIRST_EXAMPLES = 25  # examples of the first chunk (the ci profile's max_examples); x2 per chunk up to max_examples


def chunk_size(chunk: int, max_examples: int, chunk_examples: int | None = None) -> int:
    """Examples of chunk number `chunk` (from 0): `chunk_examples` when given (every chunk, the
    --chunk-examples contract), else RAMP_FIRST_EXAMPLES * 2^chunk up to the Hypothesis profile's
    `max_examples` (nightly 1000: 25, 50, 100, 200, 400, 800, 1000, 1000, ...; ci 25: 25 each;
    dev 40: 25, 40, 40, ...)."""
    if chunk_examples is not None:
        return chunk_examples
    return min(max_examples, RAMP_FIRST_EXAMPLES << min(chunk, 20))


def chunk_seed(hypothesis_profile: str, chunk: int, shard: Any = None, seed_base: int | None = None) -> int:
    """The Hypothesis seed of chunk number `chunk` of `shard` (conformance.fleet.shards.Shard;
    None: 1/1): with a seed base, or for the ci profile (base 0), its seed stream
    (conformance.fleet.shards.chunk_seed: a ci campaign 1/1 has the seeds 0, 1, 2, ...); else 32
    fresh random bits."""
    from conformance.fleet.shards import UNSHARDED
    from conformance.fleet.shards import chunk_seed as stream_seed

    if seed_base is None and hypothesis_profile != "ci":
        return int.from_bytes(os.urandom(4), "little")
    return stream_seed(hypothesis_profile, chunk, shard or UNSHARDED, seed_base or 0)


def _fuzz_parameters(target: Any, properties: list[str], chunk: int = 99) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per property, its strategy (strategies.hypothesis_recipes: "recipes" or "violating_recipes")
    and the arguments, sized for chunk number `chunk` (size ramp: the first chunk draws problems
    of at most RAMP_KEYS keys, each next one 4x more, up to the suite's own limits; small
    problems first give quick feedback and quick shrinks)."""
    from conformance.judging.checks import backend_limits, size_limits
    from strategies.hypothesis_recipes import differential_writers

    limits = {**backend_limits(target), "writers": differential_writers(target.profile.needs_pow2_scales)}
    cap = RAMP_KEYS * 4 ** min(chunk, 10)
    general = size_limits(target)
    general = {"max_n_q": min(general["max_n_q"], max(8, cap // 64)), "max_total_keys": min(general["max_total_keys"], cap)}
    long_keys = min(8192 if target.device.type == "cpu" else 1 << 15, cap)
    made = {
        "differential": ("recipes", {**general, **limits}),
        "long_rows": ("recipes", {"max_n_q": 4, "max_row": long_keys, "max_total_keys": long_keys, **limits}),
        "preconditions": (
            "violating_recipes",
            {
                "allow_out_of_range": target.backend.bounded_index_reads,
                "max_total_keys": min(4096, cap),
                "heads": target.backend.head_counts,
            },
        ),
    }
    return {name: made[name] for name in properties}


def _fuzz_strategies(target: Any, properties: list[str], chunk: int = 99, pack: int = 1, pack_parts: str = "fresh") -> dict[str, Any]:
    """The properties' recipe strategies, sized for chunk number `chunk` (see _fuzz_parameters);
    `pack` > 1: the differential and long_rows properties draw a recipe alone or a packed call
    of up to `pack` recipes shaped as a call alone (strategies.hypothesis_recipes.packs), each
    half of the time (module docstring, "Packed calls"); `pack_parts` (PACK_PART_SOURCES): "fresh", a
    pack's parts after the first are fresh draws (packs' fresh_parts), or "drawn", every part
    from the test's choices (campaign() checks the value)."""
    from hypothesis import strategies as st

    from strategies.hypothesis_recipes import packs, recipes, violating_recipes

    made = {"recipes": recipes, "violating_recipes": violating_recipes}
    parameters = _fuzz_parameters(target, properties, chunk)
    drawn = {name: made[kind](**kwargs) for name, (kind, kwargs) in parameters.items()}
    for prop in ("differential", "long_rows") if pack > 1 else ():
        if prop not in drawn:
            continue
        options = {k: v for k, v in parameters[prop][1].items() if k != "allow_out"}
        drawn[prop] = st.one_of(drawn[prop], packs(max_parts=pack, fresh_parts=pack_parts == "fresh", **options))
    return drawn


def fuzz_reachable(target: Any, properties: list[str]) -> dict[str, tuple[str, ...]]:
    """Per coverage family, the classes the properties' strategies can draw at full size (the
    ramp's later chunks): the denominators of the campaign's coverage."""
    made = {"recipes": recipes_space, "violating_recipes": violating_space}
    return reachable_union(made[kind](**kwargs) for kind, kwargs in _fuzz_parameters(target, properties).values())


def campaign(
    target: Any,
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
    max_chunks: int | None = None,
    shard: Any = None,
    seed_base: int | None = None,
    fleet: Any = None,
    recipes_per_example: int = 1,
    pack: int = 1,
    pack_parts: str = "fresh",
) -> Campaign:
    """Run the campaign (see the module docstring) into `state` (its counters and failures stay
    valid when the campaign is interrupted); returns `state`. `chunk_examples`: the examples of
    every chunk (None: the geometric schedule, chunk_size). `max_chunks` ends it after that many
    chunks even with budget left (a campaign bounded by its examples, not by the clock: at most
    the sum of those chunks' chunk_size). `shard` (conformance.fleet.shards.Shard) and
    `seed_base`: the seed stream (chunk_seed); `fleet` (conformance.fleet.runner.FleetRunner):
    failures pushed to the store's inbox and shrunk under a lease (module docstring).
    `recipes_per_example` > 1: each example draws 1 to that many recipes of its property
    (strategies.hypothesis_recipes.recipe_lists), each its own kernel call, judged together
    (conformance.judging.batch); the counters count recipes judged, the chunks count examples
    (module docstring, "Several recipes per example"). `pack` > 1: the differential property
    draws packed calls of 1 to `pack` recipes beside its recipes alone (module docstring,
    "Packed calls"), their parts after the first fresh draws or, with `pack_parts` "drawn", the
    test's own (_fuzz_strategies); not with recipes_per_example > 1."""
    from hypothesis import HealthCheck, Verbosity, given, seed, settings
    from hypothesis import strategies as st
    from hypothesis.errors import HypothesisException

    from conformance.judging.batch import differential_batch, differential_pack, violation_batch
    from conformance.judging.checks import replay_targets, target_values, violation_run
    from conformance.judging.finding import finding_of
    from conformance.judging.hypothesis_profiles import PROFILES
    from conformance.records.corpus import save_entry
    from conformance.records.crashes import crash_finding
    from conformance.records.replay import failure_signature
    from strategies.hypothesis_recipes import recipe_lists

    if recipes_per_example < 1:
        raise ValueError(f"recipes_per_example must be >= 1, got {recipes_per_example}")
    if pack < 1:
        raise ValueError(f"pack must be >= 1, got {pack}")
    if pack > 1 and recipes_per_example > 1:
        raise ValueError("pack and recipes_per_example are not taken together: a pack is already several recipes in one call")
    if pack_parts not in PACK_PART_SOURCES:
        raise ValueError(f"pack_parts must be one of {', '.join(PACK_PART_SOURCES)}, got {pack_parts!r}")
    strategies: dict[str, Any] = {}
    configured_timeout = call_timeout_s()
    base = PROFILES[hypothesis_profile]
    chunk_settings = dict(
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
        state.coverage = Coverage(fuzz_reachable(target, properties))
    coverage = state.coverage
    # the budget is the search's: it starts once the campaign is set up (imports, the session
    # marker, leftover recovery and the coverage denominators are not part of it)
    state.started, state.cpu_started = time.monotonic(), time.process_time()
    deadline = state.started + budget_s
    stop_at = [deadline]

    def _last_failure(err: BaseException, prop: str, recipe: Any, message: str, finding: Any, stopped: str) -> None:
        """A failure after which the campaign stops (a hang, a device fault; `stopped` says so in
        the summary): counted, kept for saving after the chunk, not shrunk."""
        recipe = _failed_recipe(err, recipe)
        state.examples[prop] += 1
        state.outcomes[prop]["fail"] += 1
        coverage.add(recipe)
        last = Failure(prop, recipe, message, failure_signature(message), time.monotonic(), sum(state.examples.values()))
        last.finding = finding.to_json_dict()
        chunk_failures[failure_signature(message)] = last
        state.stopped = stopped

    def body(data: Any) -> None:
        prop = data.draw(st.sampled_from(properties), label="property")
        if recipes_per_example > 1:
            drawn = data.draw(strategies[prop], label="recipes")
        else:
            drawn = [data.draw(strategies[prop], label="recipe")]
        if time.monotonic() >= stop_at[0]:
            # the chunk stops here (the failures seen so far are in chunk_failures); only after
            # the draws: a test case that draws less when time is up than the same choices drew
            # before is inconsistent data generation to Hypothesis (FlakyStrategyDefinition)
            raise _OutOfTime
        name = f"fuzz:{prop}"
        # no call may outlive the budget: the per-call limit shrinks to what is left (+ grace)
        left = max(HUNG_GRACE_S, stop_at[0] - time.monotonic() + HUNG_GRACE_S)
        call_limit = min(configured_timeout or left, left)
        if recipes_per_example > 1:  # Hypothesis repeats most of a list's recipes in the examples it mutates from it
            fresh = [r for r in drawn if _hash(r) not in state.passed]
            state.repeats += len(drawn) - len(fresh)
            drawn = fresh
        if not drawn:
            return  # every recipe of the example passed before
        call_hash = _hash(drawn[0]) if pack > 1 and recipes_per_example == 1 else None
        if call_hash is not None and call_hash in state.passed_calls:
            # the very call passed before (the same recipe alone, or the same pack): not made again,
            # and Hypothesis is told what it was told then (the search goes on as if it were made)
            replay_targets(state.passed_calls[call_hash])
            state.repeats += len(_parts(drawn[0]))
            state.repeated_calls += 1
            return
        judged_before, started = state.examples[prop], time.monotonic()
        recipe = drawn[0]  # the recipe a failure is charged to: the failing one, once known (_failed_recipe)

        def judged(passed: Any, result: Any) -> None:
            """Count one recipe that passed (a differential's verdicts, or a violation observed);
            with packed calls, the recipes it holds that had not passed before (the others are
            repeats: module docstring, "Packed calls")."""
            held = _parts(passed)
            verdicts = {} if prop == "preconditions" else dict(zip(("exact-steps", "float64"), result, strict=False))
            state.calls[prop] += 1
            state.packed_calls[prop] += len(held) > 1
            if pack > 1:
                hashes = [call_hash] if call_hash is not None and len(held) == 1 else [_hash(part) for part in held]
                fresh = [part for part, key in zip(held, hashes, strict=True) if key not in state.passed]
                state.repeats += len(held) - len(fresh)
                state.passed.update(hashes)
                if call_hash is not None:  # and what hypothesis.target() was given (a differential's verdicts)
                    state.passed_calls[call_hash] = target_values([verdicts])
                held = tuple(fresh)
            if prop == "preconditions":
                state.outcomes[prop]["observed"] += len(held)
            else:
                for mode, verdict in verdicts.items():
                    for output, value in (("out", verdict.out_ratio), ("lse", verdict.lse_ratio)):
                        key = f"{output}/{mode}"
                        state.max_ratio[key] = max(state.max_ratio[key], value)
                state.outcomes[prop]["pass"] += len(held)
            state.examples[prop] += len(held)
            for part in held:
                coverage.add(part)
            if recipes_per_example > 1:
                state.passed.add(_hash(passed))

        try:
            if recipes_per_example > 1:  # one kernel call per recipe, judged together (conformance.judging.batch)
                batch = violation_batch if prop == "preconditions" else differential_batch
                batch(target, drawn, name, timeout_s=call_limit, on_judged=judged)
            elif prop == "preconditions":
                judged(recipe, violation_run(target, recipe, name, timeout_s=call_limit))
            else:
                judged(recipe, differential_pack(target, recipe, name, timeout_s=call_limit))
        except HypothesisException:
            raise  # a rejection (the backend does not take the call): not an example
        except KernelHung as err:
            # not shrunk (every candidate could hang for the whole limit): saved as found, campaign over
            _last_failure(err, prop, recipe, str(err), finding_of(err), f"a kernel call hung ({err}); the campaign stops")
            raise
        except Exception as err:
            faulted = fault_in(err)
            if faulted is not None:
                # the process's GPU context is broken (every later call fails): saved as found, not shrunk, campaign over
                fault = describe_fault(faulted)
                crash, stopped = crash_finding(f"device fault: {fault}", hung=False), f"a kernel call broke the GPU context ({fault})"
                _last_failure(err, prop, recipe, crash.headline, crash, f"{stopped}; the campaign stops")
                raise _ContextLost(fault) from err
            state.calls[prop] += 1
            state.packed_calls[prop] += len(_parts(recipe)) > 1
            recipe = _failed_recipe(err, recipe)
            state.examples[prop] += 1
            state.outcomes[prop]["fail"] += 1
            coverage.add(recipe)
            message = f"{type(err).__name__}: {err}" if not isinstance(err, AssertionError) else str(err)
            key = failure_signature(message)  # the same failure through two properties is one failure
            if key in state.failures and key not in chunk_failures:
                state.known_failures += 1
                return  # already saved: not shrunk again, the search goes on for other failures
            now = time.monotonic()
            previous = chunk_failures.get(key)
            examples_at = previous.examples_at if previous else sum(state.examples.values())
            found = Failure(prop, recipe, message, key, previous.found_at if previous else now, examples_at)
            if previous is None:  # first seen: it leaves the runner now, before any shrinking
                found.finding = finding_of(err).to_json_dict()
                _first_seen(found, target, fleet, save=save, lease_s=2 * shrink_s + LEASE_MARGIN_S)
            else:
                found.finding, found.lease, found.fleet = previous.finding, previous.lease, previous.fleet
                found.raw_path, found.raw_created = previous.raw_path, previous.raw_created
            shrinking = [f for k, f in chunk_failures.items() if k != key and f.shrink_here]
            if found.shrink_here and not shrinking and not state.shrinking:
                stop_at[0] = now + shrink_s
                state.shrinking = True
            elif not found.shrink_here and not shrinking:
                stop_at[0] = now  # left to the lease holder: this chunk stops here
            chunk_failures[key] = found
            raise
        finally:
            if state.examples[prop] > judged_before:  # an example (passing or failing), not a rejection
                state.seconds[prop] += time.monotonic() - started
            progress.show(state.status(budget_s))

    stream = {} if (shard is None or not shard.sharded) and seed_base is None else {"shard": shard, "seed_base": seed_base}
    chunk = 0
    while time.monotonic() < deadline and len(state.failures) < max_failures and (max_chunks is None or chunk < max_chunks):
        this_seed = chunk_seed(hypothesis_profile, chunk, **stream)
        examples = chunk_size(chunk, base.max_examples, chunk_examples)
        state.seeds.append(this_seed)
        state.chunk_examples.append(examples)
        state.chunks = chunk = chunk + 1
        chunk_failures.clear()
        strategies.clear()
        strategies.update(_fuzz_strategies(target, properties, chunk - 1, pack if chunk - 1 >= PACK_FROM_CHUNK else 1, pack_parts))
        if recipes_per_example > 1:
            strategies.update({prop: recipe_lists(made, recipes_per_example) for prop, made in strategies.items()})
        stop_at[0] = deadline
        state.shrinking = False

        def chunk_test(data: Any) -> None:
            body(data)

        this_settings = settings(parent=base, max_examples=examples, **chunk_settings)
        test = seed(this_seed)(this_settings(given(data=st.data())(chunk_test)))
        over = False  # a hang or a device fault: the chunk's failures are saved unshrunk and the campaign ends
        try:
            test()
        except _OutOfTime:
            pass
        except (KernelHung, _ContextLost):
            over = True
        except Exception as err:  # noqa: BLE001 - the failures were tracked in the body; anything else is reported
            if not chunk_failures:
                state.stopped = f"Hypothesis stopped: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                break
        state.shrinking = False
        for key, failure in chunk_failures.items():
            if key in state.failures:
                continue
            if not over and failure.shrink_here:
                _minimise_failure(target, failure, shrink_s, progress)
            shrunk = failure.shrink_here and not over
            if save and not shrunk and failure.raw_path is not None:
                failure.path, failure.new = failure.raw_path, failure.raw_created  # saved and pushed when found
            elif save:
                entry = _entry(failure, target)
                directory = kernel_pending_dir(target.name)
                path = directory / f"{_hash(failure.recipe)}.json"
                existed = path.exists() and not (path == failure.raw_path and failure.raw_created)
                failure.path = save_entry(entry, directory)
                failure.new = not existed
                if failure.raw_created and failure.raw_path is not None and failure.raw_path != failure.path:
                    failure.raw_path.unlink(missing_ok=True)  # the shrunk entry replaces it (the store keeps it, with its finder)
                if fleet is not None:
                    failure.fleet.append(fleet.send(entry, failure.finding, shrunk=shrunk))
                    if shrunk and failure.lease is not None and failure.lease.granted:
                        fleet.finish(failure.finding_group)
            state.failures[key] = failure
        progress.show(state.status(budget_s), force=True)
        if over:
            break
    state.finished, state.cpu_finished = time.monotonic(), time.process_time()
    return state


LEASE_MARGIN_S = 60.0  # a lease lasts the shrink window, the minimiser's budget and this


def _entry(failure: Failure, target: Any, *, unshrunk: bool = False) -> Any:
    """The pending entry of a failure (conformance.records.corpus.CorpusEntry); `unshrunk`: the
    recipe as first seen (its provenance says so, for `corpus collect`)."""
    from conformance.records.corpus import CorpusEntry, new_entry

    expect = "precondition" if failure.property == "preconditions" else "conform"
    first = failure.message.strip().splitlines()
    line = (first[1] if len(first) > 1 and first[0].startswith("kernel output") else first[0]) if first else "failure"
    caught = f"fuzz {failure.property}: {line}"
    entry = new_entry(failure.recipe, caught=caught[:500], kernel=target.name, property_name=f"fuzz:{failure.property}", expect=expect)
    if not unshrunk:
        return entry
    return CorpusEntry(entry.name, entry.recipe, entry.expect, {**entry.provenance, "unshrunk": True})


def _first_seen(failure: Failure, target: Any, fleet: Any, *, save: bool, lease_s: float) -> None:
    """A failure seen for the first time (inside the test body, before Hypothesis shrinks it):
    its recipe saved to the pending folder now, pushed to the store's inbox marked unshrunk, and
    the lease of its group asked for (module docstring). Best effort: nothing here may end the
    campaign."""
    from conformance.records.corpus import save_entry

    if not save:
        return
    entry = _entry(failure, target, unshrunk=True)
    try:
        directory = kernel_pending_dir(target.name)
        existed = (directory / f"{_hash(failure.recipe)}.json").exists()
        failure.raw_path = save_entry(entry, directory)
        failure.raw_created = not existed
    except OSError as err:
        failure.fleet.append(f"not saved when found: {err}")
    if fleet is None:
        return
    try:
        failure.fleet.append("when found: " + fleet.send(entry, failure.finding, shrunk=False))
        failure.lease = fleet.lease(failure.finding_group, lease_s)
        failure.fleet.append(f"lease: {failure.lease.describe()}")
    except Exception as err:  # noqa: BLE001 - the store is best effort
        failure.fleet.append(f"fleet: {type(err).__name__}: {err}")


def _failed_recipe(err: BaseException, default: Any) -> Any:
    """The recipe a failure carries (conformance.judging.target.judged_recipe): which of an
    example's recipes failed; `default` when it carries none."""
    from conformance.judging.target import judged_recipe

    judged = judged_recipe(err)
    return judged.recipe if judged is not None else default


def _minimise_failure(target: Any, failure: Failure, budget_s: float, progress: ProgressLine) -> None:
    """Shrink Hypothesis's result further with the greedy passes of conformance.records.minimise (the
    Hypothesis shrink of a large example may be cut by its time window)."""
    from conformance.records.minimise import in_process_check, minimise

    expect = "precondition" if failure.property == "preconditions" else "conform"
    progress.show(
        f"fuzz: minimising the {failure.property} failure (n_q {failure.recipe.n_q}, heads {failure.recipe.heads}, "
        f"{failure.recipe.total_keys} keys)",
        force=True,
    )
    result = minimise(failure.recipe, in_process_check(target, expect, name=f"fuzz:{failure.property}"), max_seconds=budget_s)
    if result.changed:
        from conformance.records.corpus import CorpusEntry
        from conformance.records.replay import diagnose, sandbox_state

        failure.recipe = result.recipe
        failure.minimised = result.accepted
        with sandbox_state():
            diag = diagnose(CorpusEntry(name="fuzz", recipe=result.recipe, expect=expect), target, findings=False)
        if diag.reasons:  # the finding's headline first (the summary shows the first line), then the reasons
            headline = [diag.triage] if diag.triage and not diag.reasons[0].startswith(diag.triage) else []
            failure.message = "\n".join([*headline, *diag.reasons])
        if diag.finding:
            failure.finding = dict(diag.finding)


def _parts(recipe: Any) -> tuple[Any, ...]:
    """The recipes a judged recipe holds: a pack's parts, else the recipe itself."""
    return tuple(recipe.parts) or (recipe,)


def _hash(recipe: Any) -> str:
    from conformance.records.corpus import recipe_hash

    return recipe_hash(recipe)


def format_summary(
    state: Campaign,
    target: Any,
    *,
    budget_s: float,
    hypothesis_profile: str,
    report_path: Path | None,
    summary_path: Path | None = None,
    fleet: Any = None,
    shard: Any = None,
    seed_base: int | None = None,
) -> str:
    """The end-of-campaign summary (stdout); with a fleet (conformance.fleet.runner.FleetRunner)
    or a shard, their lines too: the shard and seed base, the store (or that it was unreachable
    and the run used local state only), what each failure did in the fleet, the entries unpushed."""
    elapsed = state.elapsed()
    seeds = f"{state.seeds[:8]}{' ...' if len(state.seeds) > 8 else ''}"
    lines = [
        (
            f"fuzz summary: kernel {target.name} (profile {target.profile.name}) on {target.device}, "
            f"Hypothesis profile {hypothesis_profile}, "
            f"{elapsed:.1f} s (budget {budget_s:g} s), {state.chunks} chunk(s), seeds {seeds}"
        )
    ]
    if shard is not None and shard.sharded:
        lines.append(f"  {shard.describe()}, seed base {seed_base if seed_base is not None else 'random (no --seed-base)'}")
    if fleet is not None:
        pushed = f"{fleet.pushed} failure entr{'y' if fleet.pushed == 1 else 'ies'} pushed"
        lines.append(f"  {fleet.store_line()}; {pushed}; {fleet.unpushed_line()}")
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
    if state.repeats:
        again = f" ({state.repeated_calls} call(s) that had passed before were not made again)" if state.repeated_calls else ""
        lines.append(f"  {state.repeats} recipe(s) drawn again after they had passed were not counted as examples{again}")
    if any(state.packed_calls.values()):
        lines.append("  " + _calls_line(state))
    if state.stopped:
        lines.append(f"  {state.stopped}")
    if state.failures:
        lines.append(f"  FAILURES: {len(state.failures)} distinct")
        for failure in state.failures.values():
            r = failure.recipe
            first = [line for line in failure.message.splitlines() if line.strip() and not line.startswith("kernel output outside")]
            lines.append(f"  - {failure.property}: {(first[0] if first else '')[:300]}")
            label = "shrunk recipe" if failure.shrink_here else "recipe as found (not shrunk here)"
            if r.parts:  # only the packed call fails: its parts pass alone
                label += f" (a packed call of {len(r.parts)} recipes, each passing alone)"
            held = r.parts or (r,)
            data = ", ".join(f"{name} {'/'.join(dict.fromkeys(str(getattr(p, name)) for p in held))}" for name in ("latent", "q", "writer"))
            lines.append(
                f"    {label}: n_q {r.n_q}, heads {r.heads}, row lengths {list(r.row_lengths)[:8]}{' ...' if r.n_q > 8 else ''} "
                f"({r.total_keys} keys), {data}"
                + (f" (greedy passes after Hypothesis: {len(failure.minimised)} steps)" if failure.minimised else "")
            )
            if failure.path is not None:
                lines.append(f"    saved to {failure.path}{'' if failure.new else ' (already there)'}")
                lines.append(f"    replay: python -m conformance replay {failure.path} --kernel {target.name}")
            for note in failure.fleet:
                lines.append(f"    fleet: {note}")
    else:
        lines.append("  no failures found")
    if report_path is not None:
        lines.append(f"  run report: {report_path}")
    if summary_path is not None:
        lines.append(f"  summary (JSON): {summary_path}")
    return "\n".join(lines)


def _calls_line(state: Campaign) -> str:
    """Per property, the kernel calls judged, how many were packed and the examples per call."""
    parts = [
        f"{prop} {state.calls[prop]} ({state.packed_calls[prop]} packed, {state.examples[prop] / state.calls[prop]:.2f} examples per call)"
        for prop in sorted(state.calls)
        if state.calls[prop]
    ]
    return "kernel calls judged: " + ", ".join(parts)


def _rate_and_coverage_lines(state: Campaign) -> list[str]:
    """The summary's examples/s line and coverage lines (also in FUZZ_SUMMARY and the run report)."""
    elapsed = state.elapsed()
    per_property = ", ".join(f"{prop} {state.rate(prop):.2f}" for prop in sorted(state.examples))
    lines = [
        f"examples/s: {state.rate():.2f} overall ({sum(state.examples.values())} examples in {elapsed:.1f} s of wall time, "
        f"shrinking included); per property (examples / seconds judging them): {per_property or '-'}"
    ]
    cpu = f"CPU time: {state.cpu_seconds():.1f} s of this process (all threads), {state.cpu_rate():.2f} examples per CPU second"
    return lines + (state.coverage.summary_lines() if state.coverage is not None else []) + [cpu]


def summary_json(
    state: Campaign,
    target: Any,
    *,
    budget_s: float,
    hypothesis_profile: str,
    properties: list[str],
    exit_code: int,
    fleet: Any = None,
    shard: Any = None,
    seed_base: int | None = None,
) -> dict[str, Any]:
    """The machine-readable summary (FUZZ_SUMMARY). Keys: schema, kernel, numerics_profile,
    device, hypothesis_profile, properties, budget_s, seconds (wall time), chunks, seeds,
    chunk_examples (per chunk, its max_examples: chunk_size), examples, examples_per_s
    (overall), cpu_s and examples_per_cpu_s (this process's CPU time),
    per_property {prop: examples, pass, fail, observed, seconds (judging), examples_per_s, calls
    (kernel calls judged, repeats included), packed_calls (those holding two recipes or more)},
    failures (distinct), found (each distinct failure in the order first seen: property, seconds
    from the campaign's start and examples of every property until it was first seen, the failing one
    included), known_failures, repeats (recipes not judged again), repeated_calls (calls that had
    passed, not made again), stopped, exit_code, shard ("i/n"), seed_base (None: random seeds),
    fleet (None, or {store, down, reason, pushed, queued, unpushed}), features {family: title,
    hit, reachable, counts per reachable class, never_hit, not_drawable, outside}
    (conformance.records.coverage.Coverage.to_json), summary_lines (the examples/s, coverage
    and CPU time lines of the text summary, which the run report shows)."""
    elapsed = state.elapsed()
    coverage = state.coverage
    return {
        "schema": SUMMARY_SCHEMA,
        "kernel": target.name,
        "numerics_profile": target.profile.name,
        "device": str(target.device),
        "hypothesis_profile": hypothesis_profile,
        "properties": list(properties),
        "budget_s": budget_s,
        "seconds": round(elapsed, 3),
        "chunks": state.chunks,
        "seeds": list(state.seeds),
        "chunk_examples": list(state.chunk_examples),
        "examples": sum(state.examples.values()),
        "examples_per_s": round(state.rate(), 4),
        "cpu_s": round(state.cpu_seconds(), 3),
        "examples_per_cpu_s": round(state.cpu_rate(), 4),
        "per_property": {
            prop: {
                "examples": state.examples[prop],
                **{k: state.outcomes[prop][k] for k in ("pass", "fail", "observed")},
                "seconds": round(state.seconds[prop], 3),
                "examples_per_s": round(state.rate(prop), 4),
                "calls": state.calls[prop],
                "packed_calls": state.packed_calls[prop],
            }
            for prop in properties
        },
        "failures": len(state.failures),
        "found": [
            {"property": f.property, "seconds": round(f.found_at - state.started, 3), "examples": f.examples_at}
            for f in sorted(state.failures.values(), key=lambda f: f.found_at)
        ],
        "known_failures": state.known_failures,
        "repeats": state.repeats,
        "repeated_calls": state.repeated_calls,
        "stopped": state.stopped,
        "exit_code": exit_code,
        "shard": str(shard) if shard is not None else "1/1",
        "seed_base": seed_base,
        "fleet": None
        if fleet is None
        else {
            "store": fleet.store.address.shown if fleet.store is not None else None,
            "down": bool(fleet.store is not None and fleet.store.down),
            "reason": fleet.store.breaker.reason if fleet.store is not None else "",
            "pushed": fleet.pushed,
            "queued": fleet.queued,
            "unpushed": fleet.unpushed(),
        },
        "features": coverage.to_json() if coverage is not None else {},
        "summary_lines": _rate_and_coverage_lines(state),
    }
