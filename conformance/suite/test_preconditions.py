"""Property 5: precondition violations the host cannot check.

Violating recipes run on the kernel only where that is safe (an out-of-range index only on a
backend whose index reads cannot fault). The behaviour observed is recorded for the run report;
only what the contract still promises fails: no exception for a data violation, and a finite
output under a scale above 2^7 or a non-power-of-two scale.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conformance.judging.checks import violation_run
from conformance.judging.target import Target
from strategies.hypothesis_recipes import violating_recipes


@given(data=st.data())
def test_precondition_violations(target: Target, data: st.DataObject) -> None:
    recipe = data.draw(
        violating_recipes(allow_out_of_range=target.backend.bounded_index_reads, heads=target.backend.head_counts),
        label="recipe",
    )
    violation_run(target, recipe)
