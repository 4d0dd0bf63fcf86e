"""The run report: what one run of the suite (or a fuzz campaign) saw, per kernel and property.

Inputs, all in the run folder `<state dir>/runs/<run id>/` (every xdist worker writes its own):
- `examples-<worker>.jsonl`: one line per judged example (conformance.judging.harness.record): property,
  kernel, outcome, out_ratio / lse_ratio (|err| / bound, the largest over the call), mode,
  observed (precondition runs), recipe, time;
  a failing example also names its finding's kind and subject (conformance.judging.finding);
- `failures-<worker>.jsonl`: one line per failing test whose recipe was saved to the pending
  corpus (conformance.suite.plugin): its finding (a "finding" object, else the headline that is
  the first line of its "caught" message);
- `not-judged-<worker>.jsonl`: one line per test that judged no example ({"nodeid", "kernel",
  "reason", "time"}: every draw rejected, for memory or a limit of the backend; the plugin writes
  them): listed apart, never counted as failures;
- `crashes.jsonl`: crashes recorded by conformance.records.crashes (each a crash or a hang);
- `session.json`: who ran it (conformance.records.crashes);
- `fuzz-summary.json`: a fuzz campaign's summary (conformance.campaign.fuzz): its examples/s and
  strategy-coverage lines become `report["fuzz_summary"]` and a section of report.md.

Outputs (`write_report`): `report.json` (strict JSON: `allow_nan=False`; an infinite ratio, an
error where the bound is 0, is written as the string "inf", an undefined one as null),
`report.md`, and `report.png` with histograms of log10(error / bound) per property and output,
one colour per comparison mode, ratios above PLOT_CEIL in an overflow bin and non-finite ones in
a bin of their own (needs matplotlib, the optional extra `plots`; without it the PNG is skipped and
the report says so). The files get the mode a plain file gets (0666 less the umask: 0644 under the
usual umask of 022; conformance.durability.wal.atomic_write_text), so others can read them.

Failures are counted by kind (`report["findings"]["by_kind"]`: failing tests, crashes and failing
examples per kind) and by group (`report["findings"]["groups"]`: one per (kind, subject), the
failures of one bug, with its counts, tests and one detail), the kinds of
conformance.judging.finding. A failing test whose line carries no finding and whose message does
not start with a headline is counted as a suite error (it failed outside a judgement).

Status (`report["status"]`, with `report["status_reasons"]`, one line each), the first that applies:
"crashes" (a process died or hung in a kernel call), "failures" (failing tests with saved recipes or
failing examples), "running" (the owning session has not finished and its process is alive),
"unfinished" (session.json says it never finished and its process is gone: killed by SIGKILL, the
OOM killer, a lost machine; or there is no session.json at all, so nothing says the run finished),
"not judged" (nothing failed, but some tests judged no example: the kernel was not tested there;
the session exited with status 0 or 1, pytest's "tests failed" being what a property that judged
nothing may have caused), "failed" (the session finished with a non-zero exit status: pytest 1
tests failed, 2 interrupted, 3 internal error, 4 usage error, 5 no tests collected), else "clean".
Only "clean" is clean.

A folder is a run folder when it holds session.json or any file a run writes
(examples-*.jsonl, failures-*.jsonl, not-judged-*.jsonl, crashes.jsonl, inflight-*.json);
`write_report` refuses any other folder with NotARunFolder and writes nothing there.

Precondition runs are grouped by the kinds violated; their observed behaviours by text with every
number written N ("raised IndexError: index N is out of bounds ..."), with counts.

Counting: the differential check writes one line per comparison mode for the same kernel call,
so consecutive lines of one property and recipe with distinct modes count as one example.
Properties `corpus:<entry>` are grouped as `corpus` in the tables (the worst ratio keeps the
entry's name). Lines that cannot be parsed (a worker killed mid-write) are counted, not fatal.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.durability.state import runs_root
from conformance.durability.wal import atomic_write_text
from conformance.judging.finding import FINDING_KINDS, KINDS, SEVERITY, SUITE_ERROR, Finding, parse
from conformance.records.crashes import CRASHES_LOG, SESSION_FILE, line_finding, read_session, run_is_live

SCHEMA = 2
REPORT_JSON, REPORT_MD, REPORT_PNG = "report.json", "report.md", "report.png"
FUZZ_SUMMARY = "fuzz-summary.json"  # written by a fuzz campaign; its summary_lines go into the report
OUTPUTS = ("out", "lse")
RATIO_NOTE = (
    "ratios are max |err| / bound over one kernel call (<= 1 passes; exactly 1 is common and right: the out bound of "
    "an element is the distance to the farther of the bf16 values it admits, and the kernel returned that value); "
    "an infinite ratio (an error where the bound is 0) "
    'is written as the string "inf", an undefined one (NaN) as null'
)
NO_MODE = "unspecified"
NOT_JUDGED_FILES = "not-judged-*.jsonl"  # one line per test that judged no example (the plugin writes them)
RUN_FILE_PATTERNS = (SESSION_FILE, "examples-*.jsonl", "failures-*.jsonl", NOT_JUDGED_FILES, CRASHES_LOG, "inflight-*.json")
CLEAN = "clean"
NOT_JUDGED = "not judged"
# what a session's exit status means, per session kind (pytest: pytest.ExitCode; fuzz: conformance.cli.fuzz)
_EXIT_MEANING = {
    "pytest": {1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"},
    "fuzz": {1: "failures found", 2: "the campaign could not run", 130: "interrupted"},
}


class NotARunFolder(FileNotFoundError):
    """A folder that no run wrote (no session.json, no examples, failures, crashes or write-ahead
    files); the message names it. Nothing is written into it."""


def is_run_folder(path: Path) -> bool:
    """True when `path` is a folder holding session.json or any file a run writes."""
    return path.is_dir() and any(any(path.glob(pattern)) for pattern in RUN_FILE_PATTERNS)


def session_problems(run_dir: Path, session: dict[str, Any] | None) -> tuple[str | None, list[str]]:
    """(status or None, reasons) from the session marker alone: "running", "unfinished",
    "failed" or None when the session finished with exit status 0 (or none recorded)."""
    if session is None:
        return "unfinished", [
            f"no {SESSION_FILE}: nothing says this run finished (a session that never started its marker, or not a suite run)"
        ]
    started = session.get("started")
    when = datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds") if isinstance(started, int | float) else "?"
    who = f"{session.get('kind', 'session')} pid {session.get('pid', '?')} on {session.get('host', '?')}, started {when}"
    if not session.get("finished"):
        if run_is_live(run_dir):
            return "running", [f"the session ({who}) has not finished yet: its process is still running"]
        return "unfinished", [f"the session ({who}) never finished: its process is gone (killed: SIGKILL, the OOM killer, a lost machine?)"]
    status = session.get("exitstatus")
    if isinstance(status, bool) or (status is not None and not isinstance(status, int)):
        return "failed", [f"the session ({who}) recorded an unreadable exit status {status!r}"]
    if status:
        meaning = _EXIT_MEANING.get(str(session.get("kind")), {}).get(int(status), "")
        return "failed", [f"the session ({who}) exited with status {status}" + (f" ({meaning})" if meaning else "")]
    return None, []


_NUMBERS = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # behaviours are grouped with their numbers as N


def _finite_or_tag(x: float | None) -> float | str | None:
    """A float for strict JSON: finite as is, +-inf as "inf" / "-inf", NaN and None as None."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def _as_ratio(value: object) -> float | None:
    """A ratio read from a JSON line (float, "inf", Infinity, null) as a float or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def property_group(name: str) -> str:
    """The table row a property belongs to (`corpus:<entry>` -> `corpus`)."""
    return "corpus" if name.startswith("corpus:") else name


@dataclass
class RunData:
    """Everything read from one run folder."""

    run_dir: Path
    examples: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    not_judged: list[dict[str, Any]] = field(default_factory=list)
    crashes: list[dict[str, Any]] = field(default_factory=list)
    session: dict[str, Any] | None = None
    unreadable: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.examples or self.failures or self.crashes or self.not_judged)


def _read_jsonl(path: Path, data: RunData) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        data.unreadable.append(f"{path.name}: cannot read ({err.strerror})")
        return lines
    data.files.append(path.name)
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)  # accepts the Infinity / NaN literals harness.record may write
        except json.JSONDecodeError:
            data.unreadable.append(f"{path.name}:{number}")
            continue
        if isinstance(value, dict):
            value["_file"] = path.name
            lines.append(value)
        else:
            data.unreadable.append(f"{path.name}:{number}")
    return lines


def load_run(run_dir: Path) -> RunData:
    """Read a run folder (any worker count); missing files are simply empty."""
    data = RunData(run_dir=run_dir, session=read_session(run_dir))
    for path in sorted(run_dir.glob("examples-*.jsonl")):
        data.examples += _read_jsonl(path, data)
    for path in sorted(run_dir.glob("failures-*.jsonl")):
        data.failures += _read_jsonl(path, data)
    for path in sorted(run_dir.glob(NOT_JUDGED_FILES)):
        data.not_judged += _read_jsonl(path, data)
    if (run_dir / CRASHES_LOG).exists():
        data.crashes += _read_jsonl(run_dir / CRASHES_LOG, data)
    return data


def _count_examples(lines: list[dict[str, Any]]) -> list[bool]:
    """Per line (in file order): True when it starts a new example (see module docstring)."""
    starts: list[bool] = []
    previous: tuple[str, str, str] | None = None
    modes_seen: set[str] = set()
    for line in lines:
        key = (line.get("_file", ""), str(line.get("property")), json.dumps(line.get("recipe"), sort_keys=True))
        mode = line.get("mode")
        if mode is not None and key == previous and mode not in modes_seen:
            modes_seen.add(mode)
            starts.append(False)
            continue
        previous = key
        modes_seen = {mode} if mode is not None else set()
        starts.append(True)
    return starts


def _ratio_summary(values: list[float]) -> dict[str, Any]:
    finite = sorted(v for v in values if math.isfinite(v))
    infinite = sum(1 for v in values if math.isinf(v))

    def quantile(q: float) -> float | None:
        if not finite:
            return None
        return finite[min(len(finite) - 1, int(q * len(finite)))]

    worst = math.inf if infinite else (finite[-1] if finite else None)
    return {
        "examples": len(values),
        "max": _finite_or_tag(worst),
        "p50": _finite_or_tag(quantile(0.5)),
        "p99": _finite_or_tag(quantile(0.99)),
        "over_bound": sum(1 for v in values if v > 1),
        "infinite": infinite,
    }


def _returns_lse(line: dict[str, Any]) -> bool:
    """False for an example whose recipe asked for no lse (its recorded lse ratio is a 0 placeholder)."""
    recipe = line.get("recipe")
    return not (isinstance(recipe, dict) and recipe.get("return_lse") is False)


def collect_ratios(data: RunData) -> dict[str, dict[str, dict[str, dict[str, list[float]]]]]:
    """kernel -> property group -> output -> mode -> every recorded ratio (for histograms)."""
    ratios: dict[str, dict[str, dict[str, dict[str, list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    )
    for line in data.examples:
        for output in OUTPUTS:
            value = _as_ratio(line.get(f"{output}_ratio"))
            if value is None or (output == "lse" and not _returns_lse(line)):
                continue
            ratios[str(line.get("kernel"))][property_group(str(line.get("property")))][output][str(line.get("mode") or NO_MODE)].append(
                value
            )
    return ratios


def build_report(data: RunData) -> dict[str, Any]:
    """The report as strict-JSON-able data (see module docstring)."""
    starts = _count_examples(data.examples)
    # an example's outcome is "fail" when any of its lines (one per comparison mode) fails
    example_outcome: list[str] = []
    for line, start in zip(data.examples, starts, strict=True):
        outcome = str(line.get("outcome"))
        if start:
            example_outcome.append(outcome)
        elif outcome == "fail":
            example_outcome[-1] = "fail"
    kernels: dict[str, dict[str, Any]] = {}
    worst: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
    preconditions: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = {}
    example_groups: dict[tuple[str, str], dict[str, Any]] = {}
    index = -1
    for line, start in zip(data.examples, starts, strict=True):
        kernel = str(line.get("kernel"))
        group = property_group(str(line.get("property")))
        k = kernels.setdefault(kernel, {"examples": 0, "properties": {}, "failure_kinds": {}})
        p = k["properties"].setdefault(group, {"examples": 0, "outcomes": Counter(), "entries": set()})
        if start:
            index += 1
            k["examples"] += 1
            p["examples"] += 1
            p["outcomes"][example_outcome[index]] += 1
        if group == "corpus":
            p["entries"].add(str(line.get("property")))
        finding = _example_finding(line)
        if finding is not None:
            # the kind of a failing example (conformance.judging.finding), counted once per example
            k["failure_kinds"].setdefault(finding.kind, set()).add(index)
            seen = example_groups.setdefault(finding.group, {"examples": set(), "kernels": set(), "detail": "", "finding": finding})
            if SEVERITY.index(finding.kind) < SEVERITY.index(seen["finding"].kind):
                seen["finding"] = finding
            example_groups[finding.group]["examples"].add(index)
            example_groups[finding.group]["kernels"].add(kernel)
        mode = str(line.get("mode") or NO_MODE)
        for output in OUTPUTS:
            value = _as_ratio(line.get(f"{output}_ratio"))
            if value is None or math.isnan(value) or (output == "lse" and not _returns_lse(line)):
                continue
            key = (kernel, output, mode)
            if key not in worst or value > worst[key][0]:
                worst[key] = (value, line)
        observed = line.get("observed")
        if isinstance(observed, dict):
            kinds = tuple(sorted(str(x) for x in observed.get("kinds", [])))
            entry = preconditions.setdefault((kernel, group, kinds), {"examples": 0, "behaviours": Counter(), "non_finite_out_max": 0})
            entry["examples"] += 1
            entry["behaviours"][_NUMBERS.sub("N", str(observed.get("behaviour", "unknown")))] += 1
            entry["non_finite_out_max"] = max(entry["non_finite_out_max"], int(observed.get("non_finite_out") or 0))

    ratios = collect_ratios(data)
    for kernel, k in kernels.items():
        for group, p in k["properties"].items():
            p["outcomes"] = dict(sorted(p["outcomes"].items()))
            entries = p.pop("entries")
            if entries:
                p["corpus_entries"] = len(entries)
            p["ratios"] = {
                output: {mode: _ratio_summary(values) for mode, values in sorted(by_mode.items())}
                for output, by_mode in sorted(ratios.get(kernel, {}).get(group, {}).items())
            }
        k["properties"] = dict(sorted(k["properties"].items()))
        k["failure_kinds"] = {kind: len(k["failure_kinds"][kind]) for kind in KINDS if kind in k["failure_kinds"]}
        k["largest_ratio"] = {}
        for (wk, output, mode), (value, line) in sorted(worst.items(), key=lambda kv: (kv[0][0], OUTPUTS.index(kv[0][1]), kv[0][2])):
            if wk != kernel:
                continue
            k["largest_ratio"].setdefault(output, {})[mode] = {
                "ratio": _finite_or_tag(value),
                "property": line.get("property"),
                "outcome": line.get("outcome"),
                "recipe": line.get("recipe"),
            }
        k["preconditions"] = [
            {
                "property": group,
                "kinds": list(kinds),
                "examples": v["examples"],
                "behaviours": dict(sorted(v["behaviours"].items())),
                "non_finite_out_max": v["non_finite_out_max"],
            }
            for (wk, group, kinds), v in sorted(preconditions.items())
            if wk == kernel
        ]

    run_name = data.run_dir.name
    crashes_here = [_clean(c) for c in data.crashes if not c.get("origin_run")]
    recovered = [_clean(c) for c in data.crashes if c.get("origin_run")]
    failures = [_clean(f) for f in data.failures]
    for line in failures:
        line["finding"] = failure_finding(line).to_json_dict()
    for line in crashes_here + recovered:
        line["finding"] = line_finding(line).to_json_dict()
    not_judged = [_clean(n) for n in data.not_judged]
    failing_examples = sum(1 for outcome in example_outcome if outcome == "fail")
    reasons: list[str] = []
    if crashes_here:
        reasons.append(f"{len(crashes_here)} crash(es): a process died or hung during a kernel call")
    if failures or failing_examples:
        reasons.append(f"{len(failures)} failing test(s) with saved recipes, {failing_examples} failing example(s)")
    if not_judged:
        reasons.append(f"{len(not_judged)} test(s) judged no example (see Not judged): the kernel was not tested there")
    session_status, session_reasons = session_problems(data.run_dir, data.session)
    reasons += session_reasons
    if crashes_here:
        status = "crashes"
    elif failures or failing_examples:
        status = "failures"
    elif session_status in ("running", "unfinished"):
        status = session_status
    elif not_judged and (data.session or {}).get("exitstatus") in (None, 0, 1):
        status = NOT_JUDGED
    else:
        status = session_status or CLEAN
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "run": run_name,
        "run_dir": str(data.run_dir),
        "generated": datetime.datetime.now().isoformat(timespec="seconds"),
        "session": _clean(data.session) if data.session else None,
        "status": status,
        "status_reasons": reasons,
        "examples": sum(k["examples"] for k in kernels.values()),
        "failing_examples": failing_examples,
        "kernels": dict(sorted(kernels.items())),
        "findings": _findings(failures, crashes_here, example_groups),
        "failures": failures,
        "not_judged": not_judged,
        "crashes": crashes_here,
        "recovered_crashes": recovered,
        "unreadable_lines": data.unreadable,
        "notes": [RATIO_NOTE],
    }
    return report


def _example_finding(line: dict[str, Any]) -> Finding | None:
    """The finding a failing example's record names (kind and subject), None for a passing one or a record without it."""
    if line.get("outcome") != "fail" or line.get("kind") not in KINDS:
        return None
    return Finding(str(line["kind"]), str(line.get("subject") or "unnamed"))


def failure_finding(line: dict[str, Any]) -> Finding:
    """The finding of a failing test's line (failures-*.jsonl): its "finding" object, else the
    headline its message starts with, else a suite error (it failed outside a judgement)."""
    data = line.get("finding")
    if isinstance(data, dict):
        try:
            return Finding.from_json_dict(data)
        except (KeyError, ValueError):
            pass
    caught = str(line.get("caught") or "")
    for text in caught.splitlines()[:2]:
        found = parse(text.split(": ", 1)[1] if text.startswith(str(line.get("nodeid") or "\0") + ": ") else text)
        if found is not None:
            return found
    first = caught.strip().splitlines()[0][:200] if caught.strip() else ""
    return Finding(SUITE_ERROR, "a failure without a finding", first)


def _findings(
    failures: list[dict[str, Any]],
    crashes: list[dict[str, Any]],
    example_groups: dict[tuple[str, str], dict[str, Any]],
) -> dict[str, Any]:
    """Failures counted by kind and by group (kind, subject): failing tests and crashes of this run,
    and failing examples (see the module docstring)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}

    def group(finding: Finding) -> dict[str, Any]:
        g = groups.setdefault(
            finding.group,
            {"kind": finding.kind, "subject": finding.subject, "tests": [], "crashes": 0, "examples": 0, "kernels": [], "detail": ""},
        )
        if SEVERITY.index(finding.kind) < SEVERITY.index(g["kind"]):  # a group shows its worst member's kind and detail
            g["kind"], g["detail"] = finding.kind, finding.detail
        return g

    for line in failures:
        finding = Finding.from_json_dict(line["finding"])
        g = group(finding)
        g["tests"].append(str(line.get("nodeid")))
        g["detail"] = g["detail"] or finding.detail
        if line.get("kernel") and line["kernel"] not in g["kernels"]:
            g["kernels"].append(str(line["kernel"]))
    for line in crashes:
        finding = Finding.from_json_dict(line["finding"])
        g = group(finding)
        g["crashes"] += 1
        g["detail"] = g["detail"] or str(line.get("caught") or finding.detail)
        if line.get("kernel") and line["kernel"] not in g["kernels"]:
            g["kernels"].append(str(line["kernel"]))
    for found in example_groups.values():
        g = group(found["finding"])
        g["examples"] += len(found["examples"])
        for kernel in sorted(found["kernels"]):
            if kernel not in g["kernels"]:
                g["kernels"].append(kernel)
    by_kind: dict[str, dict[str, int]] = {}
    for g in groups.values():
        counts = by_kind.setdefault(g["kind"], {"groups": 0, "tests": 0, "crashes": 0, "examples": 0})
        counts["groups"] += 1
        counts["tests"] += len(g["tests"])
        counts["crashes"] += g["crashes"]
        counts["examples"] += g["examples"]
    ordered = sorted(
        groups.values(), key=lambda g: (SEVERITY.index(g["kind"]), -(len(g["tests"]) + g["crashes"] + g["examples"]), g["subject"])
    )
    return {"by_kind": {kind: by_kind[kind] for kind in SEVERITY if kind in by_kind}, "groups": ordered}


def _clean(value: Any) -> Any:
    """A copy safe for strict JSON: non-finite floats tagged, private keys (_file) dropped."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return _finite_or_tag(value)
    return value


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (tables per kernel; failures, crashes, precondition behaviour)."""
    lines = [f"# Conformance run {report['run']}", ""]
    session = report.get("session") or {}
    started = session.get("started")
    when = datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds") if isinstance(started, int | float) else "unknown"
    lines.append(
        f"- status: **{report['status']}**; {report['examples']} examples, {report['failing_examples']} failing, "
        f"{len(report['failures'])} failing tests with saved recipes, {len(report['crashes'])} crashes, "
        f"{len(report.get('not_judged', []))} tests not judged"
    )
    for reason in report.get("status_reasons", []):
        lines.append(f"- not clean: {reason}")
    lines.append(
        f"- run folder: `{report['run_dir']}`; started {when}; kind {session.get('kind', 'unknown')}"
        + (f"; exit status {session['exitstatus']}" if session.get("exitstatus") is not None else "")
    )
    for note in report["notes"]:
        lines.append(f"- note: {note}")
    plot = report.get("plot") or {}
    if plot.get("path"):
        lines.append(f"- plot: [{Path(plot['path']).name}]({Path(plot['path']).name}) (histograms of log10(error / bound))")
    elif plot.get("note"):
        lines.append(f"- plot: {plot['note']}")
    if report["unreadable_lines"]:
        lines.append(f"- {len(report['unreadable_lines'])} unreadable line(s) skipped: {', '.join(report['unreadable_lines'][:10])}")
    lines.append("")
    for kernel, k in report["kernels"].items():
        lines += [f"## Kernel `{kernel}`", "", f"{k['examples']} examples.", ""]
        if k.get("failure_kinds"):
            counted = ", ".join(f"{kind}: {n}" for kind, n in k["failure_kinds"].items())
            lines += [f"Failing examples by kind: {counted}.", ""]
        lines += ["| property | examples | outcomes | max out/bound | max lse/bound |", "|---|---:|---|---|---|"]
        for group, p in k["properties"].items():
            outcomes = ", ".join(f"{n} {o}" for o, n in p["outcomes"].items())
            name = f"{group} ({p['corpus_entries']} entries)" if "corpus_entries" in p else group
            cells = []
            for output in OUTPUTS:
                by_mode = p["ratios"].get(output, {})
                cells.append("; ".join(f"{_fmt(v['max'])} ({mode})" for mode, v in by_mode.items()) or "-")
            lines.append(f"| {name} | {p['examples']} | {outcomes} | {cells[0]} | {cells[1]} |")
        lines.append("")
        if k["largest_ratio"]:
            lines += [
                "Largest error / bound per output and comparison mode:",
                "",
                "| output | mode | ratio | property | outcome |",
                "|---|---|---:|---|---|",
            ]
            for output, by_mode in k["largest_ratio"].items():
                for mode, v in by_mode.items():
                    lines.append(f"| {output} | {mode} | {_fmt(v['ratio'])} | {v['property']} | {v['outcome']} |")
            lines.append("")
        if k["preconditions"]:
            lines += [
                "Precondition violations and the behaviour observed:",
                "",
                "| property | violated | examples | behaviour observed | most non-finite outputs |",
                "|---|---|---:|---|---:|",
            ]
            for v in k["preconditions"]:
                behaviours = "; ".join(f"{b} (x{n})" for b, n in v["behaviours"].items())
                lines.append(
                    f"| {v['property']} | {', '.join(v['kinds']) or '-'} | {v['examples']} | {behaviours} | {v['non_finite_out_max']} |"
                )
            lines.append("")
    if not report["kernels"]:
        lines += ["No examples recorded.", ""]
    if report.get("fuzz_summary"):
        lines += ["## Fuzz campaign: examples/s and strategy features", "", "```", *report["fuzz_summary"], "```", ""]
    lines += _markdown_findings(report)
    lines += _markdown_not_judged(report)
    lines.append("## Crashes")
    lines.append("")
    if report["crashes"]:
        for c in report["crashes"]:
            finding = c.get("finding") or {}
            lines.append(f"- {finding.get('kind', 'crash')}: {c.get('caught') or c.get('error')}")
            lines.append(f"  - kernel {c.get('kernel')}, property {c.get('property')}, worker {c.get('worker')}; entry `{c.get('entry')}`")
    else:
        lines.append("None.")
    if report["recovered_crashes"]:
        lines += ["", "Recovered at the start of this run from earlier runs:", ""]
        for c in report["recovered_crashes"]:
            lines.append(f"- run {c.get('origin_run')}: {c.get('caught') or c.get('error')}; entry `{c.get('entry')}`")
    lines.append("")
    return "\n".join(lines)


def _cell(text: Any) -> str:
    """Text for a Markdown table cell (no pipe, one line)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _markdown_findings(report: dict[str, Any]) -> list[str]:
    """The "Failures" section: counts by kind, then one entry per group (kind, subject) with its
    counts, its tests (the first few) and one detail."""
    findings = report.get("findings") or {"by_kind": {}, "groups": []}
    lines = ["## Failures", ""]
    if not findings["groups"]:
        lines += ["None." + (f" ({report['failing_examples']} failing examples recorded.)" if report["failing_examples"] else ""), ""]
        return lines
    lines += ["By kind (a group is the failures of one kind and subject: one bug):", ""]
    lines += ["| kind | against the kernel | groups | failing tests | crashes | failing examples |", "|---|---|---:|---:|---:|---:|"]
    for kind, n in findings["by_kind"].items():
        mine = "yes" if kind in FINDING_KINDS else "no"
        lines.append(f"| {kind} | {mine} | {n['groups']} | {n['tests']} | {n['crashes']} | {n['examples']} |")
    lines += ["", "Distinct failures, worst kind first:", ""]
    entries = {str(f.get("nodeid")): f.get("entry") for f in report.get("failures", [])}
    for number, g in enumerate(findings["groups"], 1):
        counts = [f"{len(g['tests'])} failing test(s)" if g["tests"] else "", f"{g['crashes']} crash(es)" if g["crashes"] else ""]
        counts.append(f"{g['examples']} failing example(s)" if g["examples"] else "")
        lines.append(
            f"{number}. **{g['kind']}: {g['subject']}**: {', '.join(c for c in counts if c)}"
            + (f"; kernel {', '.join(g['kernels'])}" if g["kernels"] else "")
        )
        if g["detail"]:
            lines.append(f"   - e.g. {_cell(g['detail'])[:400]}")
        for nodeid in g["tests"][:5]:
            entry = entries.get(nodeid)
            lines.append(f"   - `{nodeid}`" + (f", recipe `{entry}`" if entry else ""))
        if len(g["tests"]) > 5:
            lines.append(f"   - and {len(g['tests']) - 5} more test(s) (report.json lists every one)")
    lines.append("")
    return lines


def _markdown_not_judged(report: dict[str, Any]) -> list[str]:
    """The "Not judged" section: tests that judged no example, with the reason (never failures)."""
    entries = report.get("not_judged") or []
    lines = ["## Not judged", ""]
    if not entries:
        return lines + ["None recorded.", ""]
    lines += [
        f"{len(entries)} test(s) judged no example: every draw was rejected (for memory, or a limit the backend declares), so the "
        "kernel was not tested there. Not counted as failures.",
        "",
        "| test | kernel | why |",
        "|---|---|---|",
    ]
    for n in entries:
        lines.append(f"| `{_cell(n.get('nodeid'))}` | {_cell(n.get('kernel', '-'))} | {_cell(n.get('reason', '-'))} |")
    lines.append("")
    return lines


MODE_COLOURS = {"exact-steps": "tab:blue", "float64": "tab:green"}
PLOT_FLOOR = -12.0  # log10 ratios at or below this (zero errors included) sit in the first bin
PLOT_BIN = 0.25  # bin width in log10 units; 0 (ratio 1) is a bin edge
PLOT_CEIL = 3.0  # log10 ratios above this (err/bound > 1000: far outside) go to the overflow bin
_OVERFLOW_AT, _NON_FINITE_AT, _CATEGORY_WIDTH = PLOT_CEIL + 1.25, PLOT_CEIL + 3.0, 1.0  # the two category bins' centres, width


def _plot_ratios(data: RunData) -> dict[str, dict[str, dict[str, dict[str, list[tuple[float, bool]]]]]]:
    """kernel -> property group -> output -> mode -> (ratio, the example failed) per recorded line."""
    found: dict[str, dict[str, dict[str, dict[str, list[tuple[float, bool]]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    )
    for line in data.examples:
        for output in OUTPUTS:
            value = _as_ratio(line.get(f"{output}_ratio"))
            if value is None or (output == "lse" and not _returns_lse(line)):
                continue
            group = property_group(str(line.get("property")))
            found[str(line.get("kernel"))][group][output][str(line.get("mode") or NO_MODE)].append((value, line.get("outcome") == "fail"))
    return found


def _log_ratio(value: float) -> float:
    """log10 of a finite ratio for the histogram: at least PLOT_FLOOR, and a ratio <= 1 stays left
    of the bound line (ratio 1 would open the bin [0, PLOT_BIN))."""
    if value <= 0:
        return PLOT_FLOOR
    log = max(PLOT_FLOOR, math.log10(value))
    return min(log, -1e-9) if value <= 1 else log


def plot_bin(value: float) -> tuple[str, int]:
    """Where a ratio goes in report.png: ("bin", i) for [PLOT_FLOOR + i PLOT_BIN, + PLOT_BIN),
    ("overflow", 0) above 10^PLOT_CEIL, ("non-finite", 0) for inf and NaN."""
    if not math.isfinite(value):
        return "non-finite", 0
    log = _log_ratio(value)
    if log > PLOT_CEIL:
        return "overflow", 0
    return "bin", min(int((log - PLOT_FLOOR) / PLOT_BIN), int((PLOT_CEIL - PLOT_FLOOR) / PLOT_BIN) - 1)


def _counts(values: list[float]) -> tuple[list[int], int, int]:
    """(per-bin counts, overflow count, non-finite count) of ratios."""
    bins = [0] * int((PLOT_CEIL - PLOT_FLOOR) / PLOT_BIN)
    overflow = non_finite = 0
    for value in values:
        where, i = plot_bin(value)
        if where == "bin":
            bins[i] += 1
        elif where == "overflow":
            overflow += 1
        else:
            non_finite += 1
    return bins, overflow, non_finite


def _short_kernel(name: str) -> str:
    """A kernel spec's last part ("pkg.mod:fn" -> "fn") for a panel title."""
    return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1] if ":" in name else name


def write_plot(data: RunData, path: Path) -> tuple[Path | None, str]:
    """Histograms of log10(err / bound) per (kernel, property group) x output: one outline per
    comparison mode for passing examples, failing examples (both modes) as red bars; the same
    x range in every panel, from 10^PLOT_FLOOR to 10^PLOT_CEIL with the bound (ratio 1) a bin
    edge, then a "> 10^PLOT_CEIL" overflow bin and a "non-finite" bin (an error where the bound is
    0, or NaN); counts on a log axis so a single failure next to thousands of passes stays visible.
    Returns (path or None, a note saying what happened)."""
    ratios = _plot_ratios(data)
    panels = [(kernel, group, by_output) for kernel, groups in sorted(ratios.items()) for group, by_output in sorted(groups.items())]
    if not panels:
        return None, "no error/bound ratios recorded: no plot"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullFormatter
    except ImportError:
        return None, "matplotlib is not installed (optional extra `plots`: pip install 'sparse-mla-conformance[plots]'): PNG skipped"
    several_kernels = len({kernel for kernel, _, _ in panels}) > 1
    edges = [PLOT_FLOOR + PLOT_BIN * i for i in range(int((PLOT_CEIL - PLOT_FLOOR) / PLOT_BIN) + 1)]
    centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 2.4 * len(panels) + 1.0), squeeze=False, layout="constrained")
    for row, (kernel, group, by_output) in enumerate(panels):
        for col, output in enumerate(OUTPUTS):
            ax = axes[row][col]
            by_mode = by_output.get(output, {})
            title = f"{_short_kernel(kernel)} · {group} · {output}" if several_kernels else f"{group} · {output}"
            ax.set_title(title, fontsize=8, loc="left")
            ax.tick_params(labelsize=7)
            if not by_mode:
                ax.text(0.5, 0.5, "no ratios recorded", transform=ax.transAxes, ha="center", va="center", fontsize=8, color="grey")
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            outlines = {m: [v for v, failed in values if not failed] for m, values in by_mode.items()}
            if len(outlines) > 1 and all(v == next(iter(outlines.values())) for v in outlines.values()):
                outlines = {" = ".join(sorted(outlines)): next(iter(outlines.values()))}  # the modes agree: one outline
            top = 1
            for mode, passing in sorted(outlines.items()):
                if not passing:
                    continue
                bins, overflow, non_finite = _counts(passing)
                colour = MODE_COLOURS.get(mode, "black")
                ax.stairs(bins, edges, color=colour, linewidth=1.3, label=f"{mode}, passing ({len(passing)})")
                extra = [(_OVERFLOW_AT, overflow), (_NON_FINITE_AT, non_finite)]
                for x, n in extra:
                    if n:
                        ax.bar(x, n, width=_CATEGORY_WIDTH, fill=False, edgecolor=colour, linewidth=1.3)
                top = max(top, *bins, overflow, non_finite)
            failing = [v for values in by_mode.values() for v, failed in values if failed]
            if failing:
                bins, overflow, non_finite = _counts(failing)
                shown = [(c, n) for c, n in zip(centres, bins, strict=True) if n]
                ax.bar(
                    [c for c, _ in shown] + [_OVERFLOW_AT, _NON_FINITE_AT],
                    [n for _, n in shown] + [overflow, non_finite],
                    width=[PLOT_BIN] * len(shown) + [_CATEGORY_WIDTH] * 2,
                    color="tab:red",
                    alpha=0.75,
                    edgecolor="darkred",
                    linewidth=0.6,
                    label=f"failing examples (either output), both modes ({len(failing)})",
                )
                top = max(top, *bins, overflow, non_finite)
            ax.axvline(0.0, color="red", linewidth=1)
            ax.set_yscale("log")
            ax.set_ylim(0.7, top * 2.5)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))  # counts as 1, 10, 100
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_xlim(PLOT_FLOOR, _NON_FINITE_AT + _CATEGORY_WIDTH)
            ax.axvline(PLOT_CEIL + 0.25, color="grey", linewidth=0.6, linestyle=":")  # the categories' side
            ticks = [x for x in range(int(PLOT_FLOOR), int(PLOT_CEIL), 3)]
            ax.set_xticks([*ticks, _OVERFLOW_AT, _NON_FINITE_AT])
            ax.set_xticklabels([f"1e{t}" if t else "1" for t in ticks] + [f"> 1e{PLOT_CEIL:g}", "inf/NaN"])
            ax.set_ylabel("examples", fontsize=7)
            handles, _ = ax.get_legend_handles_labels()
            if handles:
                ax.legend(fontsize=6, loc="upper left", frameon=False)
            if row == len(panels) - 1:
                ax.set_xlabel("error / bound (at the left edge: zero error; red line: the bound, passing is left of it)", fontsize=7)
    fig.suptitle(
        f"run {data.run_dir.name}: error / bound per example" + ("" if several_kernels else f", kernel {panels[0][0]}"), fontsize=9
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    os.replace(tmp, path)
    return path, f"histograms in {path.name}"


@dataclass(frozen=True)
class ReportFiles:
    """What `write_report` wrote."""

    json_path: Path
    md_path: Path
    png_path: Path | None
    report: dict[str, Any]


def write_report(run_dir: Path, *, plot: bool = True) -> ReportFiles:
    """Aggregate the run folder and write report.json, report.md and (with matplotlib) report.png.
    Raises FileNotFoundError when `run_dir` is not a folder, NotARunFolder (a FileNotFoundError)
    when no run wrote it (then nothing is written)."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    if not is_run_folder(run_dir):
        raise NotARunFolder(f"{run_dir}: not a run folder (no {', '.join(RUN_FILE_PATTERNS)}); nothing written")
    data = load_run(run_dir)
    report = build_report(data)
    png: Path | None = None
    if plot:
        png, note = write_plot(data, run_dir / REPORT_PNG)
    else:
        note = "plot not requested"
    report["plot"] = {"path": str(png) if png else None, "note": note}
    try:  # a fuzz campaign's throughput and strategy coverage (conformance.records.report.FUZZ_SUMMARY)
        report["fuzz_summary"] = json.loads((run_dir / FUZZ_SUMMARY).read_text(encoding="utf-8"))["summary_lines"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    json_path, md_path = run_dir / REPORT_JSON, run_dir / REPORT_MD
    atomic_write_text(json_path, json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n")
    atomic_write_text(md_path, render_markdown(report))
    return ReportFiles(json_path=json_path, md_path=md_path, png_path=png, report=report)


def summary_line(files: ReportFiles) -> str:
    """One line for the end of a session: counts and where the report is."""
    r = files.report
    worst = []
    for kernel, k in r["kernels"].items():
        ratios = [
            f"{output} {_fmt(v['ratio'])}"
            for output, by_mode in k["largest_ratio"].items()
            for mode, v in by_mode.items()
            if mode == "exact-steps"
        ]
        if ratios:
            worst.append(f"{kernel}: {' / '.join(ratios)}")
    ratio = f", max err/bound (exact-steps) {'; '.join(worst)}" if worst else ""
    if ratio and any(
        v.get("ratio") == 1 for k in r["kernels"].values() for by_mode in k["largest_ratio"].values() for v in by_mode.values()
    ):
        ratio += " (<= 1 passes; 1: out is the farther bf16 value the bound admits)"
    not_judged = len(r.get("not_judged", []))
    by_kind = (r.get("findings") or {}).get("by_kind", {})
    tests = {kind: n["tests"] + n["crashes"] for kind, n in by_kind.items() if n["tests"] + n["crashes"]}
    if tests:
        kinds = "failing tests by kind: " + ", ".join(f"{kind} {n}" for kind, n in tests.items())
    else:
        kinds = ", ".join(f"{kind} {n['examples']}" for kind, n in by_kind.items())
        kinds = f"failing examples by kind: {kinds}" if kinds else ""
    return (
        f"conformance report: {r['status']}, {r['examples']} examples, {r['failing_examples']} failing, "
        f"{len(r['crashes'])} crashes"
        + (f", {not_judged} tests not judged" if not_judged else "")
        + (f" ({kinds})" if kinds else "")
        + f"{ratio} -> {files.md_path}"
    )


def latest_run(root: Path | None = None) -> Path | None:
    """The most recently modified run folder under `root` (default runs_root()) holding any
    examples, failures, not-judged tests or crashes; None when there is none."""
    root = runs_root() if root is None else root
    if not root.is_dir():
        return None
    candidates = []
    for run_dir in root.iterdir():
        if not run_dir.is_dir():
            continue
        files = [f for pattern in ("examples-*.jsonl", "failures-*.jsonl", NOT_JUDGED_FILES, CRASHES_LOG) for f in run_dir.glob(pattern)]
        if files:
            candidates.append((max(f.stat().st_mtime for f in files), run_dir.name, run_dir))
    return max(candidates)[2] if candidates else None
