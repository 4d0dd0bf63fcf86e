"""`corpus collect`: the fleet's failures, one reviewed-ready pending entry per failure group.

Sources: the store's inbox (conformance.fleet.inbox: every namespace, or one kernel's) and the
runners' artifact folders (a copy of a runner's state folder or pending folder: its pending
entries and its outbox records, found anywhere under the folder). Steps:
1. merge: one member per (kernel, numerics profile option, recipe content hash): the finders of
   every copy (a pending entry read from a folder names the folder as its finder only where no
   runner is recorded for its recipe), shrunk if any copy is;
2. group: by (kernel, numerics profile, finding group) (conformance.judging.finding: kind and
   subject; a precision failure counts with the wrong results of its subject). A member whose
   finding is not recorded (a pending entry from an artifact folder) gets it by replaying it;
3. shrink: a group none of whose members is marked shrunk (every runner that found it was
   killed before shrinking, or left it to a lease that expired) has its smallest member
   minimised with the project's minimiser (conformance.records.minimise, preserving the failure
   signature; Hypothesis does not shrink an example it replays exactly);
4. replay on the current tree: the group's recipes from the smallest (size as the suite counts
   it: query rows x heads x keys, then cache rows, then JSON length) until one fails with the
   group's finding (conformance.records.replay.diagnose, the `replay` command's diagnosis);
5. write that recipe as one entry into `<pending>/<kernel slug>/<hash>.json`, its provenance
   carrying every finder of the group, the members' hashes and the finding; an entry already
   there is rewritten with the union of finders. Then the group's records leave the store, and
   its lease is cleared.
A group that does not fail on this tree is reported and kept in the store (`drop_unreproduced`
removes it); a kernel that cannot be built here keeps its records in the store. Crash entries are
not replayed in this process: they are reported and left where they are.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.fleet import inbox, lease
from conformance.fleet.inbox import InboxRecord
from conformance.fleet.namespace import fleet_kernel_id
from conformance.fleet.store import Store

ARTIFACT = "artifact "  # the finder of a pending entry read from an artifact folder, when no runner is known for it


@dataclass
class Member:
    """One recipe of the fleet's failures (merged copies)."""

    record: InboxRecord
    keys: set[str] = field(default_factory=set)  # store keys it was read from
    sources: set[str] = field(default_factory=set)  # store keys and files

    @property
    def entry(self) -> Any:
        return self.record.entry

    @property
    def hash(self) -> str:
        return self.record.hash

    def size(self) -> tuple[int, int, int]:
        r = self.entry.recipe
        return (r.n_q * r.heads * max(1, r.total_keys), r.cache_rows, len(r.to_json()))


@dataclass
class Outcome:
    """What collect did with one group (or with a kernel's records, for a kernel it could not build)."""

    kernel: str
    profile: str
    group: tuple[str, str]
    members: list[Member]
    written: Path | None = None
    chosen: str = ""
    note: str = ""
    drained: bool = False

    @property
    def finders(self) -> list[str]:
        return sorted({f for m in self.members for f in m.record.finders})

    def line(self) -> str:
        head = f"{self.kernel} ({self.profile}): {self.group[0]}: {self.group[1]}" if self.group[0] else f"{self.kernel}"
        found = f"{len(self.members)} recipe(s), {len(self.finders)} finder(s)"
        if self.written is not None:
            return f"{head}: {found} -> {self.written} ({self.note})" if self.note else f"{head}: {found} -> {self.written}"
        return f"{head}: {found}: {self.note}"


@dataclass
class CollectResult:
    outcomes: list[Outcome] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    store_records: int = 0
    folder_records: int = 0
    store_error: str = ""

    @property
    def written(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.written is not None]


# ---------------------------------------------------------------------------------------------
# Gathering


def folder_records(folder: Path) -> tuple[list[tuple[InboxRecord, str]], list[str], list[str]]:
    """(records with their file, unreadable files, crash entries) found under an artifact folder:
    outbox records and pending corpus entries (a pending entry's kernel is its provenance's; its
    numerics profile is the kernel's own; its finder is the folder it came from)."""
    from conformance.records.corpus import CorpusError, parse_entry
    from conformance.records.crashes import is_crash_entry

    records: list[tuple[InboxRecord, str]] = []
    unreadable: list[str] = []
    crashes: list[str] = []
    for path in sorted(Path(folder).rglob("*.json")):
        if not path.is_file() or path.name.startswith(".") or "runs" in path.relative_to(folder).parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError):
            unreadable.append(f"{path}: not readable JSON")
            continue
        if isinstance(data, dict) and data.get("schema") == inbox.RECORD_SCHEMA and "entry" in data:
            try:
                records.append((InboxRecord.from_json_dict(data), str(path)))
            except (KeyError, TypeError, ValueError) as err:
                unreadable.append(f"{path}: not an outbox record ({err})")
            continue
        if not (isinstance(data, dict) and "recipe" in data):
            continue  # a run report, a summary: not a failure
        try:
            entry = parse_entry(text, str(path))
        except CorpusError as err:
            unreadable.append(str(err))
            continue
        provenance = entry.provenance or {}
        if is_crash_entry(provenance):
            crashes.append(str(path))
            continue
        kernel = str(provenance.get("kernel") or "")
        if not kernel:
            unreadable.append(f"{path}: a pending entry without its kernel (provenance.kernel)")
            continue
        record = InboxRecord(
            kernel=fleet_kernel_id(kernel),
            profile="",
            entry_json=text,
            finding={},
            shrunk=not provenance.get("unshrunk", False),
            finders={ARTIFACT + str(Path(folder))},
        )
        records.append((record, str(path)))
    return records, unreadable, crashes


def merge(found: list[tuple[InboxRecord, str]]) -> list[Member]:
    """One Member per (kernel, profile option, content hash), copies merged (module docstring)."""
    members: dict[tuple[str, str, str], Member] = {}
    for record, source in found:
        key = (record.kernel, record.profile_option, record.hash)
        member = members.get(key)
        if member is None:
            member = members[key] = Member(record=InboxRecord(**{**record.__dict__, "finders": set(record.finders)}))
        else:
            member.record.finders |= record.finders
            member.record.shrunk = member.record.shrunk or record.shrunk
            if not member.record.finding and record.finding:
                member.record.finding = dict(record.finding)
            if not member.record.profile and record.profile:
                member.record.profile = record.profile
        if record.key:
            member.keys.add(record.key)
        member.sources.add(source)
    for member in members.values():  # a folder stands for its runner only where no runner is known
        runners = {f for f in member.record.finders if not f.startswith(ARTIFACT)}
        if runners:
            member.record.finders = runners
    return list(members.values())


# ---------------------------------------------------------------------------------------------
# Replaying, shrinking, writing


def _diagnose(target: Any, entry: Any) -> Any:
    from conformance.records.replay import diagnose, sandbox_state

    with sandbox_state():
        return diagnose(entry, target, findings=False)


def _group_of(finding: dict[str, str]) -> tuple[str, str] | None:
    from conformance.judging.finding import Finding

    try:
        return Finding.from_json_dict(finding).group
    except (KeyError, ValueError):
        return None


def collect(
    store: Store | None,
    folders: list[Path],
    pending: Path,
    *,
    kernel: str | None = None,
    device: str | None = None,
    minimise_seconds: float = 120.0,
    keep: bool = False,
    drop_unreproduced: bool = False,
    log: Callable[[str], None] | None = None,
) -> CollectResult:
    """Collect (module docstring) into the pending folder `pending`; `kernel` keeps one kernel's
    records only; `keep` leaves the store as it is."""
    from conformance.durability.state import kernel_slug
    from conformance.judging.finding import CRASH, HANG
    from conformance.judging.target import TargetError, build_target
    from conformance.records.corpus import CorpusEntry, recipe_hash
    from conformance.records.minimise import in_process_check, minimise

    say = log or (lambda _line: None)
    result = CollectResult()
    found: list[tuple[InboxRecord, str]] = []
    if store is not None:
        pulled = inbox.pull(store)
        if pulled is None:
            result.store_error = store.breaker.reason
        else:
            found += [(r, r.key) for r in pulled]
            result.store_records = len(pulled)
    for folder in folders:
        records, unreadable, crashes = folder_records(folder)
        found += records
        result.folder_records += len(records)
        result.unreadable += unreadable
        result.crashes += crashes
    if kernel is not None:
        wanted = fleet_kernel_id(kernel)
        found = [(r, s) for r, s in found if r.kernel == wanted]
    members = merge(found)

    targets: dict[tuple[str, str], Any] = {}
    groups: dict[tuple[str, str, str, str, str], list[Member]] = {}
    for member in sorted(members, key=lambda m: (m.record.kernel, m.record.profile_option, m.size(), m.hash)):
        record = member.record
        where = (record.kernel, record.profile_option)
        if where not in targets:
            try:
                targets[where] = build_target(record.kernel, profile=record.profile_option or None, device=device)
            except TargetError as err:
                targets[where] = err
        target = targets[where]
        if isinstance(target, TargetError):
            groups.setdefault((record.kernel, record.profile_option, record.profile, "", str(target)), []).append(member)
            continue
        group = _group_of(record.finding)
        if group is None:  # not recorded: replay it to learn it
            say(f"collect: replaying {member.hash} ({record.kernel}) to learn its finding")
            diag = _diagnose(target, member.entry)
            if diag.finding is None:
                groups.setdefault((record.kernel, record.profile_option, target.profile.name, "", "does not fail on this tree"), []).append(
                    member
                )
                continue
            record.finding = dict(diag.finding)
            group = _group_of(record.finding)
            assert group is not None
        groups.setdefault((record.kernel, record.profile_option, target.profile.name, *group), []).append(member)

    for (kernel_id, option, profile, kind, subject), group_members in groups.items():
        outcome = Outcome(kernel_id, profile, (kind, subject), group_members)
        result.outcomes.append(outcome)
        target = targets[(kernel_id, option)]
        if isinstance(target, TargetError):
            outcome.group = ("", "")
            outcome.note = f"kernel not usable here ({target}): left in the store"
            continue
        if not kind:
            outcome.note = "these recipes do not fail on this tree" + ("" if drop_unreproduced else ": left in the store")
            outcome.drained = drop_unreproduced
            continue
        candidates = [m.entry for m in group_members if m.record.shrunk]
        shrunk_note = ""
        if kind in (HANG, CRASH):  # replaying it here would hang or end this process
            candidates = [m.entry for m in group_members]
            shrunk_note = f"a {kind}: not replayed here (python -m conformance replay --isolate)"
        elif not candidates:
            smallest = min(group_members, key=Member.size).entry
            say(f"collect: {kernel_id}: {kind}: {subject}: no member is shrunk; minimising {recipe_hash(smallest.recipe)}")
            small = minimise(smallest.recipe, in_process_check(target, smallest.expect, name=smallest.name), max_seconds=minimise_seconds)
            shrunk_note = f"re-minimised: {len(small.accepted)} steps, {small.tries} tries ({small.stopped})"
            candidates = [CorpusEntry(smallest.name, small.recipe, smallest.expect, dict(smallest.provenance))]
            candidates += [m.entry for m in group_members]
        candidates.sort(
            key=lambda e: (e.recipe.n_q * e.recipe.heads * max(1, e.recipe.total_keys), e.recipe.cache_rows, len(e.recipe.to_json()))
        )
        chosen = None
        for entry in candidates:
            if kind in (HANG, CRASH):
                chosen, finding = entry, next(m.record.finding for m in group_members if m.entry is entry)
                break
            diag = _diagnose(target, entry)
            if diag.finding is not None and _group_of(dict(diag.finding)) == (kind, subject):
                chosen, finding = entry, dict(diag.finding)
                break
        if chosen is None:
            outcome.note = "no recipe of the group fails the same way on this tree" + ("" if drop_unreproduced else ": left in the store")
            outcome.drained = drop_unreproduced
            continue
        digest = recipe_hash(chosen.recipe)
        folder = pending / kernel_slug(kernel_id)
        path = folder / f"{digest}.json"
        finders = outcome.finders
        if path.exists():
            try:
                earlier = json.loads(path.read_text(encoding="utf-8")).get("provenance", {}).get("finders", [])
                finders = sorted(set(finders) | {str(f) for f in earlier})
            except (OSError, ValueError, AttributeError):
                pass
        provenance = {
            **{k: v for k, v in (chosen.provenance or {}).items() if k != "unshrunk"},
            "kernel": kernel_id,
            "numerics_profile": profile,
            "finding": finding,
            "finders": finders,
            "collected": {
                "date": datetime.date.today().isoformat(),
                "members": sorted(m.hash for m in group_members),
                "replayed": f"fails as {finding.get('kind')}: {finding.get('subject')} on this tree"
                if kind not in (HANG, CRASH)
                else "not replayed",
            },
        }
        if shrunk_note:
            provenance["collected"]["minimised"] = shrunk_note
        name = chosen.name if chosen.name.endswith(digest) else f"{chosen.provenance.get('property') or 'fleet'}-{digest}"
        from conformance.durability.wal import atomic_write_text

        atomic_write_text(path, CorpusEntry(name, chosen.recipe, chosen.expect, provenance).to_json())
        outcome.written, outcome.chosen, outcome.note, outcome.drained = path, digest, shrunk_note, True

    if store is not None and not keep and not result.store_error:
        keys = sorted({k for o in result.outcomes if o.drained for m in o.members for k in m.keys})
        if inbox.remove(store, keys):
            from conformance.fleet.namespace import failures_prefix

            leases = sorted(
                {lease.lease_key(failures_prefix(o.kernel, o.profile), o.group) for o in result.outcomes if o.drained and o.group[0]}
            )
            lease.clear(store, leases)
        else:
            for o in result.outcomes:
                o.drained = False
            result.store_error = store.breaker.reason
    return result
