"""Property 5: precondition violations the host cannot check.

Violating recipes run on the kernel only where that is safe (an out-of-range index only on a
backend whose index reads cannot fault). The behaviour observed is recorded for the run report;
only what the contract still promises fails: no exception for a data violation, and a finite
output under a scale above 2^7 or a non-power-of-two scale. The recipes' H and flags are drawn
among those the kernel declares it takes (conformance.judging.flag_support).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.judging.checks import violation_run
from conformance.judging.flag_support import ALL_FLAGS, flags_reason, supported_flags
from conformance.judging.target import Target
from strategies.hypothesis_recipes import violating_recipes


@given(data=st.data())
def test_precondition_violations(target: Target, data: st.DataObject) -> None:
    counts = target.backend.head_counts or tuple(range(1, target.backend.max_heads + 1))
    flags: dict[int, tuple[tuple[bool, bool], ...]] | None = {h: supported_flags(target, h) for h in counts}
    heads = tuple(h for h in counts if flags[h])
    if not heads:
        pytest.skip(f"{target.name} takes no has_invalid / return_lse at any H: {flags_reason(target, counts[0])}")
    if all(len(f) == len(ALL_FLAGS) for f in flags.values()):  # takes every H it declares with every flag
        heads, flags = target.backend.head_counts, None
    recipe = data.draw(
        violating_recipes(allow_out_of_range=target.backend.bounded_index_reads, heads=heads, flags=flags),
        label="recipe",
    )
    violation_run(target, recipe)
