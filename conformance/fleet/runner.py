"""What one runner does with the fleet: push its failures, lease their shrinking, say how the store fared.

A `FleetRunner` is made by a front end (`fuzz`, the pytest plugin) for one target: the store
(or None: no store configured), the kernel and numerics profile as the fleet names them
(conformance.fleet.namespace), the shard and who this runner is (`finder`: $CONFORMANCE_RUNNER_ID,
else the host name, then the run id, the shard and the xdist worker). `send` puts a failure into
the inbox (outbox first: conformance.fleet.inbox), `lease` / `finish` hold a failure group
(conformance.fleet.lease), `lines` are what the front end prints about the store, and
`write_status` leaves this process's part of that in the run folder (an xdist worker's breaker is
in another process than the session's summary).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.fleet import inbox, lease
from conformance.fleet.namespace import failures_prefix, fleet_kernel_id
from conformance.fleet.shards import UNSHARDED, Shard
from conformance.fleet.store import Store

RUNNER_ENV = "CONFORMANCE_RUNNER_ID"
STATUS_FILE = "fleet-{worker}.json"
PUSH_HINT = "python -m conformance corpus push"


def finder_id(run_id: str, shard: Shard = UNSHARDED, worker: str = "main") -> str:
    """`<runner>/<run id>[/shard i/n][/<worker>]` (module docstring)."""
    runner = os.environ.get(RUNNER_ENV) or socket.gethostname() or "runner"
    parts = [runner, run_id]
    if shard.sharded:
        parts.append(f"shard {shard}")
    if worker != "main":
        parts.append(worker)
    return "/".join(parts)


@dataclass
class FleetRunner:
    """One runner's use of the fleet (module docstring)."""

    store: Store | None
    kernel: str
    profile: str
    finder: str
    profile_option: str = ""
    shard: Shard = UNSHARDED
    pushed: int = 0
    queued: int = 0
    notes: list[str] = field(default_factory=list)

    @classmethod
    def for_target(
        cls,
        store: Store | None,
        kernel_spec: str,
        profile_name: str,
        finder: str,
        *,
        profile_option: str | None = None,
        shard: Shard = UNSHARDED,
    ) -> FleetRunner:
        return cls(store, fleet_kernel_id(kernel_spec), profile_name, finder, profile_option or "", shard)

    @property
    def prefix(self) -> str:
        return failures_prefix(self.kernel, self.profile)

    def send(self, entry: Any, finding: dict[str, str], *, shrunk: bool) -> str:
        """Put one pending entry (conformance.records.corpus.CorpusEntry) into the inbox: one line
        saying what happened."""
        from conformance.records.corpus import recipe_hash

        record = inbox.InboxRecord(
            kernel=self.kernel,
            profile=self.profile,
            entry_json=entry.to_json(),
            finding=dict(finding),
            shrunk=shrunk,
            finders={self.finder},
            profile_option=self.profile_option,
            digest=recipe_hash(entry.recipe),
        )
        pushed, queued_at = inbox.send(self.store, record)
        if pushed:
            self.pushed += 1
            return f"pushed to the store's inbox ({'shrunk' if shrunk else 'unshrunk'})"
        self.queued += 1
        where = f"queued in {queued_at} for `{PUSH_HINT}`" if queued_at is not None else "not queued (the outbox cannot be written)"
        return f"not pushed ({'no shared store' if self.store is None else 'store unreachable'}); {where}"

    def lease(self, group: tuple[str, str] | list[str], ttl_s: float) -> lease.Lease:
        """The lease of a failure group (granted at once without a store)."""
        if self.store is None:
            return lease.Lease(True, self.finder, local=True)
        return lease.acquire(self.store, lease.lease_key(self.prefix, group), self.finder, ttl_s)

    def finish(self, group: tuple[str, str] | list[str]) -> None:
        """Mark a failure group's lease done (it is shrunk and pushed)."""
        if self.store is not None:
            lease.finish(self.store, lease.lease_key(self.prefix, group), self.finder)

    def unpushed(self) -> int:
        """Records waiting in this state folder's outbox."""
        return inbox.count_queued()

    def store_line(self) -> str:
        """The store in use, or that it is unreachable and the run uses local state only."""
        if self.store is None:
            return "no shared store (--shared-store URL or $CONFORMANCE_SHARED_STORE): local state only"
        return self.store.status()

    def unpushed_line(self) -> str:
        waiting = self.unpushed()
        return f"{waiting} entr{'y' if waiting == 1 else 'ies'} unpushed" + (f" ({PUSH_HINT})" if waiting else "")

    def write_status(self, folder: Path, worker: str) -> None:
        """This process's store status and pushes, as `fleet-<worker>.json` in `folder` (best effort)."""
        data = {
            "store": self.store.address.shown if self.store is not None else None,
            "down": bool(self.store is not None and self.store.down),
            "reason": self.store.breaker.reason if self.store is not None else "",
            "pushed": self.pushed,
            "queued": self.queued,
        }
        try:
            from conformance.durability.wal import atomic_write_text

            atomic_write_text(folder / STATUS_FILE.format(worker=worker), json.dumps(data, sort_keys=True) + "\n")
        except OSError:
            pass


def read_statuses(folder: Path) -> list[dict[str, Any]]:
    """Every process's `write_status` in `folder`."""
    found = []
    for path in sorted(folder.glob(STATUS_FILE.format(worker="*"))):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return found
