"""What kind of failure a failing test or example is, in a kernel engineer's words.

Every failure the suite reports carries one `Finding`: its `kind` (one of KINDS), its `subject`
(what broke, a short phrase without numbers, so that failures of one bug compare equal) and its
`detail` (the numbers: by how much, which step). Failures with the same `group` are shown once
in the terminal summary and grouped in the run report: the group is (kind, subject), except that
a wrong result and a precision failure of one subject are one group, shown with the worse kind: a
defect whose error exceeds every rounding model on some input is not a rounding problem where its
error happens to be smaller.

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

A headline reads `kind: subject (detail)`. The subjects the suite uses for one kind of failure
everywhere are constants here (HUNG, DIED); `SEVERITY` orders kinds from the worst, `worse` picks
the worse of two findings (the metamorphic properties report the worse of their runs).

The finding travels on the exception as attribute FINDING_ATTR (`attach`), like the recipe under
judgement (conformance.judging.target.JUDGED_ATTR); `carried` reads it back, `finding_of` derives
one for an exception that carries none (a hung call: hang; anything else: suite error), and
`parse` reads a headline back from text (a failure's first line, a log written without the
finding's fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

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
#: kinds from the worst: a dead process, a hung call, a broken promise, a wrong value, a too coarse
#: rounding, a profile that is too tight, the suite's own failure
SEVERITY: tuple[str, ...] = (CRASH, HANG, CONTRACT, WRONG_RESULT, PRECISION, PROFILE, SUITE_ERROR)

#: the subject of every hang finding (a call past its time limit, or a crash entry marked hung)
HUNG = "a kernel call did not return"
#: the subject of every crash finding (the process running a kernel call died)
DIED = "the process running the kernel died"


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
        """What failures of one bug share: (kind, subject), a precision failure counted with the
        wrong results of its subject (the group's kind is its worst member's: `worse`)."""
        return (WRONG_RESULT if self.kind == PRECISION else self.kind, self.subject)

    @property
    def against_kernel(self) -> bool:
        """Whether this is a finding against the kernel (not the profile's or the suite's)."""
        return self.kind in FINDING_KINDS

    @property
    def severity(self) -> int:
        """The kind's place in SEVERITY (0: the worst)."""
        return SEVERITY.index(self.kind)

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
    return attached(err, FINDING_ATTR, Finding)


def attached(err: BaseException | None, attr: str, kind: type[T]) -> T | None:
    """The value of attribute `attr` on `err` when it is a `kind`, else on the first exception of
    a group (Hypothesis reports distinct failures together) or of its cause / context chain,
    breadth first, that has one; None when none does."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        value = getattr(current, attr, None)
        if isinstance(value, kind):
            return value
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend((current.__cause__, current.__context__))
    return None


def worse(*findings: Finding | None) -> Finding | None:
    """The worst of `findings` by SEVERITY (the first of equals); None when every one is None."""
    present = [f for f in findings if f is not None]
    return min(present, key=lambda f: f.severity) if present else None


def headline_first(err: BaseException, finding: Finding) -> BaseException:
    """Attach `finding` to `err` and make the headline the first line of its message (for an
    exception whose message is its first argument, as KernelHung's is); returns `err`."""
    attach(err, finding)
    text = str(err)
    if not text.startswith(finding.headline):
        try:
            err.args = (finding.headline + (f"\n{text}" if text else ""),)
        except (AttributeError, TypeError):
            pass
    return err


def finding_of(err: BaseException | None) -> Finding:
    """The finding `err` carries (`carried`), else one derived from its type: a call past its time
    limit (conformance.durability.watchdog.KernelHung) is a hang, anything else raised outside a
    judgement a suite error."""
    found = carried(err)
    if found is not None:
        return found
    from conformance.durability.watchdog import KernelHung

    if isinstance(err, KernelHung):
        return Finding(HANG, HUNG, f"no return within {err.timeout_s:g} s")
    name = type(err).__name__ if err is not None else "a failure"
    first = str(err).strip().splitlines()[0][:200] if err is not None and str(err).strip() else ""
    return Finding(SUITE_ERROR, f"{name} raised outside a judgement", first)


def parse(line: str) -> Finding | None:
    """The finding a headline (`kind: subject (detail)`) states, None when `line` is not one.

    The detail is the balanced parenthesised group ending the line; subjects the suite writes do
    not end with a parenthesis, so a headline without a detail reads back as written."""
    text = line.strip()
    for kind in KINDS:
        if text.startswith(f"{kind}: "):
            rest = text[len(kind) + 2 :].strip()
            break
    else:
        return None
    subject, detail = rest, ""
    if rest.endswith(")"):
        depth = 0
        for i in range(len(rest) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(rest[i], 0)
            if depth == 0:
                if i > 0 and rest[i - 1] == " ":
                    subject, detail = rest[: i - 1].rstrip(), rest[i + 1 : -1]
                break
    return Finding(kind, subject, detail) if subject else None
