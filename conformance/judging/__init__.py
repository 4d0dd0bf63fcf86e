"""Judging one call: the kernel under test (`target`), the checks a property runs (`checks`), the
kernel call and its comparison with the a-priori bound (`harness`), what kind of failure a failing
call is (`finding`, `triage`), why examples were not judged (`rejections`), the suite's Hypothesis
profiles and the progress line of long tests."""
