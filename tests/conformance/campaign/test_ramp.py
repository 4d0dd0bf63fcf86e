"""The fuzz campaign's schedule (conformance.campaign.fuzz): chunks of 25, 50, 100, ... examples up
to the Hypothesis profile's max_examples, problem sizes x4 per chunk, so that a nightly campaign
draws its largest problems within its first few hundred examples; the ci profile's campaign stays
reproducible. The kernel calls are stubbed (every example passes at once): what is checked is
what the campaign draws and counts, bounded by its examples (--max-chunks), never by the clock."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import pytest
import torch

from conformance.campaign import fuzz
from conformance.campaign.fuzz import PROPERTIES, Campaign, ProgressLine, campaign, chunk_size, summary_json
from kernel.writers import sglang as sglang_writer


@pytest.fixture(autouse=True)
def _no_engine_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same draws on every machine: the sglang writer (drawn only where it runs) is absent."""
    monkeypatch.setattr(sglang_writer, "_probe", lambda: (None, "sglang writer: off in tests/conformance/campaign/test_ramp.py"))


class Recorder:
    """The campaign under way and the (chunk number from 1, recipe) of each example it judged."""

    def __init__(self) -> None:
        self.state = Campaign()
        self.seen: list[tuple[int, Any]] = []

    def judge(self, target: Any, recipe: Any, name: str, **kwargs: Any) -> list[Any]:
        self.seen.append((self.state.chunks, recipe))
        return []  # a passing differential example (no verdicts to record) / an observed violation

    def run(self, target: Any, profile: str, **kwargs: Any) -> Campaign:
        """A campaign whose budget never binds: it ends after its chunks (max_chunks)."""
        self.state, self.seen = Campaign(), []
        return campaign(
            target,
            self.state,
            budget_s=1e6,
            hypothesis_profile=profile,
            properties=list(PROPERTIES),
            shrink_s=1.0,
            max_failures=1,
            save=False,
            progress=ProgressLine(io.StringIO()),
            **kwargs,
        )


@pytest.fixture()
def recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Recorder:
    """The kernel calls stubbed (conformance.judging.checks.differential / violation_run)."""
    from conformance.judging import checks

    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))
    made = Recorder()
    monkeypatch.setattr(checks, "differential", made.judge)
    monkeypatch.setattr(checks, "violation_run", made.judge)
    return made


@pytest.fixture(scope="module")
def emulated() -> Any:
    from conformance.judging.target import build_target

    return build_target("emulated", device="cpu")


def test_chunk_schedule() -> None:
    assert [chunk_size(k, 1000) for k in range(8)] == [25, 50, 100, 200, 400, 800, 1000, 1000]  # nightly
    assert [chunk_size(k, 25) for k in range(4)] == [25, 25, 25, 25]  # ci: the fixed chunks of before
    assert [chunk_size(k, 40) for k in range(3)] == [25, 40, 40]  # dev
    assert [chunk_size(k, 1000, 3) for k in range(3)] == [3, 3, 3]  # --chunk-examples: every chunk
    assert chunk_size(10_000, 1000) == 1000


def _largest(recipe: Any) -> int:
    return max((x for x in recipe.row_lengths), default=0)


@pytest.mark.parametrize(("device", "full_from"), [("cpu", 2), ("cuda", 4)])
def test_full_sizes_from_the_few_hundredth_example(emulated: Any, device: str, full_from: int) -> None:
    """Chunk `full_from` (from 0) is the first whose strategies are the full-size ones (those of
    the coverage denominators); a nightly campaign starts it after 75 (CPU) / 375 (GPU) examples."""
    from conformance.campaign.fuzz import _fuzz_parameters

    target = emulated if device == "cpu" else dataclasses.replace(emulated, device=torch.device("cuda"))
    full = _fuzz_parameters(target, list(PROPERTIES))
    assert [_fuzz_parameters(target, list(PROPERTIES), k) == full for k in range(full_from + 2)] == [False] * full_from + [True] * 2
    assert sum(chunk_size(k, 1000) for k in range(full_from)) == {"cpu": 75, "cuda": 375}[device]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_nightly_campaign_draws_the_largest_sizes_within_its_first_examples(
    recorder: Recorder, emulated: Any, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a GPU's limits, rows of >= 8192 keys and 65-256 query rows are drawn within the first
    four chunks of a nightly campaign (25 + 50 + 100 + 200 examples), where chunks of the
    profile's 1000 examples each drew none before example 2000 (the first two chunks' caps: 1024
    and 4096 keys, 16 and 64 query rows). With a CPU's (8192 keys, 64 query rows), rows of
    2048-8191 keys within the first three (175 examples; a row of 8192 there needs the call's
    other rows empty: a few in a thousand examples). The GPU's limits come from a target that says
    it is on cuda: nothing runs there (the calls are stubbed)."""
    target = emulated if device == "cpu" else dataclasses.replace(emulated, device=torch.device("cuda"))
    monkeypatch.setattr(fuzz, "chunk_seed", lambda profile, chunk: 1000 + chunk)  # fixed seeds: a reproducible test
    chunks = 3 if device == "cpu" else 4
    state = recorder.run(target, "nightly", max_chunks=chunks)
    seen = recorder.seen
    assert state.chunk_examples == [25, 50, 100, 200][:chunks] and state.seeds == list(range(1000, 1000 + chunks))
    total = sum(state.chunk_examples)
    assert sum(state.examples.values()) == len(seen) == total  # bounded by its examples
    data = summary_json(state, target, budget_s=1e6, hypothesis_profile="nightly", properties=list(PROPERTIES), exit_code=0)
    assert data["chunk_examples"] == state.chunk_examples
    features = data["features"]
    # the ramp holds: chunk k (from 1) draws at most RAMP_KEYS * 4^(k-1) keys per call (a
    # violating recipe's empty rows get 1 key each: + n_q)
    assert all(sum(max(x, 0) for x in r.row_lengths) <= fuzz.RAMP_KEYS * 4 ** (k - 1) + r.n_q for k, r in seen)
    largest = "2048-8191" if device == "cpu" else ">=8192"
    assert features["row_length"]["counts"][largest] > 0 and largest not in features["row_length"]["never_hit"]
    if device == "cuda":
        assert features["n_q"]["counts"]["65-256"] > 0 and features["n_q"]["never_hit"] == []
        assert all(r.n_q <= 64 for k, r in seen if k < 3)  # the ramp: 65-256 only from the third chunk
    else:
        assert "65-256" not in features["n_q"]["counts"]  # a CPU's limit: 64 query rows


def test_ci_campaign_is_reproducible(recorder: Recorder, emulated: Any) -> None:
    """The ci profile: seeds 0, 1, 2, ..., chunks of 25 from the first, the same recipes in the
    same order in every run; --chunk-examples / --max-chunks bound a campaign by its examples."""
    first = recorder.run(emulated, "ci", max_chunks=3)
    seen_first = recorder.seen
    assert first.seeds == [0, 1, 2] and first.chunk_examples == [25, 25, 25]
    assert sum(first.examples.values()) == 75
    second = recorder.run(emulated, "ci", max_chunks=3)
    seen_second = recorder.seen
    assert second.seeds == first.seeds
    assert [(k, r.to_json_dict()) for k, r in seen_second] == [(k, r.to_json_dict()) for k, r in seen_first]
    fixed = recorder.run(emulated, "nightly", max_chunks=2, chunk_examples=3)
    assert fixed.chunk_examples == [3, 3] and len(recorder.seen) == sum(fixed.examples.values()) == 6
