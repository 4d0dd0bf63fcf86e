"""Mutation score: how many catalogued broken kernels the conformance suite kills, and how fast.

`run_mutation_score` runs the conformance suite (pytest in a subprocess) once against every
mutant of `conformance.mutation.catalogue.CATALOGUE` and once against the unbroken `emulated` kernel (the
baseline, which must pass: no false alarms). Each run gets

    python -m pytest conformance -x -q -rfE -p no:cacheprovider --conformance-no-capture
        --hypothesis-profile PROFILE --conformance-kernel SPEC -p conformance.mutation.plugin [--conformance-device DEV]

in its own fresh CONFORMANCE_DIR (a temporary folder) and its own CONFORMANCE_RUN_ID, so runs
never mix their example records. `-x` stops a run at its first failing test: a mutant is
*killed* when a test fails in its call phase, *survived* when the whole suite passes,
*survived (timeout)* when the run exceeds the per-run timeout, and *error* when the run could
not judge it (collection or fixture error, every test skipped, pytest usage error).

Counting examples: the harness (`conformance.judging.harness.record`) appends one JSON line per judged
example to `<CONFORMANCE_DIR>/runs/<run id>/examples-<worker>.jsonl`; the differential check
writes one line per comparison mode for the same kernel call, so consecutive lines of one
property and recipe with distinct `mode`s count as one example. A mutant's *examples* are the
examples recorded up to and including the first one whose outcome is "fail" (all recorded
examples when the failure left no "fail" line: a kernel that raised, host validation, a
precondition-run assertion). Its *first failure* time is that example's `time` minus the
subprocess's start, else the end of the failing test as pytest reported it.

Exit status of the command: 0 when every selected mutant is killed and the baseline (when run)
passes, 1 otherwise, 2 on a usage error.

Modules: `catalogue` (the broken kernels), `plugin` (the pytest plugin loaded into each run),
`runner` (one run in a subprocess and its verdict), `score` (every run, the score and its
tables). The command is conformance.cli.mutation.
"""
