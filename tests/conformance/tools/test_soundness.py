"""`python -m conformance soundness`: the campaign split over processes and merged, the err/bound
distribution (reproducible by its seed, term shares, a violating kernel exits 1), and one-line
errors for bad combinations, kernels and summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main


def test_the_campaign_over_two_processes_is_merged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.json"
    assert main(["soundness", "--problems", "64", "--processes", "2", "--json", str(summary)]) == 0
    data = json.loads(summary.read_text())
    assert data["campaigns"] == 2 and data["problems"] == 64 and data["violations"] == []
    assert set(data["max_ratio"]) == {"out/exact-steps", "out/float64", "lse/exact-steps", "lse/float64"}
    captured = capsys.readouterr()
    assert "violations: 0" in captured.out and "2/2 processes done, 64 problems" in captured.err


def test_the_distribution_is_reproducible_and_has_term_shares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for name in ("a.json", "b.json"):
        args = ["soundness", "--distribution", "--problems", "4", "--max-row", "96", "--shares", "1", "--json", str(tmp_path / name)]
        assert main(args) == 0
        runs.append(json.loads((tmp_path / name).read_text()))
    capsys.readouterr()
    first, second = runs
    assert first["ratios"] == second["ratios"] and first["profile"] == "gfx950"
    assert first["ratios"]["out/exact-steps"]["n"] > 0 and first["ratios"]["out/exact-steps"]["violations"] == 0
    assert "qk accumulation" in first["term_shares_median"]
    assert main(["soundness", "--distribution", "--problems", "4", "--max-row", "96", "--shares", "0", "--seed", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["seed"] == 1


def test_a_kernel_outside_its_bound_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """lse in log2 units under the float64 profile: every lse is outside the bound."""
    kernel = "tests.conformance.judging.kind_kernels:lse_log2"
    args = ["soundness", "--distribution", "--kernel", kernel, "--problems", "3", "--max-row", "64", "--shares", "0"]
    assert main(args) == 1
    assert json.loads(capsys.readouterr().out)["ratios"]["lse/float64"]["violations"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--distribution", "--processes", "2"], "--distribution runs in one process"),
        (["--merge", "x.json", "--processes", "2"], "--merge combines earlier summaries"),
        (["--profile", "gfx950"], "--profile applies to --distribution"),
        (["--kernel", "no-such-kernel", "--problems", "1"], "unknown kernel 'no-such-kernel'"),
        (["--merge", "/nonexistent/summary.json"], "cannot read a summary"),
    ],
)
def test_unusable_input_is_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["soundness", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_summary_that_is_not_one_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps([{"examples": 3}]))
    assert main(["soundness", "--merge", str(path)]) == 2
    assert "not a soundness summary" in capsys.readouterr().err


def test_recipe_batches_are_valid_recipes_at_any_draw() -> None:
    """The campaign's batches: every recipe valid (a cache cut to 4096 rows drops a paged shape of
    the old row count), one H, scale and has_invalid per batch, at most 4096 cache rows."""
    from hypothesis import HealthCheck, given, settings

    from conformance.tools.soundness import recipe_batches

    @settings(max_examples=200, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(recipe_batches(size=4, max_total_keys=1 << 14))
    def check(batch):  # type: ignore[no-untyped-def]
        assert len({(r.heads, r.softmax_scale, r.has_invalid) for r in batch}) == 1
        assert all(r.cache_rows <= 4096 for r in batch)

    check()
