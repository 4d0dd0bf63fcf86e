"""Running a kernel on a problem and judging its output against the reference and bound.

`judge` is the one judgement every front end uses (the suite's checks, `replay`, the soundness
campaign): evaluate the reference and bound in each comparison mode, then `compare`.

`call_kernel` is the bare call of a kernel on a problem; `run_kernel` records the recipe
write-ahead, calls the kernel (always before any reference is
built, so freed memory holding a right answer cannot hide a kernel that wrote nothing) and
returns its outputs. `compare` checks the outputs against an `oracle.bound.Evaluation`:
types and shapes, identical NaN/inf positions, no all-zero output where the bound does not
admit zero, and |out - out_ref| <= out_bound, |lse - lse_ref| <= lse_bound element by element.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.durability import input_guard
from conformance.durability.device_fault import describe as describe_fault
from conformance.durability.device_fault import is_device_fault
from conformance.durability.jsonlines import append_json_lines
from conformance.durability.state import call_timeout_s, run_dir, worker_id
from conformance.durability.wal import atomic_write_text, in_flight, inflight_path
from conformance.durability.watchdog import KernelHung, limit_call
from conformance.judging import progress
from conformance.judging.finding import CONTRACT, HANG, HUNG, Finding, attach, headline_first
from kernel.record import LATENT_DIM
from oracle.accumulation import f64_scalar
from oracle.binary import finite, not_finite
from oracle.bound import MODES, Evaluation, Mode, evaluate_modes
from oracle.profiles import NumericsProfile
from strategies.materialize import Problem


class InputsModified(AssertionError):
    """The kernel wrote into q, kv_cache, indices or indptr; the message (after the finding's
    headline) names where."""

    def __init__(self, changes: list[str]) -> None:
        names = list(dict.fromkeys(m.group(1) for m in (re.match(r"the kernel wrote into (\w+)", c) for c in changes) if m))
        finding = Finding(CONTRACT, "the kernel wrote into " + " and ".join(names or ["its inputs"]), "; ".join(changes))
        super().__init__(finding.headline)
        attach(self, finding)


def call_kernel(problem: Problem, kernel: Any, *, out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Call `kernel` (a contract callable, kernel.contract) with `problem`'s arguments, with the
    problem's out= unless `out` is given; nothing else (no write-ahead record, time limit or input
    check: run_kernel adds those)."""
    target = problem.out if out is None else out
    kwargs: dict[str, Any] = {"has_invalid": problem.has_invalid, "return_lse": problem.return_lse}
    if target is not None:
        kwargs["out"] = target
    return kernel(*problem.args, **kwargs)


def run_kernel(
    problem: Problem,
    kernel: Any,
    *,
    property_name: str,
    kernel_name: str,
    out: torch.Tensor | None = None,
    expect: str = "conform",
    timeout_s: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Call `kernel` on `problem` with the recipe written ahead (see conformance.durability.wal), under the
    per-call time limit (conformance.durability.watchdog; `timeout_s`, default conformance.durability.state.call_timeout_s()),
    then check that the call left its inputs as they were (conformance.durability.input_guard).

    `expect` ("conform" or "precondition") is how a crash entry made from the write-ahead file
    will be judged when replayed. Raises watchdog.KernelHung for a call past the soft limit and
    InputsModified when the kernel wrote into an input; a call past the hard limit kills the
    process (the write-ahead file, marked hung, becomes a crash entry), and so does a device fault
    in an xdist worker (conformance.durability.device_fault: marked with the fault)."""
    limit = call_timeout_s() if timeout_s is None else timeout_s
    worker = worker_id()
    entry = {
        "recipe": problem.recipe.to_json_dict(),
        "kernel": kernel_name,
        "property": property_name,
        "expect": expect,
        "nodeid": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0] or None,
        "device": str(problem.q.device),
        "started": time.time(),
        "call_timeout_s": limit,
    }
    before = input_guard.snapshot(problem.q, problem.kv_cache, problem.indices, problem.indptr)
    folder = run_dir()

    def mark(**what: object) -> None:
        atomic_write_text(inflight_path(folder, worker), json.dumps({**entry, **what}, sort_keys=True))

    progress.tick()
    try:
        with in_flight(folder, worker, entry), limit_call(limit, lambda s: mark(hung_after_s=round(s, 1)), hard_only=worker != "main"):
            try:
                result = call_kernel(problem, kernel, out=out)
                if problem.q.is_cuda:
                    torch.cuda.synchronize(problem.q.device)
            except Exception as err:
                if worker != "main" and is_device_fault(err):
                    # the GPU context of this worker is broken: keep the record, end the worker
                    mark(device_fault=describe_fault(err))
                    os.kill(os.getpid(), signal.SIGKILL)
                raise
    except KernelHung as err:
        headline_first(err, Finding(HANG, HUNG, f"no return within {err.timeout_s:g} s"))
        raise
    changed = before.changes(problem.q, problem.kv_cache, problem.indices, problem.indptr)
    if changed:
        raise InputsModified(changed)
    if not (isinstance(result, tuple | list) and len(result) == 2):  # a bare tensor of n_q 2 would unpack silently
        shape = f" {tuple(result.shape)}" if isinstance(result, torch.Tensor) else ""
        finding = Finding(CONTRACT, "the kernel's result is not a pair of out and lse", f"it returned a {type(result).__name__}{shape}")
        raise attach(AssertionError(f"{finding.headline}\nthe contract's result is the pair (out, lse_or_None)"), finding)
    return result[0], result[1]


@dataclass
class Verdict:
    """Outcome of one comparison.

    failures: human-readable reasons (empty when ok); out_ratio / lse_ratio: max |err| / bound
    (inf where the bound is 0 and the error is not); worst: location of the worst out element.
    """

    failures: list[str] = field(default_factory=list)
    out_ratio: float = 0.0
    lse_ratio: float = 0.0
    worst: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def message(self) -> str:
        """All failures and the worst element, one per line."""
        lines = list(self.failures)
        if self.worst:
            lines.append("worst out element: " + json.dumps(self.worst, sort_keys=True))
        return "\n".join(lines)


def _ratio(err: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """err / bound where bound > 0; where it is not (0, negative or NaN), inf for err > 0, else 0
    (err, bound: float64 on one device; the constants cached there, not built per call)."""
    positive = bound > 0
    one, inf, zero = (f64_scalar(value, err.device) for value in (1.0, float("inf"), 0.0))
    return torch.where(positive, err / torch.where(positive, bound, one), torch.where(err > 0, inf, zero))


def _first(mask: torch.Tensor) -> list[int]:
    return [int(x) for x in torch.nonzero(mask)[0].tolist()]


def check_types(problem: Problem, out: object, lse: object) -> list[str]:
    """Contract checks of the returned objects (dtype, shape, device, out= identity)."""
    failures: list[str] = []
    n_q, heads = problem.q.shape[0], problem.q.shape[1]
    if not isinstance(out, torch.Tensor):
        return [f"out is {type(out).__name__}, not a tensor"]
    if out.dtype != torch.bfloat16 or tuple(out.shape) != (n_q, heads, LATENT_DIM):
        failures.append(f"out is {out.dtype} {tuple(out.shape)}, expected bfloat16 {(n_q, heads, LATENT_DIM)}")
    if out.device != problem.q.device:
        failures.append(f"out is on {out.device}, inputs on {problem.q.device}")
    if problem.out is not None and out.data_ptr() != problem.out.data_ptr():
        failures.append("out= was given but the kernel returned a different tensor")
    if problem.return_lse:
        if not isinstance(lse, torch.Tensor):
            failures.append(f"return_lse=True but lse is {type(lse).__name__}")
        elif lse.dtype != torch.float32 or tuple(lse.shape) != (n_q, heads):
            failures.append(f"lse is {lse.dtype} {tuple(lse.shape)}, expected float32 {(n_q, heads)}")
    return failures


class _Outputs:
    """The kernel's outputs widened to float64 once for every mode's comparison (types checked)."""

    def __init__(self, problem: Problem, out: torch.Tensor, lse: torch.Tensor | None):
        self.got = out.to(torch.float64)
        self.not_finite = not_finite(self.got)
        self.all_zero = (self.got == 0).all()
        self.lse = lse.to(torch.float64) if problem.return_lse and lse is not None else None


def _stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
    """[M, ...]: `tensors` (one shape) stacked on a new leading axis; without a copy where they
    are the consecutive slices of one buffer in order (evaluate_modes' results, stacked on its
    mode axis), else by torch.stack."""
    first = tensors[0]
    base = first._base
    if (
        base is not None
        and base.dim() == first.dim() + 1
        and base.shape[0] == len(tensors)
        and all(
            t._base is base
            and t.shape == base.shape[1:]
            and t.stride() == base.stride()[1:]
            and t.storage_offset() == base.storage_offset() + m * base.stride(0)
            for m, t in enumerate(tensors)
        )
    ):
        return base
    return torch.stack(tensors)


class _Measured:
    """Every mode's comparison on the device at once, each evaluation's tensors stacked on a
    leading mode axis (the same elementwise arithmetic as one mode's, each reduction per mode):
    every number a mode's verdict needs in row m of the float64 [M, F] tensor `values`
    (OUT_FIELDS, then LSE_FIELDS when lse is compared), read back in one host read; the tensors
    kept for the locations a failure message names."""

    OUT_FIELDS = ("bad", "all_zero", "ratio", "over", "worst", "got", "ref", "bound")
    LSE_FIELDS = ("wrong_empty", "not_finite", "lse_ratio", "lse_over")

    def __init__(self, outputs: _Outputs, evaluations: list[Evaluation]):
        got = outputs.got
        n_modes = len(evaluations)
        self.ref = ref = _stacked([e.out for e in evaluations]).to(got.device)
        self.bound = bound = _stacked([e.out_bound for e in evaluations]).to(got.device)
        self.bad = finite(ref).logical_and_(outputs.not_finite)
        err = torch.sub(got, ref).abs_().nan_to_num_(nan=float("inf"))
        self.ratio = ratio = _ratio(err, bound)
        self.over = ratio > 1
        columns = [self.bad.reshape(n_modes, -1).sum(1), outputs.all_zero.expand(n_modes)]
        if ratio.numel():
            per_mode = ratio.reshape(n_modes, -1)
            columns.append(per_mode.amax(1))
            columns.append(self.over.reshape(n_modes, -1).sum(1))
            worst = per_mode.nan_to_num(nan=float("inf")).argmax(1)  # the first largest of each mode, as torch.argmax
            at = worst.unsqueeze(1)
            columns += [worst, torch.take(got, worst)]
            columns += [ref.reshape(n_modes, -1).gather(1, at)[:, 0], bound.reshape(n_modes, -1).gather(1, at)[:, 0]]
        else:
            columns += [torch.zeros(n_modes, dtype=torch.float64, device=got.device)] * 6
        self.lse = outputs.lse
        if self.lse is not None:
            got_lse = self.lse
            ref_lse = _stacked([e.lse for e in evaluations]).to(got_lse.device)
            lse_bound = _stacked([e.lse_bound for e in evaluations]).to(got_lse.device)
            empty = torch.isneginf(ref_lse)
            self.wrong_empty = empty & ~torch.isneginf(got_lse)
            self.lse_not_finite = (~empty).logical_and_(not_finite(got_lse))
            device = got_lse.device
            lse_err = torch.where(empty, f64_scalar(0.0, device), (got_lse - ref_lse).abs()).nan_to_num_(nan=float("inf"))
            lse_ratio = _ratio(lse_err, torch.where(empty, f64_scalar(1.0, device), lse_bound))
            self.lse_over = lse_ratio > 1
            columns += [self.wrong_empty.reshape(n_modes, -1).sum(1), self.lse_not_finite.reshape(n_modes, -1).sum(1)]
            if lse_ratio.numel():
                columns += [lse_ratio.reshape(n_modes, -1).amax(1), self.lse_over.reshape(n_modes, -1).sum(1)]
            else:
                columns += [torch.zeros(n_modes, dtype=torch.float64, device=got.device)] * 2
        self.values = torch.stack(columns, dim=1).to(torch.float64)

    def verdict(self, values: list[float], m: int, mode: str) -> Verdict:
        """Mode m's verdict from `values` (its row of the host read); failure locations are
        read only for a failure."""
        verdict = Verdict()
        v = dict(zip(self.OUT_FIELDS + (self.LSE_FIELDS if self.lse is not None else ()), values, strict=True))
        if v["bad"]:
            verdict.failures.append(
                f"[{mode}] out has {int(v['bad'])} non-finite values where the reference is finite, first at (row, head, dim) "
                f"{_first(self.bad[m])}"
            )
        if v["all_zero"]:
            # a diagnosis beside the bound check, never a verdict of its own: an all-zero output is
            # correct when the bound admits zero everywhere (a row of underflowing weights)
            ref, bound = self.ref[m], self.bound[m]
            zero_outside = (ref != 0) & (ref.abs() > bound)
            if bool(zero_outside.any()):
                verdict.failures.append(
                    f"[{mode}] out is all zeros but the reference is not: zero lies outside the bound at "
                    f"{int(zero_outside.sum())} elements, first at (row, head, dim) {_first(zero_outside)}"
                )
        ratio = self.ratio[m]
        numel = ratio.numel()
        verdict.out_ratio = v["ratio"] if numel else 0.0
        if v["over"]:
            verdict.failures.append(
                f"[{mode}] {int(v['over'])} out elements exceed the bound (max |err|/bound = {verdict.out_ratio:.3g}), "
                f"first at (row, head, dim) {_first(self.over[m])}"
            )
        if numel:
            row, rest = divmod(int(v["worst"]), ratio.shape[1] * ratio.shape[2])
            head, dim = divmod(rest, ratio.shape[2])
            verdict.worst = {"row": row, "head": head, "dim": dim, "mode": mode, "out": v["got"], "ref": v["ref"], "bound": v["bound"]}
        if self.lse is not None:
            if v["wrong_empty"]:
                first = _first(self.wrong_empty[m])
                verdict.failures.append(
                    f"[{mode}] lse of an empty row is not -inf, first at (row, head) {first} = {float(self.lse[tuple(first)])}"
                )
            if v["not_finite"]:
                verdict.failures.append(
                    f"[{mode}] lse is not finite where the reference is, first at (row, head) {_first(self.lse_not_finite[m])}"
                )
            verdict.lse_ratio = v["lse_ratio"] if numel else 0.0
            if v["lse_over"]:
                verdict.failures.append(
                    f"[{mode}] {int(v['lse_over'])} lse values exceed the bound (max |err|/bound = {verdict.lse_ratio:.3g}), "
                    f"first at (row, head) {_first(self.lse_over[m])}"
                )
        return verdict


def _compare_modes(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, evaluations: list[Evaluation]) -> list[Verdict]:
    """compare() of the same outputs against each evaluation: the outputs widened once, every
    mode compared in one stacked pass, one host read for all."""
    failures = check_types(problem, out, lse)
    if failures:
        return [Verdict(failures=list(failures)) for _ in evaluations]
    if not evaluations:
        return []
    measured = _Measured(_Outputs(problem, out, lse), evaluations)
    values = measured.values.tolist()
    return [measured.verdict(row, m, e.mode) for m, (row, e) in enumerate(zip(values, evaluations, strict=True))]


def compare(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, evaluation: Evaluation) -> Verdict:
    """Judge kernel outputs against the reference and its a-priori bound (see module docstring).
    One host read of the numbers the verdict needs; more only to name a failure's location."""
    return _compare_modes(problem, out, lse, [evaluation])[0]


@dataclass
class Judgement:
    """Verdicts and evaluations of one kernel call, keyed by comparison mode (exact-steps first)."""

    verdicts: dict[str, Verdict]
    evaluations: dict[str, Evaluation]

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts.values())

    def messages(self) -> list[str]:
        """Each failing mode's message (failures and the worst element)."""
        return [v.message() for v in self.verdicts.values() if not v.ok]


def judge(
    problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, profile: NumericsProfile, *, modes: tuple[Mode, ...] = MODES
) -> Judgement:
    """Evaluate the reference and a-priori bound of `profile` for `problem` in each of `modes`
    and compare the kernel's outputs with each. Raises oracle.rows.PreconditionError when the
    problem breaks a precondition (no bound is promised then)."""
    evaluations = evaluate_modes(
        *problem.args,
        profile=profile,
        modes=modes,
        has_invalid=problem.has_invalid,
    )
    # compared in evaluate_modes' order, its results' mode axis (no copy: _stacked), reported exact-steps first
    compared = dict(zip(evaluations, _compare_modes(problem, out, lse, list(evaluations.values())), strict=True))
    ordered = sorted(modes, key=lambda m: m != "exact-steps")
    return Judgement(verdicts={m: compared[m] for m in ordered}, evaluations={m: evaluations[m] for m in ordered})


def record(property_name: str, kernel_name: str, problem: Problem, **fields: Any) -> None:
    """Append one example's result to this worker's JSON-lines file of the run (for reports):
    example_line(property_name, kernel_name, problem, **fields) (its keywords: outcome, out_ratio,
    lse_ratio, extra) through append_records."""
    append_records([example_line(property_name, kernel_name, problem, **fields)])


def example_line(
    property_name: str,
    kernel_name: str,
    problem: Problem,
    *,
    outcome: str,
    out_ratio: float | None = None,
    lse_ratio: float | None = None,
    extra: dict[str, Any] | None = None,
    recipe_json: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The example log's line of one result: property, kernel, outcome, the out and lse ratios
    (err / bound; lse_ratio is None when the call returned no lse), the recipe, the time (Unix
    seconds) and `extra`'s fields. `recipe_json`: problem.recipe.to_json_dict() when the caller
    has it (several lines of one problem share it: it is not modified here)."""
    if not problem.return_lse:
        lse_ratio = None
    line = {
        "property": property_name,
        "kernel": kernel_name,
        "outcome": outcome,
        "out_ratio": out_ratio,
        "lse_ratio": lse_ratio,
        "recipe": problem.recipe.to_json_dict() if recipe_json is None else recipe_json,
        "time": time.time(),
    }
    if extra:
        line.update(extra)
    return line


def append_records(lines: Sequence[dict[str, Any]]) -> None:
    """Append `lines` (example_line's) to this worker's examples-<worker>.jsonl of the run, in one
    write (conformance.durability.jsonlines)."""
    if lines:
        append_json_lines(run_dir() / f"examples-{worker_id()}.jsonl", lines)
