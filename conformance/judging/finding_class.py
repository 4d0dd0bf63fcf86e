"""The three classes a failure is sorted into (conformance.judging.triage decides which; TOLERANCES.md
section 13): 1 a contract violation that needs no bound, 2 a profile too tight for the kernel,
3 a precision bug. Kept apart from the triage so the harness can label class-1 findings it
detects itself (written inputs, a result that is not the contract's pair) without importing it."""

from __future__ import annotations

CONTRACT, PROFILE, PRECISION = 1, 2, 3
CLASS_NAMES = {
    CONTRACT: "class 1 (contract violation)",
    PROFILE: "class 2 (the profile is too tight, not the kernel)",
    PRECISION: "class 3 (precision bug)",
}
