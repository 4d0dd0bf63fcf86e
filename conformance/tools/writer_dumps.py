"""Caches written by sglang's quantiser (kernel.writers.sglang): checked, compared with the
project's writers record by record, and dumped for `python -m conformance preconditions`.

`write_caches(out, ...)` writes under the folder `out`:
- activations.pt ({"kv_cache"}): N rows shaped like real activations (a quarter Student-t(2)
  heavy tails, one outlier channel x50, N/64 rows with an all-zero first tile, N/64 rows scaled by
  2^-20 and N/64 by 2^10, the rest normal), a whole-cache dump;
- recipe-LATENT.pt ({"kv_cache", "indices", "indptr"}) per latent distribution of the strategies:
  the problem strategies.materialize builds for a recipe with writer "sglang" (4 rows of 64 keys
  from a 512-row cache; not under the interpreter, whose bytes the writer's check refuses);
- summary.json: per cache, the writer check (kernel.writers.sglang.rounding_failures), the bytes
  against pow2 / pow2-floor / raw (kernel.record.encode_records) record by record (identical,
  differing in codes / scales / rope), the scales that are not powers of two, zero, above 2^7;
  with `compare_with` (a .pt of {"latent", "rope", "sglang"}: records written elsewhere, e.g.
  tests/kernel/writers/data/sglang_writer_h200.pt), its inputs written here and the bytes compared.

`interpreter=True` runs sglang's kernel under Triton's CPU interpreter (TRITON_INTERPRET=1) on CPU
tensors: to try the steps on a machine without CUDA, and to compare the interpreter's bytes with a
GPU's (`compare_with`): the summary then says "interpreter", not the engine.

The command line: `python -m conformance dumps sglang-writer` (conformance.cli.dumps).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
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


class WriterDumpError(RuntimeError):
    """The caches cannot be written here (the message says why in one line)."""


def write_caches(
    out: Path,
    *,
    rows: int = 4096,
    interpreter: bool = False,
    compare_with: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Write the caches and summary.json under `out` (created); return the summary (module
    docstring). WriterDumpError when sglang's writer cannot run here (the engine's bytes need CUDA;
    the interpreter needs sglang and Triton) or `compare_with` is unreadable."""
    from kernel.writers import sglang as writer

    saved = (writer._probe, writer.WRITE_DEVICE, os.environ.get("TRITON_INTERPRET"))
    try:
        return _write_caches(out, rows=rows, interpreter=interpreter, compare_with=compare_with, log=log)
    finally:  # the interpreter's writer path is this call's only
        writer._probe, writer.WRITE_DEVICE = saved[0], saved[1]  # type: ignore[assignment]
        if saved[2] is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved[2]


def _write_caches(out: Path, *, rows: int, interpreter: bool, compare_with: Path | None, log: Callable[[str], None]) -> dict[str, Any]:
    if interpreter:
        os.environ["TRITON_INTERPRET"] = "1"  # before sglang's kernel is decorated (at its import)
    import torch

    from kernel.backend import BackendUnavailable
    from kernel.engines import load_sglang
    from kernel.writers import sglang as writer
    from strategies.materialize import materialize
    from strategies.recipe import Recipe

    stored = None
    if compare_with is not None:
        try:
            stored = torch.load(compare_with, weights_only=True)
            stored = {k: stored[k] for k in ("latent", "rope", "sglang")}
        except Exception as err:  # noqa: BLE001 - any unreadable file: one line
            raise WriterDumpError(f"{compare_with}: not a .pt of latent, rope and sglang records ({type(err).__name__}: {err})") from None
    try:
        if interpreter:  # the writer path on the interpreter, labelled as such
            module = load_sglang(writer.QUANT_MODULE, "sglang writer (interpreter)")[0]
            writer._probe = lambda: (module, "")  # type: ignore[assignment]
            writer.WRITE_DEVICE = "cpu"
            device = torch.device("cpu")
            source = "Triton's CPU interpreter (TRITON_INTERPRET=1): not the engine's bytes"
        else:
            reason = writer.unavailable_reason()
            if reason:
                raise WriterDumpError(reason)
            module = load_sglang(writer.QUANT_MODULE, "sglang writer")[0]
            device = torch.device("cuda")
            source = f"sglang's quantiser on {torch.cuda.get_device_name(device)}"
    except BackendUnavailable as err:
        raise WriterDumpError(str(err)) from None
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"source": source, "torch": torch.__version__, "caches": {}}
    started = time.monotonic()

    latent, rope = activation_rows(rows)
    records = writer.quantise(module, latent.to(device), rope.to(device))  # checked in compare()
    torch.save({"kv_cache": records.cpu()}, out / "activations.pt")
    summary["caches"]["activations"] = compare(records, latent, rope)
    log(f"activations: {rows} rows, {time.monotonic() - started:.1f} s")

    for dist in () if interpreter else LATENTS:  # under the interpreter the writer's check refuses every cache
        recipe = Recipe(seed=11, n_q=4, heads=2, row_lengths=(64, 64, 64, 64), cache_rows=512, writer="sglang", latent=dist)
        try:
            problem = materialize(recipe, device)
        except writer.SglangWriterError as err:  # the writer's own check refused what it wrote
            summary["caches"][f"recipe-{dist}"] = {"recipe": recipe.to_json(), "error": str(err)}
            log(f"recipe-{dist}: {err}")
            continue
        torch.save(
            {"kv_cache": problem.kv_cache.cpu(), "indices": problem.indices.cpu(), "indptr": problem.indptr.cpu()},
            out / f"recipe-{dist}.pt",
        )
        referenced = problem.referenced_rows
        kv = problem.kv_cache.cpu()[referenced]
        summary["caches"][f"recipe-{dist}"] = {"recipe": recipe.to_json(), "consumed_records": int(referenced.numel())} | {
            k: v for k, v in compare(kv, *(x.cpu() for x in _recipe_rows(recipe, referenced, device))).items()
        }
        log(f"recipe-{dist}: {referenced.numel()} records, {time.monotonic() - started:.1f} s")

    if stored is not None:
        again = writer.quantise(module, stored["latent"].to(device), stored["rope"].to(device)).cpu()
        diff = again != stored["sglang"]
        summary["compare_with"] = {
            "file": str(compare_with),
            "records": int(diff.shape[0]),
            "identical": int((~diff.any(1)).sum()),
            "differing_codes": int(diff[:, :512].sum()),
            "differing_scale_bytes": int(diff[:, 512:528].sum()),
            "differing_rope_bytes": int(diff[:, 528:].sum()),
            "rounding_failures_here": writer.rounding_failures(again, stored["latent"], stored["rope"]),
        }
        log(f"compare-with: {summary['compare_with']['identical']} of {diff.shape[0]} records identical")
    summary["seconds"] = round(time.monotonic() - started, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def _recipe_rows(recipe: Any, rows: Any, device: Any) -> tuple[Any, Any]:
    """(latent bf16, rope bf16) that strategies.materialize generates for the recipe's KV rows `rows`."""
    import torch

    from strategies.materialize import _values

    latent, rope, _ = _values(recipe, rows.to(device), torch.device(device))
    return latent.to(torch.bfloat16), rope
