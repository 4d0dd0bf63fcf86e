"""Hypothesis profiles of the suite: `dev`, `ci`, `nightly`, `fleet` (the project's `ci` replaces Hypothesis's built-in one).

Kernel calls have no deadline (the first call may compile). Select with
`pytest --hypothesis-profile NAME`; with no choice, `ci` when the CI variable is set, else `dev`.

Databases, with a shared store (`register_profiles(shared)`: the fleet's examples database,
conformance.fleet.database, handed in by the pytest plugin) and without:
- `fleet`: the runners of a fleet (docs/fleet.md): Hypothesis's local folder multiplexed with the
  shared store, read and written, so a runner replays what another found; $CONFORMANCE_FLEET_EXAMPLES
  examples per property test (default FLEET_EXAMPLES, the nightly profile's). Without a store:
  the local folder only.
- `dev` (a developer's run): the local folder, and the shared store read-only: a developer
  replays the fleet's failures and never deletes or adds any.
- `ci` (a pull request's run): no database at all, so its verdict never depends on a store or on
  an earlier run.
- `nightly`: Hypothesis's default local folder.
Nothing a kernel engineer cannot act on is printed with a failure: no `@reproduce_failure` blob
(a corpus entry replays the recipe without Hypothesis) and no explain phase ("lines always run
by failing examples" describes the suite's code, not the kernel's).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, MultiplexedDatabase, ReadOnlyDatabase

_COMMON = {
    "deadline": None,
    "suppress_health_check": (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much),
    "print_blob": False,
    "phases": tuple(p for p in Phase if p is not Phase.explain),
}

PROFILES = {
    "dev": settings(max_examples=40, **_COMMON),
    "ci": settings(max_examples=25, derandomize=True, database=None, **_COMMON),
    "nightly": settings(max_examples=1000, **_COMMON),
    "fleet": settings(max_examples=1000, **_COMMON),  # its database is set by register_profiles
}

FLEET_EXAMPLES_ENV = "CONFORMANCE_FLEET_EXAMPLES"
FLEET_EXAMPLES = 1000


def fleet_examples() -> int:
    """Examples per property test of the fleet profile: $CONFORMANCE_FLEET_EXAMPLES, else
    FLEET_EXAMPLES; ValueError naming the variable when it is not an integer >= 1."""
    raw = os.environ.get(FLEET_EXAMPLES_ENV, "").strip()
    if not raw:
        return FLEET_EXAMPLES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{FLEET_EXAMPLES_ENV}={raw!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{FLEET_EXAMPLES_ENV}={raw!r}: expected an integer >= 1")
    return value


def local_database() -> ExampleDatabase:
    """Hypothesis's own local folder (`.hypothesis/examples`, or under $HYPOTHESIS_STORAGE_DIRECTORY)."""
    from hypothesis.configuration import storage_directory

    return DirectoryBasedExampleDatabase(storage_directory("examples", intent_to_write=False).path)


def register_profiles(shared: ExampleDatabase | None = None) -> None:
    """Register the project's profiles (with the shared store's examples database `shared`, when
    a store is in use: see the module docstring) and load the default one (ci under CI, else dev).
    ValueError when $CONFORMANCE_FLEET_EXAMPLES is malformed."""
    local = local_database()
    databases = {"fleet": local if shared is None else MultiplexedDatabase(local, shared)}
    if shared is not None:
        databases["dev"] = MultiplexedDatabase(local, ReadOnlyDatabase(shared))
    sizes = {"fleet": fleet_examples()}
    for name, profile in PROFILES.items():
        changes = {k: v for k, v in (("database", databases.get(name)), ("max_examples", sizes.get(name))) if v is not None}
        settings.register_profile(name, settings(profile, **changes) if changes else profile)
    settings.load_profile("ci" if os.environ.get("CI") else "dev")
