"""The run report explains a max err/bound of exactly 1, and its histograms keep ratio 1 (a pass)
left of the bound line with the same bins and x range in every panel; ratios far outside go to an
overflow bin, non-finite ones to a bin of their own."""

from __future__ import annotations

import math
from pathlib import Path

from conformance.records.report import PLOT_BIN, PLOT_CEIL, PLOT_FLOOR, RATIO_NOTE, ReportFiles, _log_ratio, plot_bin, summary_line


def _files(ratio: float) -> ReportFiles:
    report = {
        "status": "clean",
        "examples": 3,
        "failing_examples": 0,
        "crashes": [],
        "kernels": {"k": {"largest_ratio": {"out": {"exact-steps": {"ratio": ratio}}, "lse": {"exact-steps": {"ratio": 0.01}}}}},
    }
    return ReportFiles(json_path=Path("r.json"), md_path=Path("r.md"), png_path=None, report=report)


def test_ratio_one_is_explained_where_it_is_printed() -> None:
    assert "1: out is the farther bf16 value the bound admits" in summary_line(_files(1.0))
    assert "farther bf16" not in summary_line(_files(0.5))
    assert "exactly 1 is common and right" in RATIO_NOTE


def test_a_passing_ratio_stays_left_of_the_bound_line() -> None:
    assert _log_ratio(1.0) < 0 < _log_ratio(1.0001)
    assert _log_ratio(0.0) == PLOT_FLOOR == _log_ratio(1e-30)
    assert (0.0 - PLOT_FLOOR) / PLOT_BIN == int((0.0 - PLOT_FLOOR) / PLOT_BIN)  # the bound is a bin edge


def test_far_and_non_finite_ratios_have_bins_of_their_own() -> None:
    bound_edge = int((0.0 - PLOT_FLOOR) / PLOT_BIN)  # the bin that starts at ratio 1
    assert plot_bin(1.0) == ("bin", bound_edge - 1) and plot_bin(1.0001) == ("bin", bound_edge)
    assert plot_bin(0.0) == ("bin", 0) == plot_bin(1e-300)
    assert plot_bin(10**PLOT_CEIL) == ("bin", int((PLOT_CEIL - PLOT_FLOOR) / PLOT_BIN) - 1)
    assert plot_bin(10**PLOT_CEIL * 1.01) == ("overflow", 0) == plot_bin(1e290)
    assert plot_bin(math.inf) == ("non-finite", 0) == plot_bin(math.nan)
