"""The checks the properties share: the differential judgement and the precondition-violation run.

A failed check raises AssertionError explicitly, never through an `assert` statement: pytest
rewrites the asserts of an installed plugin's distribution, and the added introspection would
change the message that failure signatures, corpus entries and reports are built from. Every
failure carries its finding (conformance.judging.finding) and its message starts with the
finding's headline. An example that cannot be judged here (the backend does not take it, it does
not fit this machine) is rejected inside a Hypothesis property with its reason noted
(conformance.judging.rejections), and skipped elsewhere.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
import torch
from hypothesis import event, reject
from hypothesis import target as hypothesis_target
from hypothesis.control import currently_in_test_context

from conformance.judging import rejections
from conformance.judging.finding import CONTRACT, SUITE_ERROR, Finding, failure
from conformance.judging.harness import Judgement, Verdict, append_records, check_types, example_line, judge, record, run_kernel
from conformance.judging.target import Target, judges, out_of_device_memory
from conformance.judging.triage import triage
from oracle.bound import Evaluation
from oracle.preconditions import check_call, has_violation
from oracle.rows import PreconditionError
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe, RecipeTooLarge


def size_limits(target: Target) -> dict[str, int]:
    """Problem sizes for the general properties: modest on a CPU, larger on a GPU."""
    if target.device.type == "cpu":
        return {"max_n_q": 64, "max_total_keys": 8192}
    return {"max_n_q": 256, "max_total_keys": 1 << 17}


def backend_limits(target: Target) -> dict[str, Any]:
    """Recipe restrictions the backend declares (head counts, out=)."""
    return {"heads": target.backend.head_counts, "max_heads": target.backend.max_heads, "allow_out": target.backend.accepts_out}


def materialize_for(target: Target, recipe: Recipe) -> Problem:
    """The recipe's problem on the target's device. A recipe the memory guard refuses
    (strategies.materialize.check_memory) is rejected inside a Hypothesis property (the reason
    noted) and skips the test elsewhere: a machine too small for a recipe says nothing about the
    kernel."""
    try:
        return materialize(recipe, target.device)
    except RecipeTooLarge as err:
        if currently_in_test_context():
            rejections.note("the recipe is too large for this machine's memory (strategies.materialize.check_memory)")
            reject()
        pytest.skip(f"not run here: {err}")


def require_support(target: Target, problem: Problem) -> None:
    """Reject a problem the backend declares it does not take (a Hypothesis rejection inside a
    property, a pytest skip with the reason elsewhere)."""
    reason = supported(target, problem)
    if reason:
        if currently_in_test_context():
            rejections.note(f"{target.name} does not take the call: {reason}")
            reject()
        pytest.skip(f"{target.name} does not take this call: {reason}")


def supported(target: Target, problem: Problem) -> str:
    """Empty when the backend takes this call, else the reason it does not."""
    support = target.backend.supports(
        *problem.args,
        **problem.options,
    )
    return "" if support.ok else support.reason


@judges()
def differential(
    target: Target, recipe: Recipe, property_name: str = "differential", *, use_target: bool = True, timeout_s: float | None = None
) -> list[Verdict]:
    """Run the kernel, then judge it against the reference in both comparison modes; raise
    AssertionError with every failure. Returns the verdicts (exact-steps first). `timeout_s`:
    the per-call limit (conformance.judging.harness.run_kernel; None: its default)."""
    __tracebackhide__ = _verdict_only  # pytest: a verdict is shown at the property's call, not in here
    problem = materialize_for(target, recipe)
    require_support(target, problem)
    out, lse = run_valid_call(target, problem, property_name, timeout_s=timeout_s)
    check_returned_types(target, problem, out, lse, property_name)
    return judge_call(target, problem, out, lse, property_name, use_target=use_target)


def check_returned_types(target: Target, problem: Problem, out: object, lse: object, property_name: str) -> None:
    """check_types on a call's returned objects: a broken contract is recorded and raised
    (AssertionError carrying its finding; the same in every mode, not a matter of the bound)."""
    __tracebackhide__ = _verdict_only
    broken = check_types(problem, out, lse)
    if broken:
        finding = Finding(CONTRACT, type_subject(broken), "; ".join(broken))
        record(property_name, target.name, problem, outcome="fail", extra={"mode": "contract", **finding_fields(finding)})
        raise failure(finding)


def target_values(calls: list[dict[str, Verdict]]) -> dict[str, float]:
    """What target_ratios hands hypothesis.target(), by label: each output's err / bound per mode
    (each call's verdicts by mode), the largest finite value over the calls of one example."""
    best: dict[str, float] = {}
    for verdicts in calls:
        for mode, verdict in verdicts.items():
            for label, value in ((f"out/{mode}", verdict.out_ratio), (f"lse/{mode}", verdict.lse_ratio)):
                if math.isfinite(value):
                    best[label] = max(best.get(label, value), value)
    return best


def target_ratios(calls: list[dict[str, Verdict]]) -> None:
    """hypothesis.target() of each output's err / bound per mode (target_values; Hypothesis takes
    one value per label and test case)."""
    replay_targets(target_values(calls))


def replay_targets(values: dict[str, float]) -> None:
    """hypothesis.target() of each label's value (as target_values gave them)."""
    for label, value in values.items():
        hypothesis_target(value, label=label)


def judge_call(
    target: Target,
    problem: Problem,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    property_name: str,
    judgement: Judgement | None = None,
    *,
    use_target: bool = False,
) -> list[Verdict]:
    """Judge one call's outputs (types already checked) against the reference and bound in both
    modes, record each mode's outcome and raise AssertionError with the triaged finding when a
    mode fails; returns the verdicts (exact-steps first). `judgement`: the call's passing
    judgement when already computed with other calls' (conformance.judging.many.judge_many);
    None: judge() here. `use_target`: hypothesis.target() of its err / bound (target_ratios)."""
    __tracebackhide__ = _verdict_only
    try:
        if judgement is None:
            judgement = judge(problem, out, lse, target.profile)
        triaged = None if judgement.ok else triage(problem, out, lse, target.profile, judgement)
    except torch.OutOfMemoryError:  # device memory: judges()' affair
        raise
    except PreconditionError as err:
        raise failure(Finding(SUITE_ERROR, "a recipe meant to conform breaks a precondition", str(err)[:300])) from err
    except Exception as err:  # the suite's own judgement failed, not the kernel
        raise failure(Finding(SUITE_ERROR, f"the judgement raised {type(err).__name__}", str(err)[:300])) from err
    if use_target:
        target_ratios([judgement.verdicts])
    record_verdicts(property_name, target.name, problem, judgement.verdicts, None if triaged is None else triaged.finding)
    if triaged is not None:
        raise failure(triaged.finding, "kernel output outside the a-priori bound:\n" + "\n".join(failure_lines(judgement, lse)))
    return list(judgement.verdicts.values())


def record_verdicts(
    property_name: str,
    kernel_name: str,
    problem: Problem,
    verdicts: dict[str, Verdict],
    finding: Finding | None,
    extra: dict[str, Any] | None = None,
) -> None:
    """The example log's lines of one judged call, one per mode in `verdicts`' order, in one
    append: pass or fail, the mode, a failing mode's `finding` fields, and `extra`'s fields."""
    recipe_json = problem.recipe.to_json_dict()  # one per call: every mode's line holds it
    lines = []
    for mode, verdict in verdicts.items():
        fields: dict[str, Any] = {"mode": mode, **(extra or {})}
        if finding is not None and not verdict.ok:
            fields.update(finding_fields(finding))
        lines.append(
            example_line(
                property_name,
                kernel_name,
                problem,
                outcome="pass" if verdict.ok else "fail",
                out_ratio=verdict.out_ratio,
                lse_ratio=verdict.lse_ratio,
                extra=fields,
                recipe_json=recipe_json,
            )
        )
    append_records(lines)


def finding_fields(finding: Finding) -> dict[str, str]:
    """The fields of an example's record (conformance.judging.harness.record) that name its finding."""
    return {"kind": finding.kind, "subject": finding.subject}


def run_valid_call(
    target: Target,
    problem: Problem,
    property_name: str,
    *,
    out: torch.Tensor | None = None,
    expect: str = "conform",
    timeout_s: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """run_kernel on a call that meets the contract's preconditions: a kernel that raises breaks
    the contract whatever the exception (AssertionError naming the exception type, the kernel's
    exception as its cause); running out of device memory drops the example
    (conformance.judging.target.out_of_device_memory). Inputs written, a result that is not a
    pair and a hung call raise as run_kernel raises them, each carrying its finding. `expect`: how
    a crash entry made from this call is judged on replay (run_kernel's)."""
    try:
        return run_kernel(
            problem, target.backend, property_name=property_name, kernel_name=target.name, out=out, expect=expect, timeout_s=timeout_s
        )
    except AssertionError:  # run_kernel's own findings (inputs written, not a pair)
        raise
    except torch.OutOfMemoryError as err:
        out_of_device_memory(err)
        raise  # not reached
    except Exception as err:
        finding = Finding(CONTRACT, f"a valid call raised {type(err).__name__}", _one_line(str(err), 300))
        record(property_name, target.name, problem, outcome="fail", extra={"mode": "contract", **finding_fields(finding)})
        raise failure(finding) from err


def _one_line(text: str, limit: int) -> str:
    """`text` on one line, cut at a word boundary with an ellipsis past `limit` characters."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1].rsplit(" ", 1)[0] if " " in line[: limit - 1] else line[: limit - 1]
    return cut + "…"


#: the subject of each contract check of the returned objects (conformance.judging.harness.check_types), by message start
_TYPE_SUBJECTS = (
    ("out is on ", "out is not on the inputs' device"),
    ("out= was given", "out= was given but another tensor was returned"),
    ("return_lse=True but lse is", "lse is missing though return_lse is set"),
    ("lse is ", "lse is not float32 of the contract's shape"),
)


def type_subject(broken: list[str]) -> str:
    """The subject (no numbers) of check_types' failures, in their order."""
    subjects = []
    for message in broken:
        if message.startswith("out is ") and message.rstrip().endswith("not a tensor"):
            subject = "out is not a tensor"
        elif message.startswith("out is ") and "expected bfloat16" in message:
            subject = "out is not bfloat16 of the contract's shape"
        else:
            subject = next((s for start, s in _TYPE_SUBJECTS if message.startswith(start)), "the returned objects break the contract")
        if subject not in subjects:
            subjects.append(subject)
    return "; ".join(subjects)


def _verdict_only(info: pytest.ExceptionInfo[BaseException]) -> bool:
    """pytest's traceback filter: hide the check's frame for a verdict (AssertionError) only."""
    return info.errisinstance(AssertionError)


def failure_lines(judgement: Judgement, lse: torch.Tensor | None) -> list[str]:
    """Per failing mode: its failures, then the worst out element when an out check failed and
    the worst lse value when an lse check failed (never an out element for an lse failure)."""
    lines: list[str] = []
    for mode, verdict in judgement.verdicts.items():
        if verdict.ok:
            continue
        lines += verdict.failures
        if verdict.worst and any(_about(f, mode, "out") for f in verdict.failures):
            lines.append("worst out element: " + json.dumps(verdict.worst, sort_keys=True))
        if lse is not None and any(_about(f, mode, "lse") for f in verdict.failures):
            lines.append("worst lse value: " + json.dumps(_worst_lse(lse, judgement.evaluations[mode]), sort_keys=True))
    return lines


def _about(failure: str, mode: str, output: str) -> bool:
    """Whether a failure line of conformance.judging.harness.compare is about `output` ("out" or "lse")."""
    return re.match(rf"\[{re.escape(mode)}\] (\d+ )?{output}\b", failure) is not None


def _worst_lse(lse: torch.Tensor, evaluation: Evaluation) -> dict[str, Any]:
    """(row, head), kernel lse, reference and bound where |lse - ref| / bound is largest (rows whose
    reference is -inf count as infinitely bad when the kernel's value is not -inf)."""
    got = lse.to(torch.float64).cpu()
    ref, bound = evaluation.lse.to(torch.float64).cpu(), evaluation.lse_bound.to(torch.float64).cpu()
    empty = torch.isneginf(ref)
    ratio = torch.where(empty, torch.where(torch.isneginf(got), 0.0, float("inf")), (got - ref).abs() / bound.clamp_min(1e-300))
    flat = int(torch.argmax(ratio.nan_to_num(nan=float("inf"))))
    row, head = divmod(flat, ratio.shape[1])
    return {"row": row, "head": head, "lse": float(got[row, head]), "ref": float(ref[row, head]), "bound": float(bound[row, head])}


@judges(expect="precondition")
def violation_run(
    target: Target,
    recipe: Recipe,
    property_name: str = "preconditions",
    *,
    problem: Problem | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run a precondition-violating recipe where it is safe and return what was observed.

    Safe: never an out-of-range index on a backend whose index reads can fault. Only what the
    contract still promises fails: the call must not raise for a violated data precondition
    (an out-of-range index may raise on a backend with bounded reads), and under a scale above
    2^7 or a non-power-of-two scale the output must stay finite (the kernel clamps / drops the
    mantissa, it does not overflow). `problem`: the recipe already materialized on the target's
    device (not built again); `timeout_s`: the per-call limit (as for `differential`).
    A recipe that violates nothing is no evidence against the kernel: under Hypothesis the example
    is rejected (an `event` names it); outside Hypothesis (a stored entry) AssertionError.
    """
    if problem is None:
        problem = materialize_for(target, recipe)
    require_support(target, problem)
    findings = check_call(
        problem.q, problem.kv_cache, problem.indices, problem.indptr, has_invalid=problem.has_invalid, softmax_scale=problem.softmax_scale
    )
    kinds = sorted({f.kind for f in findings if f.severity == "violation"})
    if not has_violation(findings):
        # the recipe is not evidence against the kernel: under Hypothesis (a strategy's draw) the
        # example is rejected and counted as an event; a stored entry (replay, corpus) is wrong
        if currently_in_test_context():
            event("violating recipe without a violation (rejected)")
            rejections.note("a recipe meant to violate a precondition reports none")
            reject()
        raise failure(Finding(SUITE_ERROR, "a recipe meant to violate a precondition reports none", recipe.to_json()))
    observed: dict[str, Any] = {"kinds": kinds}
    if "index_out_of_range" in kinds and not target.backend.bounded_index_reads:
        observed["behaviour"] = "not run: out-of-range index on a backend whose reads can fault"
        record(property_name, target.name, problem, outcome="skipped", extra={"observed": observed})
        return observed
    try:
        out, lse = run_kernel(
            problem, target.backend, property_name=property_name, kernel_name=target.name, expect="precondition", timeout_s=timeout_s
        )
    except (torch.OutOfMemoryError, AssertionError):  # device memory: judges()' affair; run_kernel's findings (inputs written)
        raise
    except Exception as err:  # noqa: BLE001 - the behaviour under a violation is what we record
        observed["behaviour"] = f"raised {type(err).__name__}: {str(err)[:200]}"
        record(property_name, target.name, problem, outcome="raised", extra={"observed": observed})
        if "index_out_of_range" in kinds:
            return observed
        finding = Finding(CONTRACT, f"a call violating a data precondition raised {type(err).__name__}", f"violated: {', '.join(kinds)}")
        raise failure(finding, f"the kernel must return under {kinds}, not raise: {_one_line(repr(err), 300)}") from err
    non_finite = int(torch.isfinite(out.to(torch.float32)).logical_not_().sum())  # the one host read
    observed["non_finite_out"] = non_finite
    observed["behaviour"] = "returned" + ("" if non_finite == 0 else f" with {non_finite} non-finite outputs")
    record(property_name, target.name, problem, outcome="observed", extra={"observed": observed})
    promised_finite = {"scale_above_cap", "scale_not_pow2"}
    if set(kinds) <= promised_finite and non_finite:
        finding = Finding(
            CONTRACT, "out is not finite under a scale the kernel clamps", f"{non_finite} non-finite values under {', '.join(kinds)}"
        )
        raise failure(finding, f"under {kinds} the output must stay finite (the kernel clamps the scale / drops its mantissa)")
    return observed
