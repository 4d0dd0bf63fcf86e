"""Hypothesis profiles of the suite: `dev`, `ci`, `nightly` (the project's `ci` replaces Hypothesis's built-in one).

Kernel calls have no deadline (the first call may compile). Select with
`pytest --hypothesis-profile NAME`; with no choice, `ci` when the CI variable is set, else `dev`.
Nothing a kernel engineer cannot act on is printed with a failure: no `@reproduce_failure` blob
(a corpus entry replays the recipe without Hypothesis) and no explain phase ("lines always run
by failing examples" describes the suite's code, not the kernel's).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

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
}


def register_profiles() -> None:
    """Register the project's profiles and load the default one (ci under CI, else dev)."""
    for name, profile in PROFILES.items():
        settings.register_profile(name, profile)
    settings.load_profile("ci" if os.environ.get("CI") else "dev")
