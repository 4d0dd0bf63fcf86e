"""conformance.judging.progress: run_kernel ticks once per kernel call; the listener sees calls and seconds."""

from __future__ import annotations

from conformance.judging import progress
from conformance.judging.harness import run_kernel
from conformance.judging.target import build_target
from strategies.materialize import materialize
from strategies.recipe import Recipe


def test_each_kernel_call_ticks_the_listener() -> None:
    seen: list[tuple[int, float]] = []
    progress.reset()
    progress.listen(lambda calls, seconds: seen.append((calls, seconds)))
    try:
        problem = materialize(Recipe(seed=1, n_q=1, heads=1, row_lengths=(2,), cache_rows=4))
        backend = build_target("emulated", device="cpu").backend
        for _ in range(2):
            run_kernel(problem, backend, property_name="t", kernel_name="emulated")
    finally:
        progress.listen(None)
    assert [calls for calls, _ in seen] == [1, 2] and all(seconds >= 0 for _, seconds in seen)
    progress.tick()  # no listener: nothing happens
