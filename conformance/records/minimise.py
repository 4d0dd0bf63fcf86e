"""Greedy minimisation of a failing recipe: smaller while it keeps failing the same way.

"The same way" is the failure signature (conformance.cli.replay.failure_signature): the failure
messages with every number replaced, so "[exact-steps] 4 lse values exceed the bound ..." and
"[exact-steps] 1 lse values exceed the bound ..." match, but an lse failure does not match an out
failure, a crash does not match a raise, and a precondition recipe that stops violating its
precondition does not match.

Passes over the recipe fields, each candidate tried once per sweep, sweeps repeated until one
changes nothing (or the budget is spent):
    fewer rows      one row alone (each of the first 8), the first or second half, each row dropped
    fewer heads     1, H / 2, H - 1
    shorter rows    each row: 0, 1, L/2, 3L/4, 7L/8, ..., L - 1 (a bisection toward the shortest)
    simpler data    latent / rope / q "normal", softmax_scale "default", index_pattern
                    "uniform", writer "pow2", no invalid entries, no poison, fewer corruptions,
                    no lse, stream_offset 0, fewer cache rows
    no padding      q_pad [0, 0], q_layout / out_layout "rows", out_pad null, unconsumed "valid"
Each accepted candidate is checked again by the next ones, so the result is a local minimum:
no single candidate of the list makes it smaller while failing the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Check = Callable[[Any], frozenset[str]]

SIMPLE_VALUES: tuple[tuple[str, Any], ...] = (
    ("latent", "normal"),
    ("rope", "normal"),
    ("q", "normal"),
    ("softmax_scale", "default"),
    ("index_pattern", "uniform"),
    ("writer", "pow2"),
    ("poison", False),
    ("stream_offset", 0),
    ("q_pad", [0, 0]),
    ("q_layout", "rows"),
    ("out_layout", "rows"),
    ("out_pad", None),
    ("unconsumed", "valid"),
)


def _fields(recipe: Any) -> dict[str, Any]:
    return recipe.to_json_dict()


def candidates(recipe: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Simpler variants of `recipe` as (description, recipe fields), most reducing first. Some
    may be invalid recipes (the caller skips those)."""
    base = _fields(recipe)
    if base.get("parts"):
        yield from _pack_candidates(base["parts"])
        return
    lengths = list(base["row_lengths"])
    n = len(lengths)

    def with_rows(rows: list[int]) -> dict[str, Any]:
        return {**base, "n_q": len(rows), "row_lengths": rows}

    if n > 1:
        for i in range(min(n, 8)):
            yield f"row {i} alone", with_rows([lengths[i]])
        half = n // 2
        yield "first half of the rows", with_rows(lengths[:half])
        yield "second half of the rows", with_rows(lengths[half:])
        if n <= 32:
            for i in range(n):
                yield f"row {i} dropped", with_rows(lengths[:i] + lengths[i + 1 :])
    heads = base["heads"]
    for h in sorted({1, heads // 2, heads - 1}):
        if 1 <= h < heads:
            yield f"{h} heads", {**base, "heads": h}
    for i, length in enumerate(lengths[:32]):
        steps = {length - (length >> k) for k in range(1, max(1, length.bit_length()) + 1)}  # L/2, 3L/4, 7L/8, ..., L-1
        for shorter in sorted({0, 1, *steps}):
            if (0 <= shorter < length) or (length < 0 and shorter == 0):
                rows = list(lengths)
                rows[i] = shorter
                yield f"row {i} length {shorter}", {**base, "row_lengths": rows}
    for name, value in SIMPLE_VALUES:
        if base.get(name, value) != value:  # a field left out of the JSON is at its default
            yield f"{name} {value}", {**base, name: value}
    if base["invalid_pattern"] != "none" or base["invalid_permille"]:
        yield "no invalid entries", {**base, "invalid_pattern": "none", "invalid_permille": 0}
    if base["has_invalid"]:
        yield "has_invalid false", {**base, "has_invalid": False}
    corruptions = base["corruptions"]
    if corruptions:
        yield "no corruptions", {**base, "corruptions": []}
        for i, c in enumerate(corruptions):
            if len(corruptions) > 1:
                yield f"corruption {i} dropped", {**base, "corruptions": corruptions[:i] + corruptions[i + 1 :]}
            if c.get("count", 1) > 1:
                fewer = [dict(x) for x in corruptions]
                fewer[i]["count"] = 1
                yield f"corruption {i} count 1", {**base, "corruptions": fewer}
    if base["return_lse"]:
        yield "no lse", {**base, "return_lse": False}
    rows = base["cache_rows"]
    if base["index_pattern"] != "beyond_4gib":
        for smaller in sorted({2, 64, rows // 2}):
            if 2 <= smaller < rows:
                yield f"{smaller} cache rows", {**base, "cache_rows": smaller}


def _pack_candidates(parts: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Simpler variants of a pack (strategies.recipe, "Packs") whose parts' fields are `parts`:
    each part alone, each part dropped, then each part's own simpler variants within the pack."""
    from strategies.recipe import Recipe, RecipeError, pack_fields

    def packed(members: list[dict[str, Any]]) -> dict[str, Any]:
        if len(members) == 1:
            return members[0]
        try:
            fields = pack_fields([Recipe.from_json_dict(m) for m in members])
        except RecipeError:
            return {"parts": members}  # an invalid candidate: the caller skips it
        return {**fields, "row_lengths": list(fields["row_lengths"]), "parts": members}

    for i, part in enumerate(parts):
        yield f"part {i} alone", part
    if len(parts) > 2:
        for i in range(len(parts)):
            yield f"part {i} dropped", packed(parts[:i] + parts[i + 1 :])
    for i, part in enumerate(parts):
        for description, fields in candidates(Recipe.from_json_dict(part)):
            yield f"part {i}: {description}", packed([*parts[:i], fields, *parts[i + 1 :]])


@dataclass
class MinimiseResult:
    """The smallest recipe found, what was accepted on the way, and why it stopped."""

    recipe: Any
    signature: frozenset[str]
    tries: int = 0
    accepted: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str = "no candidate makes it smaller"

    @property
    def changed(self) -> bool:
        return bool(self.accepted)


def minimise(
    recipe: Any,
    check: Check,
    *,
    signature: frozenset[str] | None = None,
    max_tries: int = 300,
    max_seconds: float = 300.0,
    log: Callable[[str], None] | None = None,
) -> MinimiseResult:
    """Greedily shrink `recipe` while `check(candidate)` returns the same failure signature as
    `check(recipe)` (or `signature` when given). `check` returns an empty set for a passing
    recipe. Budget: `max_tries` candidate checks, `max_seconds` wall-clock seconds."""
    from strategies.recipe import Recipe, RecipeError

    started = time.monotonic()
    wanted = check(recipe) if signature is None else signature
    result = MinimiseResult(recipe=recipe, signature=wanted)
    if not wanted:
        result.stopped = "the recipe does not fail"
        return result
    seen: set[str] = {recipe.to_json()}
    changed = True
    while changed:
        changed = False
        for description, fields in candidates(result.recipe):
            if result.tries >= max_tries:
                result.stopped = f"stopped after {max_tries} tries"
                changed = False
                break
            if time.monotonic() - started > max_seconds:
                result.stopped = f"stopped after {max_seconds:g} s"
                changed = False
                break
            try:
                candidate = Recipe.from_json_dict(fields)
            except RecipeError:
                continue
            key = candidate.to_json()
            if key in seen:
                continue
            seen.add(key)
            result.tries += 1
            got = check(candidate)
            if got == wanted:
                result.recipe = candidate
                result.accepted.append(description)
                if log:
                    log(f"  accepted: {description} (n_q {candidate.n_q}, heads {candidate.heads}, {candidate.total_keys} keys)")
                changed = True
                break  # regenerate the candidates from the smaller recipe
    result.seconds = time.monotonic() - started
    return result


def in_process_check(target: Any, expect: str, *, name: str = "minimise") -> Check:
    """A check running the replay diagnosis in this process (state in a temporary folder)."""
    from conformance.records.corpus import CorpusEntry
    from conformance.records.replay import diagnose, sandbox_state

    def check(recipe: Any) -> frozenset[str]:
        with sandbox_state():
            diag = diagnose(CorpusEntry(name=name, recipe=recipe, expect=expect), target, findings=False)
        return diag.signature

    return check


def isolated_check(*, kernel: str | None, profile: str | None, device: str | None, expect: str, timeout_s: float) -> Check:
    """A check replaying each candidate in a child process (for crashes: a dead child is a
    "crash: signal N" signature instead of the end of this process)."""
    import json
    import tempfile
    from pathlib import Path

    from conformance.records.corpus import CorpusEntry
    from conformance.records.replay import run_isolated

    def check(recipe: Any) -> frozenset[str]:
        with tempfile.TemporaryDirectory(prefix="conformance-minimise-") as folder:
            path = Path(folder) / "candidate.json"
            path.write_text(CorpusEntry(name="candidate", recipe=recipe, expect=expect).to_json(), encoding="utf-8")
            result = run_isolated(path, kernel=kernel, profile=profile, device=device, expect=expect, timeout_s=timeout_s)
        if result.diagnosis is None:
            return frozenset({f"exit {result.returncode}: {json.dumps(result.stderr.strip().splitlines()[-1:])}"})
        return result.diagnosis.signature

    return check
