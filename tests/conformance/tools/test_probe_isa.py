"""The probe against `flydsl-isa` (the compiled kernel on the ISA interpreter): each setting of the
interpreter's MFMA model is recovered, and the MI355X bring-up report's parts run here.

- fp8 operand reading of the scaled MFMA (`FLYDSL_ISA_F8_LAYOUT`, kernel.isa.ops_matrix.F8_LAYOUT):
  the F1 probe answers "split" under the default and "contiguous" under the other reading;
- MFMA arithmetic (exact sum, one round-to-nearest-even per instruction): the QK cancellation
  probes answer nearest rounding and no truncation (F >= 31).

Tiny problems (one row of 64 keys; rows of two keys): the interpreter runs about 0.2 s per row.
"""

from __future__ import annotations

import pytest

pytest.importorskip("flydsl")

import kernel.isa.ops_matrix as om
from conformance.tools.probe import probes as P
from conformance.tools.probe.bringup import bringup_report, f1_probe
from conformance.tools.probe.profile import assemble, render
from conformance.tools.probe.run import ProbeReport
from kernel.registry import resolve


@pytest.mark.parametrize("layout", ["split", "contiguous"])
def test_f1_probe_recovers_the_fp8_layout(layout: str, monkeypatch) -> None:
    monkeypatch.setattr(om, "F8_LAYOUT", layout)
    verdict, diffs = f1_probe(resolve("flydsl-isa"), "cpu")
    assert verdict == layout, diffs
    assert max(diffs.values()) > 0  # the problem tells the two readings apart


def test_qk_probes_recover_the_mfma_arithmetic(monkeypatch) -> None:
    monkeypatch.setattr(om, "F8_LAYOUT", "split")
    monkeypatch.setattr(P, "QK_PLACEMENTS", ((1, 575), (3, 544)))
    monkeypatch.setattr(P, "QK_MEMBERS", (2, 31, 32, 256))
    monkeypatch.setattr(P, "FRAC_J", (23, 24, 25, 31))
    ctx = P.Context(kernel=resolve("flydsl-isa"), device="cpu", heads=1, log=lambda s: None)
    rnd, frac, mem = P.probe_qk_accumulation(ctx)
    assert rnd.decision == "nearest", rnd.lines()
    assert frac.decision == 31, frac.lines()
    assert mem.decision is None, mem.lines()  # dims 0, 1, 2..31 and 256 share MFMA j = 0, dim 32 does not: not contiguous


def test_bringup_report_parts(monkeypatch) -> None:
    monkeypatch.setattr(om, "F8_LAYOUT", "split")
    report = ProbeReport(kernel="flydsl-isa", device="cpu")
    report.text = render(assemble({}, name="probed-flydsl-isa", description="parts only"), ["test"])
    ok, text = bringup_report(resolve("flydsl-isa"), "flydsl-isa", "cpu", report, agreement_profile="none")
    assert ok
    assert "verdict: **split**" in text and "### Measured profile" in text and "not run" in text
