"""strategies.fresh: values of a strategy drawn from a seed, outside the test's choices."""

from __future__ import annotations

import pytest
from hypothesis import assume
from hypothesis import strategies as st

from strategies import fresh
from strategies.fresh import FreshDraws
from strategies.hypothesis_recipes import recipes

pytestmark = pytest.mark.skipif(not fresh.available(), reason="this Hypothesis has no fresh draws (strategies.fresh)")


def _draws(seed: int, count: int = 8) -> list[str]:
    stream = FreshDraws(seed)
    values = [stream.draw(recipes(max_n_q=8, max_total_keys=2048)) for _ in range(count)]
    return [value.to_json() for value in values if value is not None]


def test_a_seed_gives_the_same_values_and_another_seed_others() -> None:
    first = _draws(7)
    assert len(first) == 8 and first == _draws(7)
    assert len(set(first)) == 8 and not set(first) & set(_draws(8))


def test_the_pool_of_constants_is_never_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hypothesis's pool of constants grows as modules are imported: a draw that took from it
    # could give another value for the same seed later in a run
    first = _draws(11)
    import hypothesis.internal.conjecture.providers as providers

    monkeypatch.setattr(providers, "_get_local_constants", lambda: pytest.fail("the pool of constants was read"))
    assert _draws(11) == first


def test_a_draw_that_fails_an_assume_is_drawn_again_and_runs_out_as_none() -> None:
    even = st.integers(0, 1000).map(lambda x: (assume(x % 2 == 0), x)[1])
    stream = FreshDraws(3)
    values = [stream.draw(even) for _ in range(20)]
    assert all(v is not None and v % 2 == 0 for v in values)
    never = st.integers(0, 10).map(lambda x: (assume(False), x)[1])
    assert FreshDraws(3).draw(never) is None
