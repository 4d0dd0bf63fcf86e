"""The recorded kills: for every mutant of the score, the cheapest suite test that kills it, and
a way to run one suite test in this process.

`KILLED_BY` maps each catalogued mutant and precision defect (conformance.mutation.score.
catalogue_specs) to the node id, relative to `conformance/suite/`, of the cheapest test of the
suite that kills it under the `ci` Hypothesis profile: the cheapest corpus entry that kills it
where one does, else the cheapest property. The full score (`python -m conformance
mutation-score`) runs the whole suite per kernel and says where a kill differs from this record;
tests/conformance/mutation/test_score.py checks in CI, in one process, that each recorded test kills its
mutant and that emulated and every correct variant pass every recorded test (so no recorded kill
is a false alarm).

`run_suite_test` runs a corpus entry or a Hypothesis property of the suite as pytest would, with
the `ci` profile less its shrink and explain phases (as conformance.mutation.plugin does): the
examples a derandomized profile generates are a function of the test's source alone, so the
verdict is the one the suite run gives.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from conformance.judging.target import Target

_CORPUS = "test_corpus.py::test_corpus_entry"
_SCALE_BEHAVIOUR = "test_gfx950_agreement.py::test_documented_scale_behaviour"

# Measured 2026-12-01 on the CPU: for each mutant, the corpus entries in the mutation plugin's
# order (cheapest recipe first), then the properties; the first test that fails is recorded.
KILLED_BY: dict[str, str] = {
    "offset32": f"{_CORPUS}[edge-beyond-4gib]",
    "row_begin_off_by_one": f"{_CORPUS}[variant-all-zero-output-within-bound]",
    "invalid_unmasked": f"{_CORPUS}[edge-leading-tile-invalid]",
    "tail_unmasked": f"{_CORPUS}[edge-single-key]",
    "last_valid_off_by_one": f"{_CORPUS}[edge-exact-arithmetic]",
    "masked_v_not_zeroed": f"{_CORPUS}[edge-nan-poisoned-row-0]",
    "tile_stride_off_by_one": f"{_CORPUS}[edge-one-head]",
    "head_stride_ignored": f"{_CORPUS}[edge-padded-q-strides]",
    "out_row_stride_ignored": f"{_CORPUS}[edge-preallocated-strided-out]",
    "q_lo_dropped": f"{_CORPUS}[edge-single-key]",
    "q_lo_e8m0_wraps": f"{_CORPUS}[edge-q-tiny-blocks]",
    "qk_scale_mantissa": _SCALE_BEHAVIOUR,  # no corpus entry kills it (docs/explanation/mutation-score.md)
    "rope_ignored": f"{_CORPUS}[variant-all-zero-output-within-bound]",
    "l_not_rescaled": f"{_CORPUS}[edge-no-lse]",
    "exp2_without_log2e": f"{_CORPUS}[variant-all-zero-output-within-bound]",
    "scale_cap_missing": f"{_CORPUS}[edge-latent-above-57344]",
    "p_bf16": f"{_CORPUS}[flashmla-max-latent-flat-softmax]",
    "o_not_rescaled": f"{_CORPUS}[edge-no-lse]",
    "empty_row_nan_out": f"{_CORPUS}[edge-empty-row]",
    "empty_row_lse_zero": f"{_CORPUS}[edge-empty-row]",
    "lse_base2": f"{_CORPUS}[edge-single-key]",
    "lse_shift_missing": f"{_CORPUS}[edge-single-key]",
    "paged_cache_as_rows": f"{_CORPUS}[edge-paged-cache]",
    "empty_cache_early_return": f"{_CORPUS}[edge-empty-cache]",
    "uniform_rows_from_stream_length": f"{_CORPUS}[edge-stream-tail]",
    "scale_magnitude": f"{_CORPUS}[edge-negative-softmax-scale]",
    "q_extent_from_row_stride": f"{_CORPUS}[edge-head-major-q]",
    "out_extent_from_row_stride": f"{_CORPUS}[edge-head-major-out]",
    "stream_gathered_whole": f"{_CORPUS}[edge-unconsumed-garbage]",
    "one_row_cache_as_empty": f"{_CORPUS}[edge-one-row-cache]",
    "p_fp16_toward_zero": f"{_CORPUS}[flashmla-max-latent-flat-softmax]",
    "l_bf16": f"{_CORPUS}[edge-empty-row]",
    "alpha_bf16": f"{_CORPUS}[edge-softmax-flat]",
    "exp2_f16": f"{_CORPUS}[edge-softmax-flat]",
    "rope_fp8": f"{_CORPUS}[edge-single-key]",
    "q_lo_two_bits_fewer": f"{_CORPUS}[edge-single-key]",
    "out_bf16_truncated": f"{_CORPUS}[edge-empty-row]",
    "c_log2_bf16": f"{_CORPUS}[edge-heavy-tailed-latent]",
}

Outcome = Literal["passed", "failed", "skipped", "error"]


@dataclass(frozen=True)
class SuiteTestResult:
    """How one suite test ended: passed, failed (an AssertionError: a verdict), skipped, or error
    (any other exception); message: the first line of the failure or skip reason."""

    nodeid: str
    outcome: Outcome
    message: str = ""


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def _is_verdict(err: BaseException) -> bool:
    """An AssertionError, or a group of them (Hypothesis reports distinct failures together)."""
    if isinstance(err, BaseExceptionGroup):
        return all(_is_verdict(e) for e in err.exceptions)
    return isinstance(err, AssertionError)


def run_suite_test(nodeid: str, target: Target, *, hypothesis_profile: str = "ci") -> SuiteTestResult:
    """Run the suite test `nodeid` (relative to conformance/suite/: a corpus entry
    `test_corpus.py::test_corpus_entry[NAME]` or a Hypothesis property `FILE::FUNCTION`) against
    `target` in this process. ValueError for any other kind of node id."""
    import pytest
    from hypothesis import Phase, settings

    from conformance.judging.hypothesis_profiles import PROFILES
    from conformance.records.corpus import CORPUS_DIR

    file_name, _, test = nodeid.partition("::")
    function_name, _, param = test.partition("[")
    module = importlib.import_module(f"conformance.suite.{file_name.removesuffix('.py')}")
    function = getattr(module, function_name)
    if test.startswith("test_corpus_entry[") and file_name == "test_corpus.py":
        path = CORPUS_DIR / f"{param.removesuffix(']')}.json"

        def call() -> None:
            function(target, path)

    elif hasattr(function, "hypothesis") and not param:

        def call() -> None:
            function(target=target)

    else:
        raise ValueError(f"{nodeid}: only corpus entries and Hypothesis properties of conformance/suite run in-process")
    # @given takes the settings current when the suite module was imported; the suite run's are
    # the profile less shrink and explain (conformance.mutation.plugin), so lend those for the call
    chosen = PROFILES[hypothesis_profile]
    chosen = settings(chosen, phases=tuple(p for p in chosen.phases if p not in (Phase.shrink, Phase.explain)))
    lent = hasattr(function, "hypothesis")
    previous = getattr(function, "_hypothesis_internal_use_settings", None)
    if lent:
        function._hypothesis_internal_use_settings = chosen
    try:
        call()
    except pytest.skip.Exception as err:
        return SuiteTestResult(nodeid, "skipped", str(err.msg)[:300])
    except Exception as err:  # noqa: BLE001 - a test's failure, whatever it raised, is its outcome
        return SuiteTestResult(nodeid, "failed" if _is_verdict(err) else "error", _first_line(err))
    finally:
        if lent:
            function._hypothesis_internal_use_settings = previous
    return SuiteTestResult(nodeid, "passed")
