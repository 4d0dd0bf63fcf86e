"""What kind of failure a failing test or example is, in a kernel engineer's words.

Every failure the suite reports carries one `Finding`: its `kind` (one of KINDS), its `subject`
(what broke, a short phrase without numbers, so that failures of one bug compare equal) and its
`detail` (the numbers: by how much, which step). Failures with the same `group` (kind, subject)
are shown once in the terminal summary and grouped in the run report.

Kinds (FINDING_KINDS are findings against the kernel; "profile too tight" is not):
- "contract violation": a promise that needs no bound is broken (non-finite output, an empty row
  not 0 / -inf, inputs written, a valid call that raises, a broken batch invariance, ...);
- "wrong result": outside the bound of the coarsest rounding model of the kernel family, by the
  factor `detail` gives (a logic bug: a missing mask, lse in the wrong base, a wrong scale);
- "precision": outside the declared profile and every legitimate relaxation of it, but inside the
  coarsest rounding model: `detail` names the rounding step that is too coarse;
- "crash": the process running the kernel died (signal, device fault);
- "hang": a kernel call did not return within its limit;
- "profile too tight": passes under a named, weaker assumption: the declared profile is wrong,
  not the kernel;
- "suite error": the suite itself failed (a bug of the suite or of its environment, never
  counted against the kernel).

The finding travels on the exception as attribute FINDING_ATTR (`attach`), like the recipe under
judgement (conformance.judging.target.JUDGED_ATTR); `finding_of` reads it back, and derives one for
an exception that carries none.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTRACT = "contract violation"
WRONG_RESULT = "wrong result"
PRECISION = "precision"
CRASH = "crash"
HANG = "hang"
PROFILE = "profile too tight"
SUITE_ERROR = "suite error"

KINDS: tuple[str, ...] = (CONTRACT, WRONG_RESULT, PRECISION, CRASH, HANG, PROFILE, SUITE_ERROR)
#: kinds that are findings against the kernel under test
FINDING_KINDS: frozenset[str] = frozenset({CONTRACT, WRONG_RESULT, PRECISION, CRASH, HANG})

FINDING_ATTR = "conformance_finding"


@dataclass(frozen=True)
class Finding:
    """One failure's kind, subject (no numbers) and detail (numbers, the step)."""

    kind: str
    subject: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}: one of {', '.join(KINDS)}")

    @property
    def headline(self) -> str:
        """`kind: subject (detail)`, one line."""
        text = f"{self.kind}: {self.subject}"
        return f"{text} ({self.detail})" if self.detail else text

    @property
    def group(self) -> tuple[str, str]:
        """What failures of one bug share: (kind, subject)."""
        return (self.kind, self.subject)

    @property
    def against_kernel(self) -> bool:
        """Whether this is a finding against the kernel (not the profile's or the suite's)."""
        return self.kind in FINDING_KINDS

    def to_json_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "subject": self.subject, "detail": self.detail}

    @classmethod
    def from_json_dict(cls, data: dict[str, str]) -> Finding:
        return cls(str(data["kind"]), str(data["subject"]), str(data.get("detail", "")))


def attach(err: BaseException, finding: Finding) -> BaseException:
    """Give `err` its finding (kept when it already has one: the innermost is the one that failed); returns `err`."""
    if getattr(err, FINDING_ATTR, None) is None:
        try:
            setattr(err, FINDING_ATTR, finding)
        except (AttributeError, TypeError):  # an exception type that takes no attributes
            pass
    return err


def failure(finding: Finding, message: str = "") -> AssertionError:
    """An AssertionError whose first line is the finding's headline (then `message`), carrying it."""
    text = finding.headline + (f"\n{message}" if message else "")
    err = AssertionError(text)
    attach(err, finding)
    return err


def carried(err: BaseException | None) -> Finding | None:
    """The finding `err` carries: on itself, else on the first exception of a group or of its
    cause / context chain that has one; None when none does."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        found = getattr(current, FINDING_ATTR, None)
        if isinstance(found, Finding):
            return found
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend((current.__cause__, current.__context__))
    return None
