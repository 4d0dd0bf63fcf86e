"""The regression corpus: version-independent JSON entries replayed on every run.

An entry is a JSON object:
    {"name": str, "recipe": {...Recipe fields...},
     "expect": "conform" | "precondition",   # judged by the differential check, or only run
     "provenance": {"caught": str, "kernel": str, "date": "YYYY-MM-DD", "suite_version": str,
                    "property": str}}
Entries live in conformance/corpus/*.json (reviewed, in git); failures captured automatically
go to conformance/corpus/pending/ for review. File names are stable content hashes of the
canonical recipe JSON, so the same failure found twice is stored once. Writes are atomic.

Loading is strict: "recipe" and "expect" are required, "name" (default: the file's stem) must be
a plain name (no path separator, no "..", no leading dot, no control character, at most 200
characters), the file must be UTF-8; anything else is a CorpusError naming the file. A failed
write (an unwritable or full folder) is a CorpusWriteError (an OSError) naming the folder.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.durability.state import CORPUS_DIR
from conformance.durability.wal import atomic_write_text
from strategies.recipe import Recipe, RecipeError

EXPECTATIONS = ("conform", "precondition")
SUITE_VERSION = "0.1.0"


class CorpusError(ValueError):
    """A corpus file that cannot be used; the message names the file and the problem."""


class CorpusWriteError(OSError):
    """An entry could not be written (folder unwritable, missing and not creatable, device
    full); the message names the folder, the reason and, for the pending folder, the variable
    that moves it ($CONFORMANCE_PENDING_DIR)."""


MAX_NAME = 200
_BAD_NAME = re.compile(r"[/\\\x00-\x1f\x7f]")


def check_name(name: object, source: str) -> str:
    """`name` when it is a plain entry name (see the module docstring); CorpusError otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise CorpusError(f"{source}: name must be a non-empty string, got {name!r}")
    if _BAD_NAME.search(name) or ".." in name or name.startswith(".") or len(name) > MAX_NAME:
        raise CorpusError(
            f"{source}: name {name[:80]!r} is not a plain name (no '/', '\\', '..', leading '.', control characters; "
            f"at most {MAX_NAME} characters)"
        )
    return name


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
    if "expect" not in data:
        raise CorpusError(f"{source}: missing field 'expect' (one of {', '.join(EXPECTATIONS)}; `replay` and `corpus add` take --expect)")
    expect = data["expect"]
    if expect not in EXPECTATIONS:
        raise CorpusError(f"{source}: expect must be one of {EXPECTATIONS}, got {expect!r}")
    provenance = data.get("provenance", {})
    if not isinstance(provenance, dict):
        raise CorpusError(f"{source}: provenance must be an object")
    name = check_name(data["name"] if "name" in data else Path(source).stem, source)
    return CorpusEntry(name=name, recipe=recipe, expect=expect, provenance=provenance)


def load_entry(path: Path) -> CorpusEntry:
    """Read and parse one entry file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise CorpusError(f"{path}: cannot read ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from err
    return parse_entry(text, str(path))


def corpus_files(directory: Path = CORPUS_DIR) -> list[Path]:
    """Entry files of a corpus folder (not its pending/ subfolder), sorted."""
    return sorted(p for p in directory.glob("*.json") if p.is_file())


def save_entry(entry: CorpusEntry, directory: Path) -> Path:
    """Write `entry` atomically as <directory>/<recipe hash>.json (the folder is created); an
    existing file is kept. CorpusWriteError (an OSError) naming the folder when it cannot be
    written; nothing partial is left."""
    from conformance.durability.state import PENDING_ENV, pending_dir

    path = directory / f"{recipe_hash(entry.recipe)}.json"
    try:
        if not path.exists():
            atomic_write_text(path, entry.to_json())
    except OSError as err:
        hint = f" (set ${PENDING_ENV} to a writable folder)" if directory.resolve() == pending_dir().resolve() else ""
        failure = CorpusWriteError(f"cannot save corpus entry {path.name} in {directory}: {err.strerror or err}{hint}")
        failure.errno = err.errno
        raise failure from err
    return path


def new_entry(
    recipe: Recipe, *, caught: str, kernel: str, property_name: str, expect: str = "conform", name: str | None = None
) -> CorpusEntry:
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


MAX_ALSO_CAUGHT = 20


def save_pending(entry: CorpusEntry, directory: Path) -> tuple[Path, str]:
    """Save a captured failure to the pending folder: (path, what happened, one line).

    A new recipe is written as <directory>/<recipe hash>.json ("saved to PATH"). A recipe already
    pending keeps its first provenance; this failure is added to its `also_caught` list (kernel,
    property, date, caught; at most MAX_ALSO_CAUGHT, one per kernel and message) and the line says
    so. A recipe that is a reviewed entry of the corpus is not copied ("is the reviewed entry
    NAME"). CorpusWriteError (an OSError) when the folder cannot be written."""
    for reviewed in corpus_files():
        try:
            known = load_entry(reviewed)
        except CorpusError:
            continue
        if known.recipe == entry.recipe:
            return reviewed, f"is the reviewed corpus entry {reviewed} (not copied to pending)"
    path = directory / f"{recipe_hash(entry.recipe)}.json"
    if not path.exists():
        return save_entry(entry, directory), f"saved to {path}"
    try:
        first = load_entry(path)
    except CorpusError:
        return path, f"already pending as {path} (unreadable: left as it is)"
    seen = list(first.provenance.get("also_caught", []))
    mine = {k: entry.provenance.get(k) for k in ("kernel", "property", "date", "caught")}
    same_as_first = all(first.provenance.get(k) == mine[k] for k in ("kernel", "caught"))
    if not same_as_first and not any(s.get("kernel") == mine["kernel"] and s.get("caught") == mine["caught"] for s in seen):
        seen = (seen + [mine])[-MAX_ALSO_CAUGHT:]
        provenance = {**first.provenance, "also_caught": seen}
        updated = CorpusEntry(name=first.name, recipe=first.recipe, expect=first.expect, provenance=provenance)
        try:
            atomic_write_text(path, updated.to_json())
        except OSError as err:
            raise CorpusWriteError(f"cannot update corpus entry {path.name} in {directory}: {err.strerror or err}") from err
    origin = f"first saved {first.provenance.get('date', '?')} from kernel {first.provenance.get('kernel', '?')}"
    if same_as_first:
        return path, f"already pending as {path} (the same failure, {origin})"
    return path, f"already pending as {path} ({origin}; this failure is added to its also_caught)"
