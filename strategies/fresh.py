"""Fresh draws of a Hypothesis strategy from a seed, outside the running test's choice sequence.

`FreshDraws(seed).draw(strategy)` draws a value of `strategy` the way Hypothesis draws a
new example in its generate phase (its own provider, heuristics and `assume`s), from a private
choice sequence driven by `random.Random(seed)`: the same seed gives the same values, in any
process and at any point of a run (under one Hypothesis version: a fleet's shared examples are
namespaced by it). A packed call (strategies.hypothesis_recipes.packs) fills its
rows after the first part with such draws, seeded from what the test drew before them, so every
example Hypothesis builds for a pack (a new one, a mutation that copies one span over another,
a target() climb that changes one choice) holds new recipes instead of repeating the parts of the
example it came from.

Determinism: the draws never take Hypothesis's pool of constants (which grows as modules are
imported, so the same seed could give other values later in a run); everything else is the seeded
random stream. The private sequence is Hypothesis's internal ConjectureData: where this
Hypothesis has none of the shape used here, `available()` is False and packs draw every part
from the test's own choice sequence (as strategies.hypothesis_recipes.packs with fresh_parts
False). Tried: 6.125.0 to 6.170.27 draw fresh (the same values for a seed, the pool of constants
never read); 6.100.0 to 6.120.0 take another ConjectureData and draw every part from the choices.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.errors import StopTest, UnsatisfiedAssumption

T = TypeVar("T")

#: the tries per value: a draw that fails an `assume` is drawn again from the next seed of the stream
ATTEMPTS = 20


def _no_test() -> None:
    """The wrapped test of a fresh draw's build context: there is none."""


@functools.cache
def _machinery() -> Callable[[st.SearchStrategy[Any], int], Any] | None:
    """draw(strategy, seed): one value from a private choice sequence, or None where this
    Hypothesis lacks the internals it uses."""
    try:
        from hypothesis.control import BuildContext
        from hypothesis.internal.conjecture.data import ConjectureData
        from hypothesis.internal.conjecture.providers import HypothesisProvider
    except ImportError:
        return None

    class _SeededProvider(HypothesisProvider):  # type: ignore[misc, valid-type]
        """Hypothesis's own provider, never drawing from its pool of constants (see module docstring)."""

        def _maybe_draw_constant(self, *args: Any, **kwargs: Any) -> None:
            return None

    # a Hypothesis before 6.134 builds contexts that name no test: decided once, here
    names_test = "wrapped_test" in inspect.signature(BuildContext).parameters
    context_options = {"wrapped_test": _no_test} if names_test else {}

    def draw(strategy: st.SearchStrategy[T], seed: int) -> T:
        """`strategy`'s value from a private choice sequence seeded by `seed`, in a build context
        of its own (the draws' records stay out of the running test's)."""
        data = ConjectureData(random=random.Random(seed), provider=_SeededProvider)
        with BuildContext(data, **context_options):
            return data.draw(strategy)

    try:
        draw(st.integers(0, 3).map(lambda x: x + 1), 0)
    except Exception:  # another shape of the internals: no fresh draws
        return None
    return draw


def available() -> bool:
    """Whether this Hypothesis supports fresh draws (see module docstring)."""
    return _machinery() is not None


class FreshDraws:
    """Values of any strategy drawn from one seeded stream (module docstring): `draw(strategy)`
    draws the next value, each from its own private choice sequence seeded by the stream. The
    same seed and the same strategies in the same order give the same values."""

    def __init__(self, seed: int) -> None:
        machinery = _machinery()
        if machinery is None:
            raise RuntimeError("fresh draws need Hypothesis's internal ConjectureData with a provider class, which this Hypothesis lacks")
        self._draw = machinery
        self._stream = random.Random(seed)

    def draw(self, strategy: st.SearchStrategy[T]) -> T | None:
        """The next value of `strategy`, drawn as a new example of a Hypothesis run draws it; a
        draw that fails an `assume` (or overruns) is drawn again from the stream's next seed, at
        most ATTEMPTS times, then None."""
        for _ in range(ATTEMPTS):
            try:
                return self._draw(strategy, self._stream.getrandbits(64))
            except (UnsatisfiedAssumption, StopTest):
                continue
        return None
