"""Replaying one corpus entry or recipe against a kernel, with a diagnosis (library of `replay`,
`corpus minimise` and `fuzz`).

`load_replayable` reads an entry or bare recipe file; `diagnose` runs the kernel (write-ahead,
in the current state folder) and judges it as the suite does (conformance.judging.harness.judge for
"conform" entries, conformance.judging.checks.violation_run for "precondition" entries), with the
precondition findings of the call; `run_isolated` replays in a child process so that a crash
or a hang becomes a diagnosis; `format_*` render it. See conformance.cli.replay for the
command and its exit codes.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.durability.state import CORPUS_DIR, RUN_ID_ENV, STATE_DIR_ENV, pending_dir, scrubbed_env
from conformance.records.crashes import infer_expect

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOP = 5
DEFAULT_ISOLATE_TIMEOUT_S = 600.0
ISOLATED_CHILD_ENV = "CONFORMANCE_REPLAY_CHILD"  # set for the child of --isolate: its state folder is the parent's


class ReplayInputError(ValueError):
    """A file that cannot be replayed; the message names the file and the problem."""


# ---------------------------------------------------------------------------------------------
# Loading


def load_replayable(path: Path, *, expect: str | None = None) -> tuple[Any, str]:
    """(CorpusEntry, kind) from an entry file or a bare recipe file; kind is "entry" or
    "recipe". ReplayInputError naming the file on any problem."""
    from conformance.records.corpus import CorpusEntry, CorpusError, parse_entry
    from strategies.recipe import Recipe, RecipeError

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReplayInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ReplayInputError(f"{path}: is a folder, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ReplayInputError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReplayInputError(f"{path}: not valid JSON ({err})") from None
    if isinstance(data, dict) and "recipe" in data:
        if expect is not None and "expect" not in data:  # --expect supplies what the entry lacks
            text = json.dumps({**data, "expect": expect})
        try:
            entry = parse_entry(text, str(path))
        except CorpusError as err:
            raise ReplayInputError(str(err)) from None
        kind = "entry"
    elif isinstance(data, dict):
        try:
            recipe = Recipe.from_json_dict(data)
        except RecipeError as err:
            raise ReplayInputError(f"{path}: neither a corpus entry (no 'recipe' field) nor a valid recipe: {err}") from None
        entry = CorpusEntry(name=path.stem, recipe=recipe, expect=infer_expect(recipe.to_json_dict()), provenance={})
        kind = "recipe"
    else:
        raise ReplayInputError(f"{path}: a corpus entry or recipe must be a JSON object, got {type(data).__name__}")
    if expect is not None:
        entry = CorpusEntry(name=entry.name, recipe=entry.recipe, expect=expect, provenance=entry.provenance)
    return entry, kind


def entry_status(path: Path) -> str:
    """ "pending", "reviewed" or "file" (outside the corpus) for an entry's path."""
    resolved = path.resolve()
    if resolved.parent == pending_dir().resolve():
        return "pending"
    if resolved.parent == CORPUS_DIR.resolve():
        return "reviewed"
    return "file"


# ---------------------------------------------------------------------------------------------
# Diagnosis


def _num(x: float) -> float | str:
    """A float for strict JSON (inf / nan as strings)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


@dataclass
class Diagnosis:
    """The outcome of one replay.

    outcome: "pass" (conforms / promises hold), "fail", "skip" (the kernel does not take the
    call), "crash" (the process died or hung in isolation); reasons: why it failed or was
    skipped, one message each; comparisons: per (mode, output) statistics (errors and bounds in
    the output's units: out values, lse in natural-log units); findings: precondition findings as
    dicts; holds: precondition kinds not found; observed: the behaviour of a precondition run;
    crash: what the dead process had in flight; finding: the failure's kind, subject and detail
    (conformance.judging.finding, as a dict), triage: its headline."""

    name: str
    expect: str
    kernel: str
    profile: str
    device: str
    outcome: str = "pass"
    reasons: list[str] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)
    findings_error: str | None = None
    observed: dict[str, Any] | None = None
    crash: dict[str, Any] | None = None
    finding: dict[str, str] | None = None
    triage: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_FAIL if self.outcome in ("fail", "crash") else EXIT_OK

    @property
    def signature(self) -> frozenset[str]:
        """How it fails, independent of the numbers (used to shrink "failing the same way")."""
        if self.outcome == "crash":
            return frozenset({f"crash: {self.crash.get('kind', 'died') if self.crash else 'died'}"})
        if self.outcome == "skip":
            return frozenset({"skip"})
        if self.outcome == "pass":
            return frozenset()
        return failure_signature(self.reasons)

    def to_json_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["signature"] = sorted(self.signature)
        data["exit_code"] = self.exit_code
        return data

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Diagnosis:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\binf\b|\bnan\b", re.IGNORECASE)
_LIST = re.compile(r"\[[#,\s]*\]")


def failure_signature(messages: list[str] | str) -> frozenset[str]:
    """Failure messages with every number (and list of numbers) replaced by '#', one item per
    line; the 'worst out element' line is dropped (it is not a failure, only a location), and a
    finding's headline ("wrong result: lse outside the bound (...)", conformance.judging.finding)
    counts by its kind and subject alone (its detail holds the numbers and the step)."""
    from conformance.judging.finding import parse

    if isinstance(messages, str):
        messages = [messages]
    items: set[str] = set()
    for message in messages:
        for line in str(message).splitlines():
            line = line.strip()
            if not line or line.startswith(("worst out element", "kernel output outside the a-priori bound")):
                continue
            finding = parse(line)
            if finding is not None:
                items.add(f"{finding.kind}: {finding.subject}")  # the kind and subject, not the detail's numbers
                continue
            items.add(_LIST.sub("[#]", _NUMBER.sub("#", line))[:300])
    return frozenset(items)


def _ratio(err: Any, bound: Any) -> Any:
    import torch

    return torch.where(bound > 0, err / torch.where(bound > 0, bound, 1.0), torch.where(err > 0, float("inf"), 0.0))


def _top_groups(over: Any, ratio: Any, dim_names: tuple[str, ...], axis: int, top: int) -> list[dict[str, Any]]:
    import torch

    reduce = tuple(d for d in range(over.dim()) if d != axis)
    counts = over.sum(dim=reduce) if reduce else over.long()
    masked = torch.where(over, ratio, torch.zeros_like(ratio))
    worst = masked.amax(dim=reduce) if reduce else masked
    order = torch.argsort(worst, descending=True)
    groups = []
    for i in order.tolist()[:top]:
        if int(counts[i]) == 0:
            break
        groups.append({dim_names[axis]: i, "exceeding": int(counts[i]), "max_ratio": _num(float(worst[i]))})
    return groups


def comparison_details(output: str, got: Any, ref: Any, bound: Any, *, mode: str, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """Statistics of one output in one mode: max |err|, worst err / bound and where, elements
    over the bound, and (when any) the top elements and rows / heads / dims that exceed.

    out: f64 tensors [n_q, H, 512]; lse: [n_q, H] (rows whose reference is -inf must be -inf)."""
    import torch

    got = got.to(torch.float64).cpu()
    ref = ref.to(torch.float64).cpu()
    bound = bound.to(torch.float64).cpu()
    if output == "lse":
        empty = torch.isneginf(ref)
        err = torch.where(empty, torch.where(torch.isneginf(got), 0.0, float("inf")), (got - ref).abs())
        bound = torch.where(empty, torch.ones_like(bound), bound)
        names: tuple[str, ...] = ("row", "head")
    else:
        err = (got - ref).abs()
        names = ("row", "head", "dim")
    err = err.nan_to_num(nan=float("inf"))
    ratio = _ratio(err, bound)
    stats: dict[str, Any] = {"mode": mode, "output": output, "elements": int(ratio.numel()), "exceeding": 0}
    if ratio.numel() == 0:
        return stats
    flat = int(torch.argmax(ratio))
    at = [int(x) for x in torch.unravel_index(torch.tensor(flat), ratio.shape)]
    finite_err = err[torch.isfinite(err)]
    stats.update(
        {
            "max_err": _num(float(err.max())),
            "max_finite_err": _num(float(finite_err.max())) if finite_err.numel() else None,
            "max_bound": _num(float(bound.max())),
            "worst_ratio": _num(float(ratio.reshape(-1)[flat])),
            "worst_at": dict(zip(names, at, strict=True)),
            "worst": {
                "got": _num(float(got.reshape(-1)[flat])),
                "ref": _num(float(ref.reshape(-1)[flat])),
                "err": _num(float(err.reshape(-1)[flat])),
                "bound": _num(float(bound.reshape(-1)[flat])),
            },
        }
    )
    over = ratio > 1
    n_over = int(over.sum())
    stats["exceeding"] = n_over
    if n_over:
        values, idx = torch.topk(torch.where(over, ratio, torch.zeros_like(ratio)).reshape(-1), min(top, n_over))
        elements = []
        for value, i in zip(values.tolist(), idx.tolist(), strict=True):
            where = [int(x) for x in torch.unravel_index(torch.tensor(i), ratio.shape)]
            elements.append(
                {
                    **dict(zip(names, where, strict=True)),
                    "got": _num(float(got.reshape(-1)[i])),
                    "ref": _num(float(ref.reshape(-1)[i])),
                    "err": _num(float(err.reshape(-1)[i])),
                    "bound": _num(float(bound.reshape(-1)[i])),
                    "ratio": _num(float(value)),
                }
            )
        stats["top_elements"] = elements
        stats["by"] = {names[axis]: _top_groups(over, ratio, names, axis, top) for axis in range(len(names))}
    return stats


def _findings(problem: Any) -> tuple[list[dict[str, Any]], list[str], str | None]:
    from kernel.contract import ContractError
    from oracle.preconditions import KINDS, check_call

    try:
        found = check_call(
            problem.q,
            problem.kv_cache,
            problem.indices,
            problem.indptr,
            has_invalid=problem.has_invalid,
            softmax_scale=problem.softmax_scale,
        )
    except ContractError as err:
        return [], [], f"the call breaks the contract: {err}"
    kinds = {f.kind for f in found}
    return [f.to_dict() for f in found], [k for k in KINDS if k not in kinds], None


def diagnose(entry: Any, target: Any, *, top: int = DEFAULT_TOP, findings: bool = True) -> Diagnosis:
    """Replay `entry` (a CorpusEntry) against `target` (conformance.judging.target.Target) and
    diagnose it (see the module docstring). The kernel runs through conformance.judging.harness.run_kernel
    (write-ahead) in the current state folder."""
    import pytest
    import torch

    from conformance.durability.watchdog import KernelHung
    from conformance.judging.checks import supported, violation_run
    from conformance.judging.finding import CONTRACT, SUITE_ERROR, Finding, finding_of
    from conformance.judging.harness import judge, run_kernel
    from conformance.judging.triage import triage
    from oracle.rows import PreconditionError
    from strategies.materialize import materialize

    diag = Diagnosis(name=entry.name, expect=entry.expect, kernel=target.name, profile=target.profile.name, device=str(target.device))
    problem = materialize(entry.recipe, target.device)
    reason = supported(target, problem)
    if reason:
        diag.outcome = "skip"
        diag.reasons.append(f"{target.name} does not take this call: {reason}")
        return diag
    if findings:
        diag.findings, diag.holds, diag.findings_error = _findings(problem)
    property_name = f"replay:{entry.name}"
    if entry.expect == "precondition":
        try:
            diag.observed = violation_run(target, entry.recipe, property_name=property_name, problem=problem)
        except pytest.skip.Exception as err:
            diag.outcome, diag.reasons = "skip", [str(err.msg)]
        except (AssertionError, KernelHung) as err:
            diag.outcome, diag.reasons = "fail", [str(err)]
            _set_finding(diag, finding_of(err))
        return diag
    try:
        out, lse = run_kernel(problem, target.backend, property_name=property_name, kernel_name=target.name)
    except (KernelHung, AssertionError) as err:  # a hung call, inputs written, a result that is not a pair: each carries its finding
        diag.outcome = "fail"
        diag.reasons.append(str(err))
        _set_finding(diag, finding_of(err))
        return diag
    except Exception as err:  # noqa: BLE001 - a raising kernel is a diagnosis, not a crash of replay
        diag.outcome = "fail"
        diag.reasons.append(f"the kernel raised {type(err).__name__}: {str(err)[:500]}")
        _set_finding(diag, Finding(CONTRACT, f"a valid call raised {type(err).__name__}", _clip(str(err), 300)))
        return diag
    unusable = _unusable_outputs(out, lse)
    if unusable:
        diag.outcome = "fail"
        diag.reasons.append(unusable)
        _set_finding(diag, Finding(CONTRACT, "out holds no data", unusable))
        return diag
    try:
        judgement = judge(problem, out, lse, target.profile)
    except PreconditionError as err:
        diag.outcome = "fail"
        diag.reasons.append(
            f"no bound is promised for this recipe ({err}): it breaks a precondition, so its entry should expect 'precondition'"
        )
        _set_finding(diag, Finding(SUITE_ERROR, "a recipe meant to conform breaks a precondition", str(err)[:300]))
        return diag
    except Exception as err:  # noqa: BLE001 - outputs the comparison cannot read are a failure of the kernel, not of replay
        diag.outcome = "fail"
        diag.reasons.append(f"the kernel's outputs cannot be compared: {type(err).__name__}: {str(err)[:300]}")
        _set_finding(diag, Finding(CONTRACT, "the outputs cannot be compared", f"{type(err).__name__}: {_clip(str(err), 200)}"))
        return diag
    for mode, verdict in judgement.verdicts.items():
        evaluation = judgement.evaluations[mode]
        diag.reasons += verdict.failures
        if isinstance(out, torch.Tensor) and out.shape == evaluation.out.shape:
            diag.comparisons.append(comparison_details("out", out, evaluation.out, evaluation.out_bound, mode=mode, top=top))
        if problem.return_lse and isinstance(lse, torch.Tensor) and lse.shape == evaluation.lse.shape:
            diag.comparisons.append(comparison_details("lse", lse, evaluation.lse, evaluation.lse_bound, mode=mode, top=top))
    # type failures repeat once per mode: keep each message once
    diag.reasons = list(dict.fromkeys(diag.reasons))
    diag.outcome = "fail" if diag.reasons else "pass"
    if not judgement.ok:
        _set_finding(diag, triage(problem, out, lse, target.profile, judgement).finding)
    return diag


def _set_finding(diag: Diagnosis, finding: Any) -> None:
    diag.finding, diag.triage = finding.to_json_dict(), finding.headline


def _without_headline(message: str, headline: str) -> str:
    """A failure message without its first line when that line is the finding's headline."""
    lines = message.strip().splitlines()
    if lines and lines[0].strip() == headline:
        lines = lines[1:]
    return "\n".join(lines).strip()


def _clip(text: str, limit: int) -> str:
    """`text` on one line, cut at a word boundary with an ellipsis when longer than `limit` characters."""
    line = " ".join(str(text).split())
    if len(line) <= limit:
        return line
    head = line[: limit - 1]
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut.rstrip(" ,;:") + "…"


def _unusable_outputs(out: Any, lse: Any) -> str | None:
    """Why the kernel's returned tensors hold no data to compare (meta or otherwise storage-less
    tensors), or None. Wrong types and shapes are left to conformance.judging.harness.compare."""
    import torch

    for name, value in (("out", out), ("lse", lse)):
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            return f"the kernel returned {name} on the meta device (a tensor with no data): nothing to compare"
    return None


# ---------------------------------------------------------------------------------------------
# Running in a sandboxed state folder, or in a child process


@contextmanager
def sandbox_state() -> Iterator[Path]:
    """A temporary state folder (write-ahead files, example records) for the duration of the
    block; the environment is restored and the folder removed afterwards. In the child of
    --isolate the parent's folder is used as is (the parent reads the write-ahead file there)."""
    if os.environ.get(ISOLATED_CHILD_ENV) == "1" and os.environ.get(STATE_DIR_ENV):
        yield Path(os.environ[STATE_DIR_ENV])
        return
    saved = {k: os.environ.get(k) for k in (STATE_DIR_ENV, RUN_ID_ENV)}
    folder = Path(tempfile.mkdtemp(prefix="conformance-replay-"))
    os.environ[STATE_DIR_ENV] = str(folder)
    os.environ[RUN_ID_ENV] = f"replay-{os.getpid()}"
    try:
        yield folder
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(folder, ignore_errors=True)


def child_env(state: Path | None = None) -> dict[str, str]:
    """Environment for a child process: no xdist or session variables of the caller, the repo
    on PYTHONPATH, unbuffered output, `state` as the state folder when given."""
    env = scrubbed_env(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if state is not None:
        env[STATE_DIR_ENV] = str(state)
    return env


def signal_name(number: int) -> str:
    """ "SIGKILL" for 9, etc.; "signal N" when unknown."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _inflight_left(state: Path) -> dict[str, Any] | None:
    for path in sorted(state.glob("runs/*/inflight-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            return data
    return None


@dataclass
class IsolatedResult:
    """What a child replay produced: its exit code, output and diagnosis (None when it died
    without writing one)."""

    returncode: int
    stdout: str
    stderr: str
    diagnosis: Diagnosis | None


def run_isolated(
    path: Path,
    *,
    kernel: str | None,
    profile: str | None,
    device: str | None,
    expect: str | None = None,
    top: int = DEFAULT_TOP,
    timeout_s: float = DEFAULT_ISOLATE_TIMEOUT_S,
) -> IsolatedResult:
    """Replay `path` in a child process (`python -m conformance replay --no-isolate`) with its
    own state folder. A child killed by a signal or past `timeout_s` seconds gives a diagnosis
    with outcome "crash" and what it had in flight."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout_s}")
    state = Path(tempfile.mkdtemp(prefix="conformance-isolated-"))
    result_path = state / "diagnosis.json"
    command = [sys.executable, "-m", "conformance", "replay", str(path), "--no-isolate", "--json", str(result_path), "--top", str(top)]
    for option, value in (("--kernel", kernel), ("--profile", profile), ("--device", device), ("--expect", expect)):
        if value:
            command += [option, value]
    try:
        try:
            env = {**child_env(state), ISOLATED_CHILD_ENV: "1"}
            proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
            returncode, stdout, stderr, how = proc.returncode, proc.stdout, proc.stderr, None
        except subprocess.TimeoutExpired as err:
            returncode = -int(signal.SIGKILL)
            stdout = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else (err.stderr or "")
            how = f"hung: no result within {timeout_s:g} s, killed"
        diagnosis = None
        if result_path.exists():
            try:
                diagnosis = Diagnosis.from_json_dict(json.loads(result_path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError, TypeError):
                diagnosis = None
        if returncode < 0 or how:
            inflight = _inflight_left(state)
            where = "during the kernel call" if inflight else "outside the kernel call"
            how = how or f"the process died with signal {-returncode} ({signal_name(-returncode)}) {where}"
            kind_of_crash = "hung" if how.startswith("hung") else f"signal {-returncode}"
            if not kernel:
                from kernel.registry import default_kernel_name

                kernel = f"{default_kernel_name()} (the machine's default)"
            from conformance.judging.finding import CRASH, DIED, HANG, HUNG, Finding

            finding = Finding(HANG, HUNG, how) if kind_of_crash == "hung" else Finding(CRASH, DIED, how)
            diagnosis = Diagnosis(
                finding=finding.to_json_dict(),
                triage=finding.headline,
                name=path.stem,
                expect=expect or "?",
                kernel=kernel,
                profile=profile or "?",
                device=device or "?",
                outcome="crash",
                reasons=[how],
                crash={"kind": kind_of_crash, "returncode": returncode, "in_flight": inflight},
            )
        return IsolatedResult(returncode, stdout, stderr, diagnosis)
    finally:
        shutil.rmtree(state, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Formatting


def _g(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.4g}"


def _where(d: dict[str, Any]) -> str:
    keys = [k for k in ("row", "head", "dim") if k in d]
    return "(" + ", ".join(f"{k} {d[k]}" for k in keys) + ")"


def _places(comparison: dict[str, Any]) -> list[tuple[int, ...]]:
    """Where the listed worst elements are (row, head[, dim]), to tell two modes apart."""
    return [tuple(e[k] for k in ("row", "head", "dim") if k in e) for e in comparison.get("top_elements", [])]


def caught_with(entry: Any) -> str | None:
    """The kernel an entry's provenance names (None for none, "any", "default", "unknown")."""
    kernel = (entry.provenance or {}).get("kernel")
    return str(kernel) if kernel and str(kernel) not in ("any", "default", "unknown", "?") else None


def format_header(entry: Any, kind: str, path: Path, target: Any, *, kernel_given: bool = True) -> str:
    """What is replayed, against what. Without --kernel (`kernel_given` False) the header says
    the kernel is the machine's default, and, for an entry caught with another kernel, that the
    replay does not run that kernel."""
    from strategies.recipe import OPTIONAL_FIELDS

    r = entry.recipe
    prov = entry.provenance or {}
    lines = [
        f"replay {path} ({'bare recipe' if kind == 'recipe' else entry_status(path) + ' entry'})",
        f"  entry:  {entry.name}, expect {entry.expect}",
    ]
    if prov:
        lines.append(f"  caught: {_clip(str(prov.get('caught', '?')), 300)}")
        lines.append(f"          kernel {prov.get('kernel', '?')}, property {prov.get('property', '?')}, {prov.get('date', '?')}")
    default = "" if kernel_given else ", the machine's default: no --kernel given"
    lines.append(f"  kernel: {target.name} (profile {target.profile.name}) on {target.device}{default}")
    other = caught_with(entry)
    if other and other != target.name:
        lines.append(
            f"  NOTE:   the entry was caught with kernel {other}; this replay runs {target.name}, not {other} "
            f"(--kernel {other} replays against it)"
        )
    lengths = list(r.row_lengths)
    shown = lengths if len(lengths) <= 12 else lengths[:12] + ["..."]
    lines.append(
        f"  recipe: n_q {r.n_q}, heads {r.heads}, row lengths {shown} ({r.total_keys} keys), cache rows {r.cache_rows}, seed {r.seed}"
    )
    lines.append(
        f"          index {r.index_pattern}, invalid {r.invalid_pattern} (has_invalid {r.has_invalid}), "
        f"latent {r.latent}, rope {r.rope}, q {r.q}, "
        f"softmax_scale {r.softmax_scale}, writer {r.writer}, q_pad {list(r.q_pad)}, out_pad {r.out_pad and list(r.out_pad)}, "
        f"return_lse {r.return_lse}, poison {r.poison}"
        + (f", corruptions {list(r.corruptions)}" if r.corruptions else "")
        # fields added since version 1 (cache_shape, stream_tail, layouts, unconsumed): only when not at their default
        + "".join(f", {name} {value}" for name, value in r.to_json_dict().items() if name in OPTIONAL_FIELDS)
    )
    return "\n".join(lines)


def format_diagnosis(diag: Diagnosis) -> str:
    """The diagnosis for a terminal (see the module docstring)."""
    lines: list[str] = []
    if diag.findings or diag.holds or diag.findings_error:
        lines.append("preconditions (oracle.preconditions.check_call on this call):")
        if diag.findings_error:
            lines.append(f"  {diag.findings_error}")
        for f in diag.findings:
            label = "VIOLATED" if f["severity"] == "violation" else "notice  "
            lines.append(f"  {label} {f['kind']}: {f['count']} {f['unit']} ({f['scope']})")
            lines.append(f"           {str(f['consequence'])[:400]}")
        if diag.holds:
            lines.append(f"  hold:    {', '.join(diag.holds)}")
    if diag.comparisons:
        lines.append("comparison with the float64 reference (err = |kernel - reference|, bound = the profile's a-priori bound):")
        lines.append(
            f"  {'mode':<12} {'output':<6} {'max |err|':>10} {'max bound':>10} {'worst err/bound':>16}  {'at':<28} {'exceeding':>12}"
        )
        for c in diag.comparisons:
            if "worst_ratio" not in c:
                lines.append(f"  {c['mode']:<12} {c['output']:<6} (empty)")
                continue
            lines.append(
                f"  {c['mode']:<12} {c['output']:<6} {_g(c['max_err']):>10} {_g(c['max_bound']):>10} {_g(c['worst_ratio']):>16}  "
                f"{_where(c['worst_at']):<28} {c['exceeding']:>5} / {c['elements']}"
            )
        shown: dict[str, dict[str, Any]] = {}
        for c in diag.comparisons:
            if not c.get("exceeding"):
                continue
            before = shown.get(c["output"])
            if before is not None and before["exceeding"] == c["exceeding"] and _places(before) == _places(c):
                lines.append(
                    f"  [{c['mode']}] {c['output']}: the same {c['exceeding']} values exceed as in [{before['mode']}] "
                    f"(worst err/bound {_g(c['worst_ratio'])})"
                )
                continue
            shown[c["output"]] = c
            lines.append(f"  [{c['mode']}] {c['output']}: {c['exceeding']} of {c['elements']} values exceed the bound; worst:")
            for e in c["top_elements"]:
                lines.append(
                    f"    {_where(e):<28} got {_g(e['got'])}, ref {_g(e['ref'])}, err {_g(e['err'])}, bound {_g(e['bound'])}, "
                    f"err/bound {_g(e['ratio'])}"
                )
            for name, groups in c["by"].items():
                listed = "; ".join(f"{name} {g[name]}: {g['exceeding']} over, max {_g(g['max_ratio'])}" for g in groups)
                lines.append(f"    by {name:<4} {listed}")
    if diag.observed is not None:
        lines.append(
            f"behaviour under the violation: {diag.observed.get('behaviour', '?')} "
            f"(violated: {', '.join(diag.observed.get('kinds', [])) or '-'})"
        )
    if diag.crash and diag.crash.get("in_flight"):
        f = diag.crash["in_flight"]
        lines.append(f"in flight when it died: kernel {f.get('kernel')}, property {f.get('property')}, device {f.get('device')}")
    verdicts = {
        ("pass", "conform"): "CONFORMS: every value within the bound in both comparison modes",
        ("pass", "precondition"): "PROMISES HOLD: the kernel did what the contract still promises under the violation",
        ("skip", "conform"): "SKIPPED",
        ("skip", "precondition"): "SKIPPED",
    }
    verdict = verdicts.get((diag.outcome, diag.expect), {"fail": "FAILS", "crash": "CRASH"}.get(diag.outcome, diag.outcome.upper()))
    lines.append(f"verdict: {verdict} (kernel {diag.kernel})")
    if diag.triage:
        lines.append(f"  {diag.triage}")
    for reason in diag.reasons:
        reason = _without_headline(str(reason), diag.triage) if diag.triage else str(reason)
        for i, line in enumerate(reason.splitlines()):
            lines.append(("  - " if i == 0 else "    ") + line)
    return "\n".join(lines)
