"""Mutation self-test of the ISA checks: real bugs injected into a copy of the kernel source.

Each `Mutation` replaces exact text of kernel/flydsl/gfx950.py (each `old` must occur
exactly once, so a kernel edit that moves the code makes the catalogue fail loudly instead of
silently testing nothing). `run_mutations` writes each mutant to a temporary file, compiles it
for the given configurations in a subprocess (several mutants per subprocess, each loaded as its
own module with its own ISA dump folder; one that kills the process is compiled again alone with
compile.compile_configs(source=...)), and runs
every check (compile.check_isa, which includes isa_checks.check_program). A mutant is *flagged*
on a configuration when it compiled and at least one check failed; `expect` names the check ids
(isa_checks module docstring) the bug is meant to trip, and the self-test requires one of them
among the failures. A mutant that does not compile would not test the checks, so a compile
failure is reported as such, not as flagged.

CLI (prints the table docs/reference/flydsl-checks.md shows):
    python -m kernel.flydsl.isa_edits [--configs h5_i1_l0,h16_i0_l1] [--jobs 2] [--only ID,...]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernel.flydsl import compile as fc

KERNEL_SOURCE = Path(__file__).with_name("gfx950.py")
_CHECK_ID = re.compile(r"^\[([a-z0-9_.]+)\]")


@dataclass(frozen=True)
class Mutation:
    """One injected bug: `edits` are (old, new) exact replacements in gfx950.py; `expect` the
    check ids meant to flag it; `applies` which configurations show it (None: all)."""

    id: str
    bug: str
    edits: tuple[tuple[str, str], ...]
    expect: tuple[str, ...]
    applies: str | None = None  # "h<16": heads < 16 only; "l0": without return_lse only

    def applies_to(self, cfg: fc.Config) -> bool:
        h, _, rl = cfg
        if self.applies == "h<16":
            return h < 16
        if self.applies == "l0":
            return not rl
        return True


CATALOGUE: tuple[Mutation, ...] = (
    Mutation(
        "loop_top_sync_removed",
        "loop-top vmcnt(0) + barrier removed: QK reads the tile while its DMA is in flight",
        (("        wait_vm()\n        barrier()\n        # Tile t + 2's", "        # Tile t + 2's"),),
        ("sync.dma_read", "counts.tile"),
    ),
    Mutation(
        "record_offset_32bit",
        "record offset slot * 656 computed in 32 bits (wraps past 4 GiB)",
        (('row = c.a["kv"] + slot.i64() * RECORD_BYTES', 'row = c.a["kv"] + (slot * RECORD_BYTES).i64()'),),
        ("kv64.mul",),
    ),
    Mutation(
        "lo_scale_is_hi",
        "lo MFMAs given the hi E8M0 scale (lo residual 32x too large)",
        (("c.q_scale_lo = c.q_scale_hi - 5", "c.q_scale_lo = c.q_scale_hi"),),
        ("mfma.lo_scale",),
    ),
    Mutation(
        "lo_scale_minus_4",
        "lo E8M0 = hi - 4 (lo residual 2x too large)",
        (("c.q_scale_lo = c.q_scale_hi - 5", "c.q_scale_lo = c.q_scale_hi - 4"),),
        ("mfma.lo_scale",),
    ),
    Mutation(
        "dma_window_not_advanced",
        "every chunk's DMA lands in chunk 0's window (no new M0 per DMA)",
        (
            (
                "                window = c.lds + lds_k(c.wave, dma_token(hf, 0), ch)",
                "                window = c.lds + lds_k(c.wave, dma_token(hf, 0), 0)",
            ),
        ),
        ("sync.m0",),
    ),
    Mutation(
        "pv_operands_swapped",
        "PV MFMA with A and B swapped (P' as the V operand)",
        (
            (
                "out[ch] = mfma_f16(e4m3x8_to_f16x8(raws.pop(i)), pps[kc], out[ch])",
                "out[ch] = mfma_f16(pps[kc], e4m3x8_to_f16x8(raws.pop(i)), out[ch])",
            ),
        ),
        ("mfma.operands",),
    ),
    Mutation(
        "qk_operands_swapped",
        "QK hi MFMA with A and B swapped (Q as the K operand)",
        (
            (
                "x = mfma_scaled(a_op, c.q_hi[j], acc[s], 0, e8[s], 0, c.q_scale_hi)",
                "x = mfma_scaled(c.q_hi[j], a_op, acc[s], 0, e8[s], 0, c.q_scale_hi)",
            ),
        ),
        ("mfma.operands",),
    ),
    Mutation(
        "tr8_sub_offset_twice",
        "tr8 address adds the odd K-chunk's offset on top of its own base (wrong tokens for kc 1, 3)",
        (
            (
                "addr = tr_base[sub] + (tr8_address(0, kc, ch, 0, 0) - tr8_address(0, sub, 0, 0, 0))",
                "addr = tr_base[sub] + (tr8_address(0, kc, ch, 0, 0) - tr8_address(0, 0, 0, 0, 0))",
            ),
        ),
        ("layout.tr8",),
    ),
    Mutation(
        "refill_without_wait",
        "next tile's DMA issued before this wave's tr8 reads of the block completed (WAR)",
        (("            wait_lgkm()\n            issue_tile_dma(c, nxt)", "            issue_tile_dma(c, nxt)"),),
        ("sync.dma_war",),
    ),
    Mutation(
        "tile_max_barrier_removed",
        "tile max read before the other waves wrote theirs (barrier removed)",
        (
            (
                "    wait_lgkm()\n    barrier()\n    with no_wrap():\n        waves = ",
                "    wait_lgkm()\n    with no_wrap():\n        waves = ",
            ),
        ),
        ("counts.tile",),
    ),
    Mutation(
        "masked_reads_cache_row",
        "masked positions not zeroed: their loads read the cache row their index names",
        (('    return slot_valid(slot).sel(row, c.a["zero"])', "    return row"),),
        ("kv64.masked",),
    ),
    Mutation(
        "masked_score_kept",
        "masked positions keep their score instead of -1e30",
        (("            x = ok.sel(vec_get(sacc[s], r) * c_log2, masked_x)", "            x = vec_get(sacc[s], r) * c_log2"),),
        ("num.masked",),
    ),
    Mutation(
        "rows_in_order",
        "rows issued in order instead of reversed (long causal tail last)",
        (('self.qi = args["n_q"] - 1 - V(as_ir_value(fx.block_idx.x))', "self.qi = V(as_ir_value(fx.block_idx.x))"),),
        ("row.order",),
    ),
    Mutation(
        "rows_reversed_off_by_one",
        "reverse row order off by one (n_q - block id)",
        (('self.qi = args["n_q"] - 1 - V(as_ir_value(fx.block_idx.x))', 'self.qi = args["n_q"] - V(as_ir_value(fx.block_idx.x))'),),
        ("row.order",),
    ),
    Mutation(
        "p_shift_4",
        "P shift 4 instead of 8 (P = exp2(x - m + 4))",
        (("    m_shift = (m_new - P_SHIFT).fmax(M_FLOOR)", "    m_shift = (m_new - 4.0).fmax(M_FLOOR)"),),
        ("num.p_shift",),
    ),
    Mutation(
        "alpha_not_applied",
        "running max change not rescaled (alpha = 1)",
        (("    alpha = exp2(m_old - m_new)\n", "    alpha = cf(1.0)\n"),),
        ("counts.tile",),
    ),
    Mutation(
        "k_scale_not_masked",
        "record scale E8M0 taken as bits >> 23 (sign bit not masked off)",
        (("e8.append((scale_word >> 23) & 0xFF)", "e8.append(scale_word >> 23)"),),
        ("mfma.k_scale",),
    ),
    Mutation(
        "b_format_e5m2",
        "Q operand of the scaled MFMA declared e5m2",
        (
            (
                "(_vec(4, _f32()), a, b, acc, fmt, fmt, sel_a",
                '(_vec(4, _f32()), a, b, acc, fmt, ir.Attribute.parse("#rocdl<matrix_format fp8_e5m2>"), sel_a',
            ),
        ),
        ("mfma.format",),
    ),
    Mutation(
        "l_update_fused",
        "l = l * alpha + sum P as one fused multiply-add (one rounding where emulated has two)",
        (
            (
                "    l_new = l_old * alpha + total\n",
                "    l_new = V(__import__('flydsl._mlir.dialects.math', fromlist=['fma']).fma(l_old.v, alpha.v, total.v))\n",
            ),
        ),
        ("num.fma",),
    ),
    Mutation(
        "p_prime_rtz",
        "P' converted to f16 toward zero (v_cvt_pkrtz_f16_f32)",
        (
            (
                "        out.append(V(arith.truncf(_f16(), prod.v)))",
                "        out.append(V(vector.extract(rocdl.cvt_pkrtz(_vec(2, _f16()), prod.v, prod.v), [], [0])))",
            ),
        ),
        ("num.rtz",),
    ),
    Mutation(
        "head_guard_dropped",
        "output stores of heads >= H not masked (writes past the row)",
        (("    if_then(c.h_ok, store_out)", "    store_out()"),),
        ("store.guard",),
        applies="h<16",
    ),
    Mutation(
        "lse_always_stored",
        "lse computed and stored without return_lse (writes through a null pointer)",
        (("    if c.return_lse:\n        lse = ", "    if True:\n        lse = "),),
        ("counts.kernel",),
        applies="l0",
    ),
)


def mutant_source(m: Mutation, source: str) -> str:
    """The kernel source with m's edits applied; ValueError when an `old` text does not occur
    exactly once."""
    out = source
    for old, new in m.edits:
        n = out.count(old)
        if n != 1:
            raise ValueError(f"mutation {m.id}: the text to replace occurs {n} times in gfx950.py: {old[:60]!r}")
        out = out.replace(old, new)
    return out


@dataclass
class MutantResult:
    """One mutant on one configuration: compiled?, the check ids that failed, first messages."""

    mutation: str
    config: str
    compiled: bool
    checks: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def flagged(self) -> bool:
        return self.compiled and bool(self.checks)


def check_ids(failures: Sequence[str]) -> list[str]:
    """Check ids of compile.check_isa failure strings ('[id] message'; budget failures -> 'budget')."""
    out = []
    for f in failures:
        m = _CHECK_ID.match(f)
        cid = m.group(1) if m else "budget"
        if cid not in out:
            out.append(cid)
    return out


def _result(m_id: str, r: fc.ConfigResult) -> MutantResult:
    compiled = r.stats is not None and not r.error
    return MutantResult(
        m_id,
        r.label,
        compiled,
        check_ids(r.failures) if compiled else [],
        list(r.failures[:3]),
        r.error.splitlines()[-1] if r.error else "",
    )


def _batch_worker(manifest: str) -> int:
    """Subprocess body: for each mutant of the manifest (a JSON file: [{"id", "source",
    "dump_dir", "configs"}]), a marker line {"mutant": id}, then compile.py's worker on its
    configurations, its ISA dumped under its own dump_dir. One process pays the imports once."""
    import json

    for item in json.loads(Path(manifest).read_text(encoding="utf-8")):
        print(json.dumps({"mutant": item["id"]}), flush=True)
        os.environ["FLYDSL_KERNEL_SOURCE"] = item["source"]
        os.environ["FLYDSL_DUMP_DIR"] = item["dump_dir"]
        fc._worker([(int(h), bool(hi), bool(rl)) for h, hi, rl in item["configs"]])
    return 0


def _run_batch(work: Sequence[tuple[Mutation, list[fc.Config]]], src: str, tmp: Path, timeout: float) -> dict[str, list[MutantResult]]:
    """Compile the mutants of `work` in one subprocess; the results of every mutant it finished.
    A mutant whose compile kills the process (and those after it) is missing from the result."""
    import json
    import subprocess

    from kernel.flydsl.gfx950 import kernel_name

    items = []
    for m, cfgs in work:
        path = tmp / f"{m.id}.py"
        path.write_text(mutant_source(m, src), encoding="utf-8")
        dump = tmp / f"dump_{m.id}"
        dump.mkdir()
        items.append({"id": m.id, "source": str(path), "dump_dir": str(dump), "configs": [list(c) for c in cfgs]})
    manifest = tmp / f"batch_{work[0][0].id}.json"
    manifest.write_text(json.dumps(items), encoding="utf-8")
    env = fc.compile_env(fc.ensure_toolchain(), tmp)
    cmd = [sys.executable, "-m", "kernel.flydsl.isa_edits", "--batch-worker", str(manifest)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(fc.REPO_ROOT), check=False).stdout
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
    finished: dict[str, set[fc.Config]] = {}
    current = None
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if "mutant" in rec:
            current = rec["mutant"]
            finished[current] = set()
        elif "config" in rec and current is not None:
            h, hi, rl = rec["config"]
            finished[current].add((int(h), bool(hi), bool(rl)))
    results: dict[str, list[MutantResult]] = {}
    for m, cfgs in work:
        if set(cfgs) - finished.get(m.id, set()):
            continue  # the process died in (or before) this mutant: it is compiled again alone
        res = []
        for h, hi, rl in cfgs:
            isa = fc._find_isa(tmp / f"dump_{m.id}", kernel_name(h, hi, rl))
            if isa is None:
                res.append(_result(m.id, fc.ConfigResult(h, hi, rl, ok=False, error=f"no ISA dump found for {m.id}")))
                continue
            stats, failures = fc.check_isa(isa.read_text(encoding="utf-8"))
            res.append(_result(m.id, fc.ConfigResult(h, hi, rl, ok=not failures, stats=stats, failures=failures, isa_path=str(isa))))
        results[m.id] = res
    return results


def run_mutations(
    mutations: Sequence[Mutation],
    configs: Sequence[fc.Config] | Mapping[str, Sequence[fc.Config]],
    *,
    jobs: int = 1,
    timeout: float = fc.DEFAULT_TIMEOUT_S,
    per_process: int = 1,
) -> list[MutantResult]:
    """Compile and check every mutant on the configurations it applies to (of `configs`, or of
    `configs[mutant id]` when it is a mapping; a mutant missing from the mapping is skipped): `per_process` mutants
    share one subprocess (its ~6 CPU-s of imports paid once; each mutant's ISA dumped apart),
    `jobs` subprocesses at once. A mutant whose compile kills a shared process, and any the
    process did not reach, are compiled again one per process (a mutant that crashes the
    compiler is reported as not compiled, with the error). Results in the order of `mutations`."""
    import concurrent.futures

    src = KERNEL_SOURCE.read_text()
    work = [(m, [c for c in (configs.get(m.id, ()) if isinstance(configs, Mapping) else configs) if m.applies_to(c)]) for m in mutations]
    work = [(m, cfgs) for m, cfgs in work if cfgs]
    per_process = max(1, int(per_process))
    batches = [work[i : i + per_process] for i in range(0, len(work), per_process)]
    done: dict[str, list[MutantResult]] = {}
    with tempfile.TemporaryDirectory(prefix="flydsl_mutants_") as tmp:

        def alone(m: Mutation, cfgs: list[fc.Config]) -> list[MutantResult]:
            path = Path(tmp) / f"alone_{m.id}.py"
            path.write_text(mutant_source(m, src), encoding="utf-8")
            return [_result(m.id, r) for r in fc.compile_configs(cfgs, per_process=len(cfgs), timeout=timeout, source=str(path))]

        def batch(b: list[tuple[Mutation, list[fc.Config]]]) -> dict[str, list[MutantResult]]:
            if len(b) == 1:
                return {b[0][0].id: alone(*b[0])}
            sub = Path(tmp) / f"b_{b[0][0].id}"
            sub.mkdir()
            got = _run_batch(b, src, sub, timeout)
            for m, cfgs in b:
                if m.id not in got:
                    got[m.id] = alone(m, cfgs)
            return got

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for f in [pool.submit(batch, b) for b in batches]:
                done.update(f.result())
    return [r for m, _ in work for r in done[m.id]]


def format_table(mutations: Sequence[Mutation], results: Sequence[MutantResult]) -> str:
    """Markdown table: bug -> checks that flag it, per configuration."""
    by = {(r.mutation, r.config): r for r in results}
    configs = sorted({r.config for r in results})
    lines = [
        "| mutant | bug | expected check | " + " | ".join(f"flagged by ({c})" for c in configs) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in configs) + " |",
    ]
    for m in mutations:
        cells = []
        for c in configs:
            r = by.get((m.id, c))
            if r is None:
                cells.append("n/a")
            elif not r.compiled:
                cells.append("NOT COMPILED")
            else:
                cells.append(", ".join(r.checks) if r.checks else "**NOT FLAGGED**")
        lines.append(f"| `{m.id}` | {m.bug} | {', '.join(m.expect)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernel.flydsl.isa_edits", description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="h5_i1_l0,h16_i0_l1", help="configuration labels hH_iI_lL (default: the CI pair)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated mutation ids")
    ap.add_argument("--per-process", type=int, default=4, help="mutants per compile subprocess (default 4)")
    ap.add_argument("--batch-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.batch_worker is not None:
        return _batch_worker(args.batch_worker)
    configs = []
    for label in args.configs.split(","):
        m = re.fullmatch(r"h(\d+)_i([01])_l([01])", label.strip())
        if not m or not 1 <= int(m.group(1)) <= 16:
            ap.error(f"bad configuration label {label!r} (expected e.g. h5_i1_l0)")
        configs.append((int(m.group(1)), m.group(2) == "1", m.group(3) == "1"))
    muts = [m for m in CATALOGUE if not args.only or m.id in args.only.split(",")]
    t0 = time.perf_counter()
    res = run_mutations(muts, configs, jobs=args.jobs, per_process=args.per_process)
    print(format_table(muts, res))
    bad = [r for r in res if not r.flagged or not set(r.checks) & set(next(m for m in muts if m.id == r.mutation).expect)]
    for r in bad:
        print(f"{r.mutation} {r.config}: compiled={r.compiled} checks={r.checks} {r.error}", file=sys.stderr)
    print(
        f"{len(muts)} mutants x {len(configs)} configurations: {len(res) - len(bad)}/{len(res)} flagged by an "
        f"expected check; wall {time.perf_counter() - t0:.1f} s with {args.jobs} jobs"
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
