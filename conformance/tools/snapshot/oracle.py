"""Bit-for-bit snapshot of the oracle, the bound and the emulated kernel over the fixed problems of
conformance.tools.snapshot.cases, on the CPU.

For each problem it records evaluate_modes under every shipped profile (oracle/profile_files/), at
the default key budget and, for two of them, a small one (many chunks); the reference under both
scale models, at a key budget of 300 and with the gfx950 Q representation; and the emulated
kernel's out / lse (default and a 256-key row budget). An error is recorded as the string
"Type: message" in place of the tensors. The file (torch.save of a dict) maps
"<case>/<producer>/<tensor>" to a tensor or an error string.

`take(stored=...)` compares every tensor through its integer bit view (kernel.bits:
NaN payloads included, so a NaN equals the same NaN) and names each difference: NEW (a key the
stored file lacks), DIFFERS (other bits, or another error), MISSING (a stored key of a selected
case that was not produced). Used to show that a change of oracle/, the bound or the emulated
kernel left every output bit unchanged. The command line: `python -m conformance snapshot oracle`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from conformance.tools.snapshot.cases import cases
from kernel.bits import same_bits
from kernel.emulated.gfx950 import run_emulated
from oracle import q_representation as qrep
from oracle.bound import evaluate_modes
from oracle.profiles import PROFILE_DIR, load_profile
from oracle.reference import reference
from strategies.materialize import materialize
from strategies.recipe import Recipe

PROFILE_NAMES = tuple(sorted(p.stem for p in PROFILE_DIR.glob("*.toml")))


class SnapshotFileError(Exception):
    """A snapshot file that cannot be read or written (the message names the file and why)."""


def _run(fn, results: dict[str, object], key: str) -> None:  # type: ignore[no-untyped-def]
    try:
        values = fn()
    except Exception as err:  # noqa: BLE001 - a recorded outcome
        results[key] = f"{type(err).__name__}: {err}"
        return
    for name, tensor in values.items():
        results[f"{key}/{name}"] = tensor.detach().clone()


def compute(recipe: Recipe) -> dict[str, object]:
    """Every recorded output of one problem, keyed by "<producer>/<tensor>" (the module docstring)."""
    p = materialize(recipe, "cpu")
    res: dict[str, object] = {}
    args = (p.q, p.kv_cache, p.indices, p.indptr, p.softmax_scale)

    def modes(profile_name: str, **kw: object):  # type: ignore[no-untyped-def]
        def go():  # type: ignore[no-untyped-def]
            ev = evaluate_modes(*args, profile=load_profile(profile_name), has_invalid=p.has_invalid, **kw)  # type: ignore[arg-type]
            return {f"{m}/{f}": getattr(e, f) for m, e in ev.items() for f in ("out", "lse", "out_bound", "lse_bound", "window")}

        return go

    for prof in PROFILE_NAMES:
        _run(modes(prof), res, f"eval/{prof}")
    _run(modes("gfx950", scale_model="gfx950"), res, "eval/gfx950/scale_gfx950")
    _run(modes("gfx950", key_budget=700), res, "eval/gfx950/budget700")
    _run(modes("bf16-q-bf16-p", key_budget=1), res, "eval/bf16-q-bf16-p/budget1")
    ref_keys = ("out", "lse")
    _run(lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid), k) for k in ref_keys}, res, "ref/stored")
    _run(lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid, scale_model="gfx950"), k) for k in ref_keys}, res, "ref/gfx950")
    _run(lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid, key_budget=300), k) for k in ref_keys}, res, "ref/budget300")
    _run(
        lambda: {k: getattr(reference(*args, has_invalid=p.has_invalid, q_ref=qrep.fp8_hi_lo(p.q).q_hat), k) for k in ref_keys},
        res,
        "ref/q_hat",
    )

    def emu():  # type: ignore[no-untyped-def]
        o, lse = run_emulated(*args, has_invalid=p.has_invalid, return_lse=True)
        return {"out": o, "lse": lse}

    _run(emu, res, "emulated")

    def emu_small():  # type: ignore[no-untyped-def]
        o, lse = run_emulated(*args, has_invalid=p.has_invalid, return_lse=True, row_key_budget=256)
        return {"out": o, "lse": lse}

    _run(emu_small, res, "emulated/budget256")
    return res


@dataclass
class Outcome:
    """What `take` produced: the snapshot of the selected cases, how many stored outputs were
    compared and one line per difference (empty without a stored snapshot)."""

    snapshot: dict[str, object] = field(default_factory=dict)
    compared: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        """Outputs recorded as an error string."""
        return sum(isinstance(v, str) for v in self.snapshot.values())


def _same(old: object, new: object) -> bool:
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        return same_bits(old, new)
    return old == new


def _describe(value: object) -> str:
    return value if isinstance(value, str) else ""


def take(
    select: str = "",
    *,
    stored: Mapping[str, object] | None = None,
    on_case: Callable[[str, int, float, list[str]], None] | None = None,
) -> Outcome:
    """Compute every case whose name contains `select`; with `stored`, compare each output with it.
    `on_case(name, outputs, seconds, differences)` is called after each case (progress)."""
    outcome = Outcome()
    selected = [(name, recipe) for name, recipe in cases() if select in name]
    for name, recipe in selected:
        t0 = time.perf_counter()
        results = compute(recipe)
        found: list[str] = []
        for key, value in results.items():
            full = f"{name}/{key}"
            outcome.snapshot[full] = value
            if stored is None:
                continue
            if full not in stored:
                found.append(f"NEW     {full}")
                continue
            outcome.compared += 1
            if not _same(stored[full], value):
                found.append(f"DIFFERS {full}: {_describe(stored[full])} {_describe(value)}")
        outcome.differences += found
        if on_case is not None:
            on_case(name, len(results), time.perf_counter() - t0, found)
    if stored is not None:
        names = {name for name, _ in selected}
        outcome.differences += [f"MISSING {key}" for key in stored if key not in outcome.snapshot and key.split("/")[0] in names]
    return outcome


def load(path: str | Path) -> dict[str, object]:
    """A snapshot file written by `save`; SnapshotFileError naming the file when it cannot be read."""
    try:
        data = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise SnapshotFileError(f"{path}: no such file") from None
    except Exception as err:  # not a torch.save file, truncated, unpickling refused: the unpickler raises many kinds
        raise SnapshotFileError(f"{path}: not a snapshot file ({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise SnapshotFileError(f"{path}: not a snapshot file (expected a dict of case/output -> tensor or error string)")
    return data


def save(snapshot: Mapping[str, object], path: str | Path) -> None:
    """Write `snapshot` with torch.save; SnapshotFileError naming the file when it cannot be written."""
    try:
        torch.save(dict(snapshot), path)
    except OSError as err:
        raise SnapshotFileError(f"{path}: cannot write ({err.strerror or err})") from None
