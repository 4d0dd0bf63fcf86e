"""One report per distinct failure: what a suite run prints about its failing tests.

One bug usually fails many tests (every corpus entry it touches, several properties). By default a
suite run (conformance.suite.activation.suite_run) prints, after its tests, one block per distinct
failure: the failures that share a finding's group (conformance.judging.finding: kind and
subject) are one failure, shown once with its headline, how many tests it failed, its smallest
recipe, where that recipe was saved, and commands that run as printed from the folder the suite
was started in (`python -m conformance replay ...` and a pytest command for one failing test).
pytest's own per-test tracebacks and Hypothesis's notes (falsifying example, reproduce blob,
explanation, target scores) are not printed: `--conformance-tracebacks` or an explicit `--tb=...`
restores pytest's report of every failing test, and the run report keeps every failure.

The worker that ran a failing test computes its part (`describe`) and attaches it to the test's
report as the user property PROPERTY (xdist carries it to the controller); the controller groups
and prints (`print_summary`).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from conformance.judging.finding import SEVERITY, Finding, finding_of
from conformance.suite import options

PROPERTY = "conformance_failure"
MAX_MESSAGE = 2000
MAX_LINES = 6
_OWNED = pytest.StashKey[bool]()


def configure_terminal(config: pytest.Config) -> None:
    """Controller of a suite run: take over the display of failing tests (pytest's tracebacks off)
    unless the user asked for pytest's own (`--conformance-tracebacks`, or any `--tb` but the default)."""
    if options.get(config, options.TRACEBACKS) or getattr(config.option, "tbstyle", "auto") != "auto":
        config.stash[_OWNED] = False
        return
    config.option.tbstyle = "no"
    config.stash[_OWNED] = True


def owns_display(config: pytest.Config) -> bool:
    """Whether this session prints one report per distinct failure (configure_terminal)."""
    return config.stash.get(_OWNED, False)


def quiet_short_summary(reporter: Any, config: pytest.Config) -> None:
    """Drop pytest's one line per failed test from its short summary (the grouped report lists
    them), unless the user chose the summary's characters (`-r...`, `--report-chars`)."""
    chosen = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    if any(str(a).startswith(("-r", "--report-chars")) for a in chosen):
        return
    chars = getattr(reporter, "reportchars", "")
    reporter.reportchars = chars.replace("f", "")


def describe(nodeid: str, err: BaseException | None, judged: Any, *, kernel: str) -> dict[str, Any]:
    """A failing test's part of the grouped report (plain JSON data): its finding, message lines,
    recipe (when the failure carries one) and its size for picking the smallest recipe."""
    finding = finding_of(err)
    text = str(err).strip() if err is not None else ""
    text = text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[0].strip() == finding.headline:
        lines = lines[1:]
    info: dict[str, Any] = {
        "nodeid": nodeid,
        "kernel": kernel,
        "finding": finding.to_json_dict(),
        "message": text or type(err).__name__,
        "lines": lines[:MAX_LINES],
        "recipe": None,
        "size": None,
    }
    if judged is not None:
        recipe = judged.recipe
        info["recipe"] = recipe.to_json_dict()
        info["property"] = judged.property_name
        info["size"] = [recipe.n_q * recipe.heads * max(1, recipe.total_keys), recipe.cache_rows, len(recipe.to_json())]
    return info


def crash_info(nodeid: str, line: dict[str, Any], kernel: str) -> dict[str, Any]:
    """The grouped report's part for a test whose worker died (a crash entry's line, conformance.records.crashes)."""
    from conformance.records.crashes import line_finding

    finding = line_finding(line)
    return {
        "nodeid": nodeid,
        "kernel": kernel,
        "finding": finding.to_json_dict(),
        "message": str(line.get("caught") or finding.detail or finding.subject),
        "lines": [],
        "recipe": None,
        "size": None,
        "entry": str(line.get("entry") or "") or None,
    }


def _info(report: Any) -> dict[str, Any] | None:
    for name, value in getattr(report, "user_properties", ()) or ():
        if name == PROPERTY and isinstance(value, dict):
            return value
    return None


def rerun_command(config: pytest.Config, nodeid: str) -> str | None:
    """A pytest command that runs this one test again, runnable as printed from any folder: it
    changes to the folder the session started in (where Hypothesis keeps the failing example in its
    database, so a property test replays it first), names the test file by its absolute path, and
    carries the target options (a portable kernel spec) and the Hypothesis profile when one was
    chosen. None when the file cannot be found."""
    from conformance.suite.activation import SUITE_DIR

    here = Path(config.invocation_params.dir)
    file_part, sep, rest = nodeid.partition("::")
    bases = (here, Path(config.rootpath), SUITE_DIR.parent, SUITE_DIR.parent.parent)
    found = next((b / file_part for b in bases if (b / file_part).is_file()), None)
    if found is None:
        return None
    env, words = _target_words(config, cli=False)
    profile = config.getoption("hypothesis_profile", None)
    if profile:
        words += ["--hypothesis-profile", str(profile)]
    return f"cd {shlex.quote(str(here.resolve()))} && " + _command(env, ["pytest", f"{found.resolve()}{sep}{rest}", *words])


def replay_command(config: pytest.Config, entry: str) -> str:
    """`python -m conformance replay ENTRY` with the session's kernel, profile and device, runnable as printed."""
    env, words = _target_words(config, cli=True)
    return _command(env, ["python", "-m", "conformance", "replay", entry, *words])


def _target_words(config: pytest.Config, *, cli: bool) -> tuple[dict[str, str], list[str]]:
    """(environment to carry, option words) naming the session's target; `cli`: the command line's
    spellings (--kernel ...) instead of the plugin's (--conformance-kernel ...)."""
    env: dict[str, str] = {}
    words: list[str] = []
    for option in options.TARGET_OPTIONS:
        value = options.get(config, option)
        if not value:
            continue
        value = str(value)
        if option == options.KERNEL:
            value, env = portable_kernel(value)
        words += ["--" + option.removeprefix("--conformance-") if cli else option, value]
    return env, words


def portable_kernel(spec: str) -> tuple[str, dict[str, str]]:
    """(kernel spec, environment) that resolve from any folder in a fresh process (kernel.registry)."""
    try:
        from kernel import registry

        return registry.portable_spec(spec), dict(registry.portable_env(spec))
    except (AttributeError, ImportError):
        return spec, {}


def _command(env: dict[str, str], words: list[str]) -> str:
    prefix = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    return " ".join([*prefix, *(shlex.quote(w) for w in words)])


def print_summary(reporter: Any, config: pytest.Config) -> None:
    """The grouped report of a suite run's failing tests (see the module docstring)."""
    failed = list(reporter.stats.get("failed", []))  # call failures, and xdist's reports of a crashed test (when "???")
    errors = list(reporter.stats.get("error", []))
    if not failed and not errors:
        return
    groups: dict[tuple[str, str], list[tuple[Any, dict[str, Any]]]] = {}
    loose: list[Any] = []
    for report in failed:
        info = _info(report)
        if info is None:
            loose.append(report)
            continue
        finding = Finding.from_json_dict(info["finding"])
        groups.setdefault(finding.group, []).append((report, info))
    distinct = len(groups) + len(loose) + len(errors)
    tests = len(failed) + len(errors)
    kernel = options.get(config, options.KERNEL) or "the default kernel"
    plural = "s" if distinct != 1 else ""
    title = f"conformance: {distinct} distinct failure{plural} in {tests} failing test{'s' if tests != 1 else ''} of {kernel}"
    reporter.write_sep("=", title, red=True)
    number = 0
    for members in groups.values():
        number += 1
        _print_group(reporter, config, number, members)
    for report in [*loose, *errors]:
        number += 1
        _print_loose(reporter, number, report)
    how = "--conformance-tracebacks (or --tb=long)" if owns_display(config) else "the run report"
    reporter.write_line(f"every failing test in full: {how}")


def _print_group(reporter: Any, config: pytest.Config, number: int, members: list[tuple[Any, dict[str, Any]]]) -> None:
    """One distinct failure: the headline of its worst member (conformance.judging.finding.SEVERITY),
    shown on the smallest recipe of that kind."""
    worst = min(SEVERITY.index(m[1]["finding"]["kind"]) for m in members)
    shown = [m for m in members if SEVERITY.index(m[1]["finding"]["kind"]) == worst]
    sized = [m for m in shown if m[1].get("size")]
    report, info = min(sized, key=lambda m: m[1]["size"]) if sized else shown[0]
    finding = Finding.from_json_dict(info["finding"])
    write = reporter.write_line
    write(f"[{number}] {finding.headline}", red=True, bold=True)
    by_test: dict[str, int] = {}
    for member, _ in members:
        name = member.nodeid.split("::")[-1].split("[")[0]
        by_test[name] = by_test.get(name, 0) + 1
    counted = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in sorted(by_test.items()))
    write(f"    {len(members)} failing test{'s' if len(members) != 1 else ''} ({counted}); the smallest recipe: {report.nodeid}")
    milder = sorted({m[1]["finding"]["kind"] for m in members} - {finding.kind})
    for kind in milder:
        n = sum(1 for m in members if m[1]["finding"]["kind"] == kind)
        write(f"    {n} of these judged {kind}: the same subject, inside the coarsest rounding model on their recipes")
    for line in info.get("lines", [])[:MAX_LINES]:
        write(f"    | {line[:300]}")
    if info.get("recipe") is not None:
        write(f"    recipe: {_recipe_text(info['recipe'])}")
    entry = info.get("entry")
    if entry:
        write(f"    entry:  {entry}")
        write(f"    replay: {replay_command(config, entry)}")
    elif info.get("saved"):
        write(f"    {info['saved']}")
    corpus = [m for m, _ in members if "::test_corpus_entry[" in m.nodeid]  # a replay of a stored recipe: deterministic
    rerun = rerun_command(config, (corpus[0] if corpus else report).nodeid)
    if rerun:
        write(f"    rerun:  {rerun}")


def _recipe_text(data: dict[str, Any]) -> str:
    """The recipe as its repr (the fields that differ from the defaults), or its JSON when it does not parse."""
    try:
        from strategies.recipe import Recipe

        return repr(Recipe.from_json_dict(data))
    except Exception:  # noqa: BLE001 - a display aid only
        import json

        return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _print_loose(reporter: Any, number: int, report: Any) -> None:
    """A failing test without a finding (an error in setup, a non-suite test): its own lines."""
    when = getattr(report, "when", "call")
    where = report.nodeid + ("" if when == "call" else f" (at {when})")
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "").rstrip()
    lines = text.splitlines()
    crash = next((line for line in reversed(lines) if line.startswith("E ")), lines[-1] if lines else "failed")
    reporter.write_line(f"[{number}] {where}: {crash.removeprefix('E ').strip()[:300]}", red=True, bold=True)
    for line in lines[-12:]:
        reporter.write_line(f"    | {line[:300]}")
