"""Bit-for-bit snapshot of `strategies.materialize.materialize` over a fixed set of recipes.

A snapshot file is a JSON list of {"recipe": Recipe.to_json_dict(), "hashes": problem_hashes(...)}.
`recipes_to_record(count)` gives the fixed problems of conformance.tools.snapshot.cases plus
`count` recipes drawn from the suite's strategies (strategies.hypothesis_recipes: general,
long-row, huge-cache, exact and precondition-violating recipes, sizes kept small, derandomised).
`check` rebuilds every recipe on a device (the CPU by default: the recorded hashes are the CPU's,
and materialize promises the same bits on every device) and names each recipe and tensor whose
bytes differ. Used to show that a change of strategies/materialize.py left every bit unchanged
(tests/strategies/data/materialize_hashes*.json are checked by the tests). The command line:
`python -m conformance snapshot materialize`.

Hashed (SHA-256, first 32 hex digits): q, out (the whole NaN-filled storage under the strided view,
and the strides), indices, indptr, referenced_rows, poison_rows, the scalars, the cache's shape
and its defined records (every record of a cache up to 64 MiB; of a larger cache, which
materialize allocates uninitialised, the records it writes: referenced rows, poison rows, their
neighbours, the first and last).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from kernel.record import RECORD_BYTES
from strategies.materialize import SMALL_CACHE_BYTES, Problem, materialize
from strategies.recipe import Recipe

MAX_HOST_BYTES = 256 * 2**20  # recipes needing more (by their estimate) are not drawn into the snapshot


class SnapshotFileError(Exception):
    """A snapshot file that cannot be read, parsed or written (the message names the file and why)."""


def _digest(t: torch.Tensor) -> str:
    flat = t.detach().contiguous().cpu().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()[:32]


def _storage_digest(t: torch.Tensor) -> str:
    """The whole storage under a (possibly strided) view, padding included."""
    whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    return _digest(whole)


def problem_hashes(problem: Problem) -> dict[str, Any]:
    """Digests of everything materialize built (see the module docstring)."""
    kv = problem.kv_cache.reshape(-1, RECORD_BYTES)
    n = kv.shape[0]
    if n * RECORD_BYTES <= SMALL_CACHE_BYTES:
        defined = torch.arange(n)
    else:
        ref, poison = problem.referenced_rows, problem.poison_rows
        near = torch.cat((torch.tensor([0, n - 1]), ref - 1, ref, ref + 1, poison))
        defined = torch.unique(near[(near >= 0) & (near < n)])
    out = {
        "q": _storage_digest(problem.q),
        "q_stride": list(problem.q.stride()),
        "q_shape": list(problem.q.shape),
        "kv_shape": list(problem.kv_cache.shape),
        "kv_defined": _digest(kv[defined.to(kv.device)]),
        "kv_defined_rows": _digest(defined),
        "indices": _digest(problem.indices),
        "indices_dtype": str(problem.indices.dtype),
        "indptr": _digest(problem.indptr),
        "indptr_dtype": str(problem.indptr.dtype),
        "referenced_rows": _digest(problem.referenced_rows),
        "poison_rows": _digest(problem.poison_rows),
        "softmax_scale": float(problem.softmax_scale).hex(),
        "has_invalid": problem.has_invalid,
        "return_lse": problem.return_lse,
        "out": None if problem.out is None else [_storage_digest(problem.out), list(problem.out.stride()), list(problem.out.shape)],
    }
    return out


def draw_recipes(count: int) -> list[Recipe]:
    """`count` recipes from the suite's strategies (several size regimes), small enough to build quickly."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from strategies.hypothesis_recipes import recipes, violating_recipes
    from strategies.recipe import memory_estimate

    regimes = [
        recipes(max_n_q=64, max_total_keys=4096),
        recipes(max_n_q=4, max_row=8192, max_total_keys=8192),
        recipes(max_n_q=16, max_total_keys=2048, exact=True),
        recipes(max_n_q=8, max_total_keys=1024, huge_cache=True),
        violating_recipes(max_total_keys=2048, allow_out_of_range=True),
        violating_recipes(max_total_keys=2048, allow_out_of_range=False),
    ]
    drawn: list[Recipe] = []

    @settings(max_examples=count * 2, database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def collect(data: Any) -> None:
        recipe = data.draw(st.sampled_from(regimes).flatmap(lambda s: s))
        if memory_estimate(recipe, "cpu").host_bytes <= MAX_HOST_BYTES:
            drawn.append(recipe)

    collect()
    unique = {r.to_json(): r for r in drawn}
    return list(unique.values())[:count]


PACKS = 16  # packed calls (strategies.materialize.materialize_pack) recorded after the drawn recipes


def draw_packs(count: int) -> list[Recipe]:
    """`count` packed calls of 2 to 8 parts from the fuzz campaign's pack strategy (every part's
    data drawn, so the parts are built together), small enough to build quickly."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from strategies.hypothesis_recipes import packs

    drawn: list[Recipe] = []

    @settings(max_examples=count * 4, database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def collect(data: Any) -> None:
        recipe = data.draw(packs(max_parts=8, max_n_q=64, max_total_keys=8192))
        if recipe.parts:
            drawn.append(recipe)

    collect()
    unique = {r.to_json(): r for r in drawn}
    return list(unique.values())[:count]


def recipes_to_record(count: int) -> list[Recipe]:
    """The snapshot's recipes: the fixed problems of the oracle snapshot, then `count` drawn ones,
    then PACKS packed calls."""
    from conformance.tools.snapshot.cases import cases

    return [r for _, r in cases()] + draw_recipes(count) + draw_packs(PACKS)


def entries_of(recipes: list[Recipe], device: torch.device | str = "cpu") -> list[dict[str, Any]]:
    """The snapshot entries of `recipes`, materialized on `device`."""
    return [{"recipe": r.to_json_dict(), "hashes": problem_hashes(materialize(r, device))} for r in recipes]


def check(entries: list[dict[str, Any]], device: torch.device | str = "cpu") -> list[str]:
    """One line per recipe and field whose hash, recomputed on `device`, differs from the recorded one."""
    lines = []
    for number, entry in enumerate(entries):
        recipe = Recipe.from_json_dict(entry["recipe"])
        got = json.loads(json.dumps(problem_hashes(materialize(recipe, device))))
        for key, want in entry["hashes"].items():
            if got.get(key) != want:
                lines.append(f"recipe {number} ({recipe.to_json()[:120]}...): {key} differs")
    return lines


def load(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a snapshot file; SnapshotFileError naming the file when it is unreadable,
    not JSON or not a list of {"recipe", "hashes"} objects."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SnapshotFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SnapshotFileError(f"{path}: cannot read ({err})") from None
    except json.JSONDecodeError as err:
        raise SnapshotFileError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) and {"recipe", "hashes"} <= set(e) for e in data):
        raise SnapshotFileError(f'{path}: not a materialize snapshot (expected a JSON list of {{"recipe", "hashes"}} objects)')
    return data


def save(entries: list[dict[str, Any]], path: str | Path) -> None:
    """Write the entries as the snapshot file (the format `load` reads)."""
    try:
        Path(path).write_text(json.dumps(entries, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as err:
        raise SnapshotFileError(f"{path}: cannot write ({err.strerror or err})") from None
