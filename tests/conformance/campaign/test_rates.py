"""A campaign's rates: examples per wall second and per CPU second of the process, in the summary."""

from __future__ import annotations

from types import SimpleNamespace

from conformance.campaign.fuzz import Campaign, format_summary, summary_json


def test_examples_per_cpu_second_in_the_summary() -> None:
    state = Campaign(started=100.0, finished=110.0, cpu_started=3.0, cpu_finished=7.0)
    state.examples["differential"], state.seconds["differential"] = 10, 5.0
    assert state.rate() == 1.0 and state.cpu_seconds() == 4.0 and state.cpu_rate() == 2.5
    target = SimpleNamespace(name="k", profile=SimpleNamespace(name="p"), device="cpu")
    data = summary_json(state, target, budget_s=10, hypothesis_profile="ci", properties=["differential"], exit_code=0)
    assert data["cpu_s"] == 4.0 and data["examples_per_cpu_s"] == 2.5 and data["examples_per_s"] == 1.0
    assert data["summary_lines"][-1] == "CPU time: 4.0 s of this process (all threads), 2.50 examples per CPU second"
    text = format_summary(state, target, budget_s=10, hypothesis_profile="ci", report_path=None)
    assert "2.50 examples per CPU second" in text
    assert Campaign().cpu_rate() == 0.0
