"""The regression corpus: version-independent JSON entries replayed on every run.

An entry is a JSON object:
    {"name": str, "recipe": {...Recipe fields...},
     "expect": "conform" | "precondition",   # judged by the differential check, or only run
     "provenance": {"caught": str, "kernel": str, "date": "YYYY-MM-DD", "suite_version": str,
                    "property": str}}
Entries live in conformance/corpus/*.json (reviewed, in git); failures captured automatically
go to conformance/corpus/pending/ for review. File names are stable content hashes of the
canonical recipe JSON, so the same failure found twice is stored once. Writes are atomic.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.state import CORPUS_DIR
from conformance.wal import atomic_write_text
from strategies.recipe import Recipe, RecipeError

EXPECTATIONS = ("conform", "precondition")
SUITE_VERSION = "0.1.0"


class CorpusError(ValueError):
    """A corpus file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class CorpusEntry:
    """One corpus entry (see module docstring)."""

    name: str
    recipe: Recipe
    expect: str = "conform"
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Pretty, key-sorted JSON text of the entry."""
        data = {"name": self.name, "recipe": self.recipe.to_json_dict(), "expect": self.expect, "provenance": self.provenance}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def recipe_hash(recipe: Recipe) -> str:
    """Stable 16-hex-digit content hash of the canonical recipe JSON."""
    return hashlib.sha256(recipe.to_json().encode()).hexdigest()[:16]


def parse_entry(text: str, source: str) -> CorpusEntry:
    """Parse an entry's JSON text; CorpusError naming `source` on any problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{source}: not valid JSON ({err})") from err
    if not isinstance(data, dict):
        raise CorpusError(f"{source}: a corpus entry must be a JSON object")
    unknown = sorted(set(data) - {"name", "recipe", "expect", "provenance"})
    if unknown:
        raise CorpusError(f"{source}: unknown field(s) {', '.join(unknown)}")
    if "recipe" not in data:
        raise CorpusError(f"{source}: missing field 'recipe'")
    try:
        recipe = Recipe.from_json_dict(data["recipe"])
    except RecipeError as err:
        raise CorpusError(f"{source}: bad recipe: {err}") from err
    expect = data.get("expect", "conform")
    if expect not in EXPECTATIONS:
        raise CorpusError(f"{source}: expect must be one of {EXPECTATIONS}, got {expect!r}")
    provenance = data.get("provenance", {})
    if not isinstance(provenance, dict):
        raise CorpusError(f"{source}: provenance must be an object")
    name = data.get("name") or Path(source).stem
    if not isinstance(name, str):
        raise CorpusError(f"{source}: name must be a string")
    return CorpusEntry(name=name, recipe=recipe, expect=expect, provenance=provenance)


def load_entry(path: Path) -> CorpusEntry:
    """Read and parse one entry file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise CorpusError(f"{path}: cannot read ({err.strerror})") from err
    return parse_entry(text, str(path))


def corpus_files(directory: Path = CORPUS_DIR) -> list[Path]:
    """Entry files of a corpus folder (not its pending/ subfolder), sorted."""
    return sorted(p for p in directory.glob("*.json") if p.is_file())


def save_entry(entry: CorpusEntry, directory: Path) -> Path:
    """Write `entry` atomically as <directory>/<recipe hash>.json; an existing file is kept."""
    path = directory / f"{recipe_hash(entry.recipe)}.json"
    if not path.exists():
        atomic_write_text(path, entry.to_json())
    return path


def new_entry(recipe: Recipe, *, caught: str, kernel: str, property_name: str, expect: str = "conform", name: str | None = None) -> CorpusEntry:
    """An entry with today's provenance."""
    return CorpusEntry(
        name=name or f"{property_name}-{recipe_hash(recipe)}",
        recipe=recipe,
        expect=expect,
        provenance={
            "caught": caught,
            "kernel": kernel,
            "date": datetime.date.today().isoformat(),
            "suite_version": SUITE_VERSION,
            "property": property_name,
        },
    )
