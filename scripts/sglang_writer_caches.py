"""Caches written by sglang's quantiser (kernel.writers.sglang): checked, compared with the
project's writers record by record, and dumped for `python -m conformance preconditions`.

Writes under --out:
- activations.pt ({"kv_cache"}): N rows shaped like real activations (a quarter Student-t(2)
  heavy tails, one outlier channel x50, N/64 rows with an all-zero first tile, N/64 rows scaled by
  2^-20 and N/64 by 2^10, the rest normal), a whole-cache dump;
- recipe-LATENT.pt ({"kv_cache", "indices", "indptr"}) per latent distribution of the strategies:
  the problem strategies.materialize builds for a recipe with writer "sglang" (4 rows of 64 keys
  from a 512-row cache; not under --interpreter, whose bytes the writer's check refuses);
- summary.json: per cache, the writer check (kernel.writers.sglang.rounding_failures), the bytes
  against pow2 / pow2-floor / raw (kernel.record.encode_records) record by record (identical,
  differing in codes / scales / rope), the scales that are not powers of two, zero, above 2^7;
  with --compare-with PT ({"latent", "rope", "sglang"}: records written elsewhere, e.g.
  tests/data/sglang_writer_h200.pt), its inputs written here and the bytes compared.

--interpreter runs sglang's kernel under Triton's CPU interpreter (TRITON_INTERPRET=1) on CPU
tensors: to try this script's logic on a machine without CUDA, and to compare the interpreter's
bytes with the H200's (--compare-with): the summary then says "interpreter", not the engine.

Usage: python3 scripts/sglang_writer_caches.py --out DIR [--rows N] [--device cuda|cpu]
       [--interpreter] [--compare-with PT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

LATENTS = ("normal", "heavy", "outliers", "zero_blocks", "tiny_blocks", "max57344", "large")


def activation_rows(n: int, seed: int = 23) -> tuple[Any, Any]:
    """(latent bf16 [n, 512], rope bf16 [n, 64]) with activation-like statistics (module docstring)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, 512, generator=g)
    quarter, part = max(n // 4, 1), max(n // 64, 1)
    latent[:quarter] = torch.distributions.StudentT(2.0).sample((quarter, 512))
    latent[:, 7] *= 50.0
    latent[quarter : quarter + part, :128] = 0.0
    latent[n // 2 : n // 2 + part] *= 2.0**-20
    latent[3 * n // 4 : 3 * n // 4 + part] *= 2.0**10
    return latent.to(torch.bfloat16), torch.randn(n, 64, generator=g).to(torch.bfloat16)


def compare(records: Any, latent: Any, rope: Any) -> dict[str, Any]:
    """The check, the scales' kinds and the bytes against the project's writers (module docstring)."""
    import torch

    from kernel.record import ROPE_OFFSET, SCALE_OFFSET, encode_records, record_scales
    from kernel.writers.sglang import rounding_failures

    records, latent, rope = records.cpu(), latent.cpu(), rope.cpu()
    scales = record_scales(records)
    bits = scales.view(torch.int32)
    out: dict[str, Any] = {
        "records": int(records.shape[0]),
        "rounding_failures": rounding_failures(records, latent, rope),
        "scales": int(scales.numel()),
        "scales_not_pow2": int(((bits & 0x7FFFFF) != 0).sum()),
        "scales_zero": int((scales == 0).sum()),
        "scales_above_2^7": int((scales > 128).sum()),
    }
    for name in ("pow2", "pow2-floor", "raw"):
        diff = records != encode_records(latent, rope, name)
        out[name] = {
            "identical": int((~diff.any(1)).sum()),
            "differing": int(diff.any(1).sum()),
            "in_codes": int(diff[:, :SCALE_OFFSET].any(1).sum()),
            "in_scales": int(diff[:, SCALE_OFFSET:ROPE_OFFSET].any(1).sum()),
            "in_rope": int(diff[:, ROPE_OFFSET:].any(1).sum()),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--interpreter", action="store_true", help="Triton's CPU interpreter on CPU tensors (not the engine's bytes)")
    parser.add_argument("--compare-with", type=Path, default=None, metavar="PT")
    args = parser.parse_args(argv)
    if args.interpreter:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported (sglang's kernel is decorated at import)
        args.device = "cpu"
    elif args.device != "cuda":
        parser.error("the engine's bytes come from CUDA: --device cuda, or --interpreter for the CPU interpreter")
    import torch

    from kernel.backends.triton_peers import load_sglang
    from kernel.writers import sglang as writer
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if args.interpreter:  # the writer path on the interpreter, labelled as such
        module = load_sglang(writer.QUANT_MODULE, "sglang writer (interpreter)")[0]
        writer._probe = lambda: (module, "")  # type: ignore[assignment]
        writer.WRITE_DEVICE = "cpu"
        source = "Triton's CPU interpreter (TRITON_INTERPRET=1): not the engine's bytes"
    else:
        reason = writer.unavailable_reason()
        if reason:
            print(f"sglang_writer_caches: {reason}", file=sys.stderr)
            return 2
        module = load_sglang(writer.QUANT_MODULE, "sglang writer")[0]
        source = f"sglang's quantiser on {torch.cuda.get_device_name(device)}"
    summary: dict[str, Any] = {"source": source, "torch": torch.__version__, "caches": {}}
    started = time.monotonic()

    latent, rope = activation_rows(args.rows)
    records = writer.quantise(module, latent.to(device), rope.to(device))  # checked in compare()
    torch.save({"kv_cache": records.cpu()}, args.out / "activations.pt")
    summary["caches"]["activations"] = compare(records, latent, rope)
    print(f"activations: {args.rows} rows, {time.monotonic() - started:.1f} s", flush=True)

    for dist in () if args.interpreter else LATENTS:  # under the interpreter the writer's check refuses every cache
        recipe = Recipe(seed=11, n_q=4, heads=2, row_lengths=(64, 64, 64, 64), cache_rows=512, writer="sglang", latent=dist)
        try:
            problem = materialize(recipe, device)
        except writer.SglangWriterError as err:  # the writer's own check refused what it wrote
            summary["caches"][f"recipe-{dist}"] = {"recipe": recipe.to_json(), "error": str(err)}
            print(f"recipe-{dist}: {err}", flush=True)
            continue
        torch.save(
            {"kv_cache": problem.kv_cache.cpu(), "indices": problem.indices.cpu(), "indptr": problem.indptr.cpu()},
            args.out / f"recipe-{dist}.pt",
        )
        rows = problem.referenced_rows
        kv = problem.kv_cache.cpu()[rows]
        summary["caches"][f"recipe-{dist}"] = {"recipe": recipe.to_json(), "consumed_records": int(rows.numel())} | {
            k: v for k, v in compare(kv, *(x.cpu() for x in _recipe_rows(recipe, rows, device))).items()
        }
        print(f"recipe-{dist}: {rows.numel()} records, {time.monotonic() - started:.1f} s", flush=True)

    if args.compare_with is not None:
        stored = torch.load(args.compare_with)
        again = writer.quantise(module, stored["latent"].to(device), stored["rope"].to(device)).cpu()
        diff = again != stored["sglang"]
        summary["compare_with"] = {
            "file": str(args.compare_with),
            "records": int(diff.shape[0]),
            "identical": int((~diff.any(1)).sum()),
            "differing_codes": int(diff[:, :512].sum()),
            "differing_scale_bytes": int(diff[:, 512:528].sum()),
            "differing_rope_bytes": int(diff[:, 528:].sum()),
            "rounding_failures_here": writer.rounding_failures(again, stored["latent"], stored["rope"]),
        }
        print(f"compare-with: {summary['compare_with']['identical']} of {diff.shape[0]} records identical", flush=True)
    summary["seconds"] = round(time.monotonic() - started, 1)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return 0


def _recipe_rows(recipe: Any, rows: Any, device: Any) -> tuple[Any, Any]:
    """(latent bf16, rope bf16) that strategies.materialize generates for the recipe's KV rows `rows`."""
    import torch

    from strategies.materialize import _values

    latent, rope, _ = _values(recipe, rows.to(device), torch.device(device))
    return latent.to(torch.bfloat16), rope


if __name__ == "__main__":
    sys.exit(main())
