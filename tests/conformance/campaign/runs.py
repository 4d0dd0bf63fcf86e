"""What the campaign tests share: a small CPU campaign (run) and its example records (records),
in a state folder of the test's own (isolate)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from conformance.campaign.fuzz import Campaign, ProgressLine, campaign
from conformance.judging.target import build_target
from kernel.writers import sglang as sglang_writer


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str) -> None:
    """State and pending folders under tmp_path, no run id, and the sglang writer off (named by `where`)."""
    from conformance.durability.state import RUN_ID_ENV

    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    monkeypatch.setattr(sglang_writer, "_probe", lambda: (None, f"sglang writer: off in {where}"))


def run(kernel: str, *, chunks: int, examples: int, properties: list[str], shrink_s: float = 1.0, **options: Any) -> tuple[Any, Campaign]:
    """A ci-profile campaign of `chunks` chunks of `examples` examples on the CPU, nothing saved;
    `options`: campaign()'s further arguments (recipes_per_example, pack)."""
    target = build_target(kernel, device="cpu")
    state = Campaign()
    campaign(
        target,
        state,
        budget_s=1e6,
        hypothesis_profile="ci",
        properties=properties,
        shrink_s=shrink_s,
        max_failures=1,
        save=False,
        progress=ProgressLine(io.StringIO()),
        chunk_examples=examples,
        max_chunks=chunks,
        **options,
    )
    return target, state


def records(tmp_path: Path) -> list[dict[str, Any]]:
    """Every example record written under tmp_path."""
    return [json.loads(line) for path in sorted(tmp_path.rglob("examples-*.jsonl")) for line in path.read_text().splitlines()]
