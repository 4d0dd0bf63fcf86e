"""The pytest plugin the mutation runner loads into each suite subprocess
(`-p conformance.mutation.plugin`; it imports neither torch nor the suite). Loaded, it

- orders the suite for fast kills (`ORDER`, `_sort_key`): corpus entries first, cheapest
  recipe first (edge cases are the highest-yield examples per second), then host validation,
  then gfx950 bit-exact agreement, then the Hypothesis properties in `PROPERTY_ORDER`
  (highest yield per second first, measured on this catalogue), then anything else in
  collection order. The test files are not edited;
- drops Hypothesis's shrink and explain phases unless CONFORMANCE_MUTATION_SHRINK=1 (the
  profile's generate phase, hence whether and where a mutant is killed, is unchanged; only the
  time spent minimising the failing example after the kill is saved);
- with CONFORMANCE_MUTATION_REPORT=PATH, appends JSON lines to PATH: one `start` event (the
  Hypothesis profile actually loaded), one `report` event per failed phase and per call phase,
  one `collect_error` per failed collection, one `finish` event (exit status). Times are
  `time.time()` seconds (Unix epoch).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.durability.jsonlines import append_json_lines
from kernel.record import RECORD_BYTES

REPORT_ENV = "CONFORMANCE_MUTATION_REPORT"
SHRINK_ENV = "CONFORMANCE_MUTATION_SHRINK"


# (file name, test function) in run order; None as the function takes the whole file.
CHEAP_STAGES: tuple[tuple[str, str | None], ...] = (
    ("test_corpus.py", "test_corpus_entry"),
    ("test_host_validation.py", None),
    ("test_gfx950_agreement.py", "test_bit_exact_agreement_with_emulated"),
)
# The Hypothesis properties, in the order that kills fastest (measured on this catalogue with
# the corpus left out, see docs/reference/measurements.md): greedily the highest marginal yield per
# second after the stages above, then total yield per second. The documented scale behaviour
# is the only property killing qk_scale_mantissa (a mantissa kept where the gfx950 kernel drops
# it shows only under a violated precondition) and kills 21 of the 22 mutants, so it comes
# first although it is slow per example; then the directed precision probes (25 small calls; with
# the scale behaviour the only property killing p_fp16_toward_zero); then mutants killed / seconds for 25 ci examples of
# the emulated kernel (one CPU thread): long rows 16 / 1.5 s, beyond 4 GiB 19 / 3.4 s (the only
# property killing offset32), precondition runs 7 / 1.3 s, split and merge 15 / 3.3 s,
# permuting keys 16 / 3.9 s, strides 2 / 0.8 s, differential 19 / 11 s, a row alone 1 / 0.9 s,
# two runs 0 / 1.1 s. Properties not listed run after these, in collection order.
PROPERTY_ORDER: tuple[tuple[str, str], ...] = (
    ("test_gfx950_agreement.py", "test_documented_scale_behaviour"),
    ("test_precision_probes.py", "test_precision_probes"),
    ("test_differential.py", "test_differential_long_rows"),
    ("test_differential.py", "test_differential_beyond_4gib"),
    ("test_preconditions.py", "test_precondition_violations"),
    ("test_metamorphic.py", "test_split_and_merge"),
    ("test_metamorphic.py", "test_permuting_keys"),
    ("test_metamorphic.py", "test_strided_equals_contiguous"),
    ("test_differential.py", "test_differential"),
    ("test_metamorphic.py", "test_row_alone_equals_row_in_batch"),
    ("test_metamorphic.py", "test_two_runs_bit_identical"),
)
ORDER: tuple[tuple[str, str | None], ...] = CHEAP_STAGES + PROPERTY_ORDER
HUGE_CACHE_BYTES = 1 << 32


def corpus_recipe_cost(path: Path) -> float:
    """Estimated cost of replaying a corpus entry, in key-heads (sum of row lengths x heads);
    a cache over 4 GiB adds 10^6 (its mapping and poisoned neighbours dominate). An unreadable
    file costs 0 (it runs first, and fails or errors quickly)."""
    try:
        recipe = json.loads(Path(path).read_text(encoding="utf-8"))["recipe"]
        keys = sum(max(int(x), 0) for x in recipe.get("row_lengths", ()))
        cost = float(keys * int(recipe.get("heads", 1)))
        if int(recipe.get("cache_rows", 0)) * RECORD_BYTES > HUGE_CACHE_BYTES:
            cost += 1e6
        return cost
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _sort_key(item: Any, index: int) -> tuple[int, float, int]:
    """(stage, cost, collection index) of a collected item: see ORDER."""
    file_name = Path(str(getattr(item, "path", getattr(item, "fspath", "")))).name
    function = getattr(getattr(item, "function", None), "__name__", None) or item.name.split("[")[0]
    for stage, (wanted_file, wanted_function) in enumerate(ORDER):
        if file_name == wanted_file and wanted_function in (None, function):
            cost = 0.0
            if wanted_function == "test_corpus_entry":
                callspec = getattr(item, "callspec", None)
                path = callspec.params.get("path") if callspec is not None else None
                cost = corpus_recipe_cost(Path(path)) if path is not None else 0.0
            return stage, cost, index
    return len(ORDER), 0.0, index


def order_items(items: list[Any]) -> None:
    """Reorder collected pytest items in place for fast kills (see ORDER)."""
    keyed = sorted(((_sort_key(item, i), item) for i, item in enumerate(items)), key=lambda pair: pair[0])
    items[:] = [item for _, item in keyed]


def _emit(event: dict[str, Any]) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    append_json_lines(path, [event])


def _first_line(report: Any) -> str:
    """The first two non-empty lines of a report's failure or skip message (300 characters at most)."""
    longrepr = getattr(report, "longrepr", None)
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        text = str(crash.message)
    elif isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (file, line, reason)
        text = str(longrepr[2])
    else:
        text = str(longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[:2])[:300]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """After Hypothesis loaded --hypothesis-profile: drop shrink/explain unless asked not to."""
    profile = ""
    try:
        from hypothesis import Phase, settings

        if os.environ.get(SHRINK_ENV) != "1":
            current = settings.get_current_profile_name()
            phases = tuple(p for p in settings.default.phases if p not in (Phase.shrink, Phase.explain))
            name = f"{current}-no-shrink"
            settings.register_profile(name, phases=phases)
            settings.load_profile(name)
        profile = settings.get_current_profile_name()
        max_examples = settings.default.max_examples
    except ImportError:  # no Hypothesis: nothing to change
        max_examples = None
    _emit({"event": "start", "time": time.time(), "hypothesis_profile": profile, "max_examples": max_examples})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    order_items(items)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _emit({"event": "collect_error", "nodeid": report.nodeid, "time": time.time(), "message": _first_line(report)})


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call" or report.outcome != "passed":
        _emit(
            {
                "event": "report",
                "nodeid": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "time": time.time(),
                "duration": float(report.duration),
                "message": _first_line(report) if report.outcome != "passed" else "",
            }
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit({"event": "finish", "time": time.time(), "exitstatus": int(exitstatus), "collected": int(session.testscollected)})
