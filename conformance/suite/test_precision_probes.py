"""Property 4: directed precision probes (strategies.precision_probes), judged like everything
else: the kernel's out and lse within its declared profile's a-priori bound of the float64
reference, in both comparison modes, with identical NaN/inf positions.

Random recipes hide a rounding step that is a little coarser than declared (P' = fp16(P scale_v)
rounded toward zero, exp2 in f16, alpha in bf16, ...) under the other terms of the bound. A probe
is a small problem on which those other terms are negligible by construction and one step sits
where a rounding outside the profile leaves the bound; every correct kernel of the profile still
passes (the bound is the same as the differential property's: no probe has a tolerance of its
own). Hypothesis draws the probe, its seed, the head count and a size (keys per row, or rows);
each example is one small call. A failure names the probe call that reproduces it
(`strategies.precision_probes.PROBES[name].build(seed, heads, size)`); a probe is not a recipe,
so no pending corpus entry is written for it. A kernel that does not take a probe's flags
(has_invalid False, lse on) gets the same probe under flags it takes: has_invalid True changes
nothing on a probe without negative entries; lse off leaves only out judged.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.judging.checks import record_verdicts, require_support, run_valid_call, target_ratios
from conformance.judging.finding import failure
from conformance.judging.flag_support import flags_reason, supported_flags
from conformance.judging.harness import judge
from conformance.judging.target import Target
from conformance.judging.triage import triage
from strategies.precision_probes import PROBES, to_device

PROPERTY = "precision_probes"


def _heads(target: Target) -> st.SearchStrategy[int]:
    counts = target.backend.head_counts
    return st.sampled_from(sorted(counts)) if counts else st.integers(1, target.backend.max_heads)


@given(data=st.data())
def test_precision_probes(target: Target, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(tuple(PROBES)), label="probe")
    probe = PROBES[name]
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    heads = data.draw(_heads(target), label="heads")
    size = data.draw(st.sampled_from(probe.sizes), label="size")
    call = f"{name}(seed={seed}, heads={heads}, size={size})"
    problem = to_device(probe.build(seed, heads, size), target.device)
    taken = supported_flags(target, heads)
    if not taken:
        pytest.skip(f"{target.name} takes no has_invalid / return_lse at H {heads}: {flags_reason(target, heads)}")
    if (problem.has_invalid, problem.return_lse) not in taken:  # a narrow kernel: the same probe under flags it takes
        has_invalid, return_lse = max(taken, key=lambda f: (f[1], not f[0]))  # lse kept where it can be
        problem = dataclasses.replace(problem, has_invalid=has_invalid, return_lse=return_lse)
        call += f" with has_invalid={has_invalid}, return_lse={return_lse}"
    require_support(target, problem)
    out, lse = run_valid_call(target, problem, PROPERTY)
    judgement = judge(problem, out, lse, target.profile)
    triaged = None if judgement.ok else triage(problem, out, lse, target.profile, judgement)
    target_ratios([judgement.verdicts])
    probe = {"probe": {"name": name, "seed": seed, "heads": heads, "size": size}}
    record_verdicts(PROPERTY, target.name, problem, judgement.verdicts, None if triaged is None else triaged.finding, probe)
    if triaged is not None:
        raise failure(triaged.finding, f"probe {call}: kernel output outside the a-priori bound:\n" + "\n".join(judgement.messages()))
