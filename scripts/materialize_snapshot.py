"""Bit-for-bit snapshot of `strategies.materialize.materialize` over a fixed set of recipes.

    python scripts/materialize_snapshot.py --write FILE.json [--count N]   # draw recipes, record hashes
    python scripts/materialize_snapshot.py --check FILE.json [--device cuda]  # recompute, compare

`--write` draws N recipes from the suite's strategies (strategies.hypothesis_recipes: general,
long-row, paged, huge-cache, exact and precondition-violating recipes, sizes kept small) plus
the fixed problems of scripts/oracle_bitexact_snapshot.py, and stores each recipe with the
SHA-256 of every tensor materialize builds from it (`problem_hashes`). `--check` rebuilds every
recipe (on --device, default the CPU: the recorded hashes are the CPU's, and materialize promises
the same bits on every device) and exits 1 naming each recipe and tensor whose bytes differ. Used to prove that an
optimisation of strategies/materialize.py left every bit unchanged (tests/test_materialize_snapshot.py
checks the file in tests/data).

Hashed: q, out (the whole NaN-filled storage under the strided view, and the strides), indices,
indptr, referenced_rows, poison_rows, the scalars, the cache's shape and its defined records (every
record of a cache up to 64 MiB; of a larger cache, which materialize allocates uninitialised,
the records it writes: referenced rows, poison rows, their neighbours, the first and last).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel.record import RECORD_BYTES  # noqa: E402
from strategies.materialize import SMALL_CACHE_BYTES, Problem, materialize  # noqa: E402
from strategies.recipe import Recipe  # noqa: E402

MAX_HOST_BYTES = 256 * 2**20  # recipes needing more (by their estimate) are not drawn into the snapshot


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path)
    mode.add_argument("--check", type=Path)
    parser.add_argument("--count", type=int, default=120, help="recipes drawn from the strategies (--write)")
    parser.add_argument("--device", default="cpu", help="where --check materializes (the hashes are of the bytes, read back)")
    args = parser.parse_args(argv)
    if args.write:
        from oracle_bitexact_snapshot import cases  # scripts/ is on the path when run as a script

        recipes = [r for _, r in cases()] + draw_recipes(args.count)
        entries = [{"recipe": r.to_json_dict(), "hashes": problem_hashes(materialize(r))} for r in recipes]
        args.write.write_text(json.dumps(entries, indent=0, sort_keys=True) + "\n")
        print(f"wrote {len(entries)} recipes to {args.write}")
        return 0
    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        parser.error(f"--device {args.device!r}: {err}")
    differences = check(json.loads(args.check.read_text()), device)
    for line in differences:
        print(line)
    print(f"{len(differences)} difference(s)")
    return 1 if differences else 0


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


if __name__ == "__main__":
    sys.exit(main())
