"""The inbox of failures in the shared store, and the local outbox of what is still to push.

A failure leaves the runner as soon as it exists: its pending entry is written locally first
(as every run does), then a record of it is written to the outbox (`<state>/fleet/outbox/`),
then pushed (`push`); a pushed record leaves the outbox. So a runner killed at any moment loses
nothing it found: what was not pushed is in its outbox, and `corpus push` (conformance.fleet.push)
sends it later.

In the store, under the failures prefix of (kernel, numerics profile) (conformance.fleet.namespace),
one record per recipe content hash:
- `<prefix>entry:<hash>`: a hash of the pending entry's JSON (`entry`), the kernel, numerics
  profile, the profile option to rebuild the target (`profile_option`, "" for the kernel's own),
  the finding (`finding`: kind, subject, detail) and `shrunk` ("0" found and pushed before any
  shrinking, "1" shrunk by Hypothesis and/or the project's minimiser);
- `<prefix>finders:<hash>`: the set of runners that found it;
- `conformance:failures:index`: the set of every entry key (what `collect` drains).
A push is one MULTI/EXEC transaction of field-wise set-if-absent writes (the first entry and
finding stay), a `shrunk` that only ever goes from "0" to "1", and set additions for the finder
and the index: no read-modify-write, so any number of runners may push the same hash at once and
every finder is kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.fleet.namespace import ROOT, failures_prefix
from conformance.fleet.store import Store

INDEX_KEY = ROOT + "failures:index"
OUTBOX = ("fleet", "outbox")
RECORD_SCHEMA = 1


@dataclass
class InboxRecord:
    """One failure for the inbox (module docstring): the entry's JSON text and what it is about."""

    kernel: str
    profile: str
    entry_json: str
    finding: dict[str, str]
    shrunk: bool
    finders: set[str] = field(default_factory=set)
    profile_option: str = ""
    key: str = ""  # the store key it was read from ("" for a record not read from the store)
    digest: str = ""  # the recipe's content hash when known (else computed from the entry)

    @property
    def entry(self) -> Any:
        """The pending entry (conformance.records.corpus.CorpusEntry)."""
        from conformance.records.corpus import parse_entry

        return parse_entry(self.entry_json, self.key or "inbox record")

    @property
    def hash(self) -> str:
        """The recipe's content hash (conformance.records.corpus.recipe_hash)."""
        if not self.digest:
            from conformance.records.corpus import recipe_hash

            self.digest = recipe_hash(self.entry.recipe)
        return self.digest

    @property
    def prefix(self) -> str:
        return failures_prefix(self.kernel, self.profile)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "schema": RECORD_SCHEMA,
            "kernel": self.kernel,
            "profile": self.profile,
            "profile_option": self.profile_option,
            "entry": json.loads(self.entry_json),
            "finding": self.finding,
            "shrunk": self.shrunk,
            "finders": sorted(self.finders),
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> InboxRecord:
        """A record from `to_json_dict`'s form; KeyError / TypeError / ValueError when it is not one."""
        if data.get("schema") != RECORD_SCHEMA:
            raise ValueError(f"not an outbox record of schema {RECORD_SCHEMA}")
        return cls(
            kernel=str(data["kernel"]),
            profile=str(data["profile"]),
            entry_json=json.dumps(data["entry"], indent=2, sort_keys=True) + "\n",
            finding={k: str(v) for k, v in dict(data["finding"]).items()},
            shrunk=bool(data["shrunk"]),
            finders={str(f) for f in data.get("finders", [])},
            profile_option=str(data.get("profile_option") or ""),
        )


def entry_key(record: InboxRecord) -> str:
    return f"{record.prefix}entry:{record.hash}"


def finders_key(entry_key_name: str) -> str:
    head, _, digest = entry_key_name.rpartition("entry:")
    return f"{head}finders:{digest}"


def push(store: Store, record: InboxRecord) -> bool:
    """Push `record` (one transaction, module docstring); False when the store did not take it."""
    key = entry_key(record)
    fields = {
        "entry": record.entry_json,
        "kernel": record.kernel,
        "profile": record.profile,
        "profile_option": record.profile_option,
        "finding": json.dumps(record.finding, sort_keys=True),
    }

    def write(client: Any) -> bool:
        pipe = client.pipeline(transaction=True)
        for name, value in fields.items():
            pipe.hsetnx(key, name, value)
        if record.shrunk:
            pipe.hset(key, "shrunk", "1")
        else:
            pipe.hsetnx(key, "shrunk", "0")
        if record.finders:
            pipe.sadd(finders_key(key), *sorted(record.finders))
        pipe.sadd(INDEX_KEY, key)
        pipe.execute()
        return True

    return bool(store.call("push", write, False))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_record(client: Any, key: str) -> InboxRecord | None:
    """The record at entry key `key` (None when it is gone or malformed)."""
    data = {_text(k): _text(v) for k, v in client.hgetall(key).items()}
    if "entry" not in data or "kernel" not in data:
        return None
    try:
        finding = json.loads(data.get("finding") or "{}")
    except ValueError:
        finding = {}
    return InboxRecord(
        kernel=data["kernel"],
        profile=data.get("profile", ""),
        entry_json=data["entry"],
        finding={k: str(v) for k, v in finding.items()} if isinstance(finding, dict) else {},
        shrunk=data.get("shrunk") == "1",
        finders={_text(f) for f in client.smembers(finders_key(key))},
        profile_option=data.get("profile_option", ""),
        key=key,
        digest=key.rpartition("entry:")[2],
    )


def pull(store: Store) -> list[InboxRecord] | None:
    """Every record of the inbox (all namespaces), sorted by key; None when the store does not answer."""

    def read(client: Any) -> list[InboxRecord]:
        keys = sorted(_text(k) for k in client.smembers(INDEX_KEY))
        found = [read_record(client, key) for key in keys]
        return [r for r in found if r is not None]

    return store.call("pull", read, None)


def remove(store: Store, keys: list[str]) -> bool:
    """Delete the records at `keys` (their finders and their index entries); False when the store did not answer."""
    if not keys:
        return True

    def delete(client: Any) -> bool:
        pipe = client.pipeline(transaction=True)
        for key in keys:
            pipe.delete(key, finders_key(key))
        pipe.srem(INDEX_KEY, *keys)
        pipe.execute()
        return True

    return bool(store.call("remove", delete, False))


# ---------------------------------------------------------------------------------------------
# The local outbox


def outbox_dir(state: Path | None = None) -> Path:
    """The outbox folder of the state folder `state` (default: conformance.durability.state.state_dir())."""
    from conformance.durability.state import state_dir

    return (state if state is not None else state_dir()).joinpath(*OUTBOX)


def outbox_path(record: InboxRecord, state: Path | None = None) -> Path:
    where = hashlib.sha256(record.prefix.encode()).hexdigest()[:8]
    return outbox_dir(state) / f"{where}-{record.hash}.json"


def queue(record: InboxRecord, state: Path | None = None) -> tuple[Path, InboxRecord]:
    """Write `record` to the outbox (atomic; a record of the same hash already there keeps its
    finders and a shrunk mark): (its path, the record as queued). OSError when the folder cannot
    be written."""
    from conformance.durability.wal import atomic_write_text

    path = outbox_path(record, state)
    merged = record
    if path.exists():
        try:
            before = InboxRecord.from_json_dict(json.loads(path.read_text(encoding="utf-8")))
            merged = InboxRecord(
                kernel=record.kernel,
                profile=record.profile,
                entry_json=record.entry_json,
                finding=record.finding,
                shrunk=record.shrunk or before.shrunk,
                finders=record.finders | before.finders,
                profile_option=record.profile_option,
                digest=record.digest,
            )
        except (OSError, ValueError, KeyError, TypeError):
            pass
    atomic_write_text(path, json.dumps(merged.to_json_dict(), indent=2, sort_keys=True) + "\n")
    return path, merged


def queued(state: Path | None = None) -> Iterator[tuple[Path, InboxRecord | None]]:
    """(path, record) of every outbox file, sorted (record None when the file is unreadable)."""
    folder = outbox_dir(state)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            yield path, InboxRecord.from_json_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            yield path, None


def count_queued(state: Path | None = None) -> int:
    """How many records wait in the outbox."""
    folder = outbox_dir(state)
    return sum(1 for _ in folder.glob("*.json")) if folder.is_dir() else 0


def send(store: Store | None, record: InboxRecord, state: Path | None = None) -> tuple[bool, Path | None]:
    """Queue `record` in the outbox, then push it (when a store is given) and unqueue it once
    pushed: (pushed, outbox path or None when it is no longer queued). An outbox that cannot be
    written does not stop the push."""
    path: Path | None = None
    try:
        path, record = queue(record, state)
    except OSError:
        pass
    if store is None or not push(store, record):
        return False, path
    if path is not None:
        path.unlink(missing_ok=True)
    return True, None
