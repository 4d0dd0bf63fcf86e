"""Every failure the suite reports gets a kind (conformance.judging.finding), reached here by real
failing kernels: the small kernels of tests/conformance/judging/kind_kernels.py (each a float64 computation with one
bug) and the catalogue's (conformance.mutation.catalogue). A failure's message starts with its
finding's headline and carries the finding; failures of one bug share a group (kind, subject)
whatever the recipe.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from conformance.durability.state import RUN_ID_ENV
from conformance.durability.watchdog import KernelHung
from conformance.judging import checks, rejections
from conformance.judging.finding import (
    CONTRACT,
    CRASH,
    HANG,
    PRECISION,
    SUITE_ERROR,
    WRONG_RESULT,
    Finding,
    carried,
    finding_of,
    parse,
    worse,
)
from conformance.judging.harness import call_kernel
from conformance.judging.target import build_target, out_of_device_memory
from conformance.records import crashes
from conformance.records.replay import failure_signature
from strategies.materialize import materialize
from strategies.recipe import Recipe

CORPUS = Path(__file__).resolve().parents[3] / "conformance" / "corpus"
KINDS_MODULE = "tests.conformance.judging.kind_kernels"
CATALOGUE = "conformance.mutation.catalogue"
SMALL = Recipe(seed=2, n_q=4, heads=2, row_lengths=(40, 200, 7, 130), cache_rows=512)


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))  # the examples' records go here
    monkeypatch.delenv(RUN_ID_ENV, raising=False)


def _entry(name: str) -> Recipe:
    return Recipe.from_json_dict(json.loads((CORPUS / f"{name}.json").read_text())["recipe"])


def _failing(kernel: str, recipe: Recipe, **kw: object) -> tuple[Finding, str]:
    """The finding a failing differential check carries, and its message."""
    target = build_target(kernel, device="cpu")
    with pytest.raises((AssertionError, KernelHung)) as info:  # type: ignore[arg-type]
        checks.differential(target, recipe, "test", use_target=False, **kw)  # type: ignore[arg-type]
    finding = carried(info.value)
    assert finding is not None, str(info.value)
    assert str(info.value).splitlines()[0] == finding.headline, str(info.value)
    return finding, str(info.value)


CASES = [
    # (kernel, recipe, kind, subject, a phrase of the detail)
    (f"{KINDS_MODULE}:raises", SMALL, CONTRACT, "a valid call raised ValueError", "always raises"),
    (f"{KINDS_MODULE}:writes_kv_cache", SMALL, CONTRACT, "the kernel wrote into kv_cache", "at rows [0]"),
    (f"{CATALOGUE}:empty_row_lse_zero", _entry("edge-empty-row"), CONTRACT, "an empty row's lse is not -inf", "lse[0, 0] = 0.0"),
    (f"{CATALOGUE}:empty_row_nan_out", _entry("edge-all-invalid-row"), CONTRACT, "out is not finite where the reference is", "nan"),
    (
        f"{KINDS_MODULE}:wrong_block_scale",
        Recipe(seed=6, n_q=2, heads=2, row_lengths=(16, 50), cache_rows=64, latent="tiny_blocks"),
        WRONG_RESULT,
        "out outside the bound",
        "under the coarsest rounding model",
    ),
    (f"{CATALOGUE}:invalid_unmasked", _entry("edge-scattered-negative-entries"), WRONG_RESULT, "lse outside the bound", "coarsest"),
    (f"{KINDS_MODULE}:p_bf16_toward_zero", SMALL, PRECISION, "out outside the bound", "admitted once P is rounded to 16 bits toward zero"),
    (
        f"{CATALOGUE}:out_bf16_truncated",
        _entry("edge-empty-row"),
        PRECISION,
        "out outside the bound",
        "once out is converted to bf16 toward zero",
    ),
]


@pytest.mark.parametrize(("kernel", "recipe", "kind", "subject", "detail"), CASES, ids=[f"{c[2]}-{c[0].split(':')[1]}" for c in CASES])
def test_each_kind_from_a_real_failing_kernel(kernel: str, recipe: Recipe, kind: str, subject: str, detail: str) -> None:
    finding, _ = _failing(kernel, recipe)
    assert (finding.kind, finding.subject) == (kind, subject), finding
    assert detail in finding.detail, finding


def test_a_hung_call_is_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # the soft limit (an xdist worker's call ends the worker)
    finding, message = _failing(f"{KINDS_MODULE}:sleeps", SMALL, timeout_s=0.3)
    assert finding.group == (HANG, "a kernel call did not return") and finding.detail == "no return within 0.3 s"
    assert "--conformance-call-timeout" in message  # the watchdog's own words follow the headline


def test_a_recipe_that_breaks_a_precondition_is_a_suite_error() -> None:
    finding, message = _failing("emulated", dataclasses.replace(SMALL, writer="raw"))
    assert finding.group == (SUITE_ERROR, "a recipe meant to conform breaks a precondition"), message


def test_a_raise_under_a_data_precondition_violation_is_a_contract_violation() -> None:
    target = build_target(f"{KINDS_MODULE}:raises", device="cpu")
    recipe = dataclasses.replace(SMALL, corruptions=({"kind": "scale_not_pow2", "count": 3},))
    with pytest.raises(AssertionError) as info:
        checks.violation_run(target, recipe)
    finding = carried(info.value)
    assert finding is not None and finding.group == (CONTRACT, "a call violating a data precondition raised ValueError"), finding
    assert str(info.value).splitlines()[0] == finding.headline


def test_one_bug_is_one_group_across_recipes_and_kernels() -> None:
    """lse in log2 units, in a small kernel and in the catalogue's gfx950 kernel, on three recipes."""
    recipes = (SMALL, _entry("edge-softmax-peaked"), Recipe(seed=9, n_q=3, heads=4, row_lengths=(300, 129, 64), cache_rows=1024))
    groups = {_failing(f"{KINDS_MODULE}:lse_log2", r)[0].group for r in recipes}
    groups.add(_failing(f"{CATALOGUE}:lse_base2", recipes[1])[0].group)
    assert groups == {(WRONG_RESULT, "lse outside the bound")}


def test_the_examples_record_names_the_kind(tmp_path: Path) -> None:
    from conformance.durability.state import run_dir

    _failing(f"{KINDS_MODULE}:lse_log2", SMALL)
    lines = [json.loads(line) for path in run_dir().glob("examples-*.jsonl") for line in path.read_text().splitlines()]
    failing = [line for line in lines if line["outcome"] == "fail"]
    assert failing and all((line["kind"], line["subject"]) == (WRONG_RESULT, "lse outside the bound") for line in failing)
    assert not any("class" in line for line in lines)


# ---------------------------------------------------------------------------------------------
# the metamorphic properties: the worse run's kind, else the promise, else the suite's


def test_a_metamorphic_failure_takes_the_worse_runs_finding() -> None:
    from conformance.suite.test_metamorphic import _explained

    target = build_target(f"{KINDS_MODULE}:reference", device="cpu")
    problem = materialize(dataclasses.replace(SMALL, return_lse=True), "cpu")
    good = build_target(f"{KINDS_MODULE}:reference", device="cpu").backend
    bad = build_target(f"{KINDS_MODULE}:lse_log2", device="cpu").backend
    out, lse = call_kernel(problem, good)
    bad_out, bad_lse = call_kernel(problem, bad)
    found = _explained(target, [("the first run", problem, out, lse), ("the second run", problem, bad_out, bad_lse)], None)
    assert found.group == (WRONG_RESULT, "lse outside the bound") and found.detail.startswith("the second run: "), found
    promise = Finding(CONTRACT, "a row computed alone differs from the same row in a batch", "row 0")
    assert _explained(target, [("a", problem, out, lse)], promise) == promise
    assert _explained(target, [("a", problem, out, lse)], None).kind == SUITE_ERROR


def test_worse_orders_kinds_from_the_worst() -> None:
    crash, wrong, precise = Finding(CRASH, "x"), Finding(WRONG_RESULT, "y"), Finding(PRECISION, "z")
    assert worse(precise, None, wrong) == wrong and worse(wrong, crash) == crash and worse(None, None) is None


# ---------------------------------------------------------------------------------------------
# crash entries, headlines, signatures


def _inflight(run: Path, **extra: object) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    path = run / "inflight-gw0.json"
    path.write_text(json.dumps({"recipe": SMALL.to_json_dict(), "kernel": "k:x", "property": "differential", **extra}))
    return path


@pytest.mark.parametrize(("extra", "kind"), [({}, CRASH), ({"hung_after_s": 12.0, "call_timeout_s": 10}, HANG)], ids=["died", "hung"])
def test_a_crash_entry_is_a_crash_or_a_hang(tmp_path: Path, extra: dict[str, object], kind: str) -> None:
    line = crashes.record_crash(_inflight(tmp_path / "run", **extra), how="killed by SIGKILL", destination=tmp_path / "pending")
    assert line is not None and line["kind"] == kind and line["finding"]["kind"] == kind
    entry = json.loads(Path(line["entry"]).read_text())
    assert entry["provenance"]["finding"] == line["finding"]
    assert crashes.describe(line).startswith(f"{kind}: {line['finding']['subject']} (process died during the kernel call")


def test_headlines_read_back_and_signatures_keep_kind_and_subject() -> None:
    finding = Finding(WRONG_RESULT, "lse outside the bound", "lse err/bound 12.8 under the coarsest rounding model, exact-steps mode")
    assert parse(finding.headline) == finding and parse("[exact-steps] 3 out elements exceed the bound") is None
    other = Finding(WRONG_RESULT, "lse outside the bound", "lse err/bound 3.1 under the coarsest rounding model, float64 mode")
    assert failure_signature(finding.headline + "\nkernel output outside the a-priori bound:") == failure_signature(other.headline)
    assert failure_signature(finding.headline) == frozenset({"wrong result: lse outside the bound"})
    assert failure_signature(Finding(PRECISION, "lse outside the bound", "x").headline) != failure_signature(finding.headline)
    assert finding_of(ValueError("boom")).group == (SUITE_ERROR, "ValueError raised outside a judgement")
    assert finding_of(KernelHung(2.0)).group == (HANG, "a kernel call did not return")


# ---------------------------------------------------------------------------------------------
# rejected examples say why (conformance.judging.rejections)


def test_rejected_examples_note_their_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    target = build_target("emulated", device="cpu")
    problem = materialize(SMALL, "cpu")
    monkeypatch.setattr(checks, "supported", lambda target, problem: "H 2 is not one it takes")

    @settings(max_examples=3, database=None, deadline=None)
    @given(st.integers(0, 3))
    def every_draw_unsupported(_: int) -> None:
        checks.require_support(target, problem)

    @settings(max_examples=3, database=None, deadline=None)
    @given(st.integers(0, 3))
    def every_draw_out_of_memory(_: int) -> None:
        out_of_device_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))

    rejections.reset()
    with pytest.raises(Unsatisfiable):
        every_draw_unsupported()
    with pytest.raises(Unsatisfiable):
        every_draw_out_of_memory()
    counts = rejections.counts()
    assert set(counts) == {"emulated does not take the call: H 2 is not one it takes", "the device ran out of memory"}, counts
    assert all(n > 0 for n in counts.values())
    assert "x the device ran out of memory" in rejections.summary()


# ---------------------------------------------------------------------------------------------
# replay prints the kind


def test_replay_names_the_kind_once() -> None:
    from conformance.records.corpus import CorpusEntry
    from conformance.records.replay import diagnose, format_diagnosis, sandbox_state

    target = build_target(f"{CATALOGUE}:lse_base2", device="cpu")
    with sandbox_state():
        diag = diagnose(CorpusEntry(name="t", recipe=_entry("edge-softmax-peaked")), target, findings=False)
    assert diag.finding is not None and (diag.finding["kind"], diag.finding["subject"]) == (WRONG_RESULT, "lse outside the bound")
    text = format_diagnosis(diag)
    assert text.count(diag.triage) == 1 and "class" not in text
    assert diag.signature == failure_signature(diag.reasons)


def test_replay_cuts_the_caught_line_at_a_word() -> None:
    from conformance.records.corpus import CorpusEntry
    from conformance.records.replay import format_header

    caught = "wrong result: lse outside the bound " + " ".join(f"word{i:03d}" for i in range(60))
    entry = CorpusEntry(name="t", recipe=SMALL, provenance={"caught": caught + "\nkernel output outside the a-priori bound:"})
    header = format_header(entry, "entry", Path("t.json"), build_target("emulated", device="cpu"))
    line = next(line for line in header.splitlines() if line.lstrip().startswith("caught:"))
    text = line.split("caught: ", 1)[1]
    assert text.endswith("…") and len(text) <= 300
    assert text[:-1].split()[-1] in caught.split()  # the last word shown is whole
