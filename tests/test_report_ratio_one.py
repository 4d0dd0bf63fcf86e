"""The run report explains a max err/bound of exactly 1, and its histograms keep ratio 1 (a pass)
left of the bound line with the same bins and x range in every panel."""

from __future__ import annotations

from pathlib import Path

from conformance.records.report import PLOT_BIN, PLOT_FLOOR, RATIO_NOTE, ReportFiles, _log_ratio, summary_line


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
