"""Run every probe against one kernel, print the evidence, write the measured profile.

`probe_kernel(backend, device=..., quick=...)` runs the probes in dependency order (the output
cast first, since the P probe predicts through it; the P format before the subnormal probe, which
f16 P' makes inconclusive), logs progress and each probe's evidence, and returns a `ProbeReport`
with the decisions, the profile text (conservative where undecided) and per-probe timings.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from conformance.tools.probe import probes as P
from conformance.tools.probe.build import ProbeSkipped
from conformance.tools.probe.profile import assemble, render, to_profile
from oracle.profile_schema import NumericsProfile


@dataclass
class ProbeReport:
    kernel: str
    device: str
    evidence: list[P.Evidence] = field(default_factory=list)
    decided: dict = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    text: str = ""
    seconds: float = 0.0

    def profile(self) -> NumericsProfile:
        return to_profile(self.text, source=f"<probed {self.kernel}>")

    def summary_lines(self) -> list[str]:
        out = [f"probe {self.kernel} on {self.device}: {len(self.evidence)} probes in {self.seconds:.1f} s"]
        for ev in self.evidence:
            out.append(f"  {ev.probe:<18} {str(ev.decision) if ev.decision is not None else 'undecided':<60} {ev.seconds:6.1f} s")
        for name, why in self.skipped:
            out.append(f"  {name:<18} skipped: {why}")
        return out


def _heads(backend: object) -> int:
    counts = getattr(backend, "head_counts", None)
    top = min(16, int(getattr(backend, "max_heads", 16)))
    if counts:
        fitting = [h for h in counts if h <= top]
        return max(fitting) if fitting else min(counts)
    return top


def probe_kernel(
    backend: Callable, *, name: str, device: str = "cpu", quick: bool = False, thorough: bool = False, log: Callable[[str], None] = print
) -> ProbeReport:
    """Run the probes on `backend` (a contract callable, e.g. a registry Backend)."""
    report = ProbeReport(kernel=name, device=device)
    ctx = P.Context(kernel=backend, device=device, heads=_heads(backend), log=log)
    split_lengths = (
        (2, 16, 64, 65, 96, 128, 129, 256) if quick else (P.SPLIT_LENGTHS + P.SPLIT_LENGTHS_LONG if thorough else P.SPLIT_LENGTHS)
    )
    steps: list[tuple[str, Callable[[], object]]] = [
        ("q_representation", lambda: P.probe_q_representation(ctx)),
        ("output_rounding", lambda: P.probe_output_rounding(ctx)),
        ("p_format", lambda: P.probe_p_format(ctx, rows=4)),
        ("p_shift", lambda: P.probe_p_shift(ctx)),
        ("subnormals", lambda: P.probe_subnormals(ctx)),
        ("qk", lambda: P.probe_qk_accumulation(ctx)),
        ("lse", lambda: P.probe_lse(ctx)),
        ("scale_cap", lambda: P.probe_scale_cap(ctx)),
        ("split", lambda: P.probe_split(ctx, split_lengths)),
        ("pv", lambda: P.probe_pv_accumulation(ctx)),  # after split: rows stay unsplit
    ]
    t_all = time.perf_counter()
    for i, (step, fn) in enumerate(steps):
        if step == "p_shift" and not (isinstance(ctx.decided.get("p_format"), dict) and ctx.decided["p_format"]["format"] == "fp16_scaled"):
            continue
        log(f"[{i + 1}/{len(steps)}] {step} ...")
        t0 = time.perf_counter()
        try:
            result = fn()
        except ProbeSkipped as why:
            report.skipped.append((step, str(why)))
            log(f"  skipped: {why}")
            continue
        evs = result if isinstance(result, list) else [result]
        dt = time.perf_counter() - t0
        for ev in evs:
            ev.seconds = dt / len(evs)
            ctx.decided[ev.probe] = ev.decision
            report.evidence.append(ev)
            for line in ev.lines():
                log(line)
        log(f"  ({dt:.1f} s)")
    report.seconds = time.perf_counter() - t_all
    report.decided = dict(ctx.decided)
    decided = dict(ctx.decided)
    split = decided.get("split")
    decided["split"] = split if isinstance(split, dict) else None
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    fields = assemble(
        decided, name=f"probed-{safe}", description=f"measured by `python -m conformance probe --kernel {name}` on {device}, {stamp}"
    )
    header = [
        f"Numerics profile of {name} measured by `python -m conformance probe` ({device}, {stamp}).",
        "Each field's comment names the probe that set it; 'not probed' / 'undecided' fields hold the conservative value.",
        "docs/how-to/measure-a-profile.md explains the probes and the mapping from observations to fields.",
    ]
    report.text = render(fields, header)
    report.profile()  # the text must read back as a valid profile
    return report
