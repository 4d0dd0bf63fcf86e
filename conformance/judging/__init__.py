"""Judging one call: the kernel under test (`target`), the checks a property runs (`checks`), the
kernel call and its comparison with the a-priori bound (`harness`), the class of a failing verdict
(`triage`, `finding_class`), the suite's Hypothesis profiles and the progress line of long tests."""
