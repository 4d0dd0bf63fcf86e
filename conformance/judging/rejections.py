"""Why examples of the current test were not judged: a per-process tally the pytest plugin reads.

Inside a Hypothesis property an example that cannot be judged here is rejected (the recipe is too
large for this machine's memory, the device ran out of memory under load, the backend declares it
does not take the call). When every example of a property is rejected, Hypothesis raises
`Unsatisfiable`; the plugin then reports the property as not judged, with the reasons counted
here, instead of as a failure of the kernel. `note` is called where an example is rejected;
`reset` at the start of each test; `summary` gives the reasons, most frequent first.
"""

from __future__ import annotations

from collections import Counter

_REASONS: Counter[str] = Counter()
MAX_REASON = 160


def reset() -> None:
    """Forget the reasons noted so far (the plugin calls it before each test)."""
    _REASONS.clear()


def note(reason: str) -> None:
    """Count one rejected example with its reason (one line, cut at MAX_REASON characters)."""
    line = " ".join(str(reason).split())
    _REASONS[line[:MAX_REASON]] += 1


def counts() -> dict[str, int]:
    """Each reason noted since the last reset with its count, most frequent first."""
    return dict(_REASONS.most_common())


def summary(limit: int = 3) -> str:
    """The most frequent reasons as one line: `N x reason; M x reason`, '' when none was noted."""
    parts = [f"{n} x {reason}" for reason, n in _REASONS.most_common(limit)]
    rest = len(_REASONS) - limit
    if rest > 0:
        parts.append(f"{rest} other reason(s)")
    return "; ".join(parts)
