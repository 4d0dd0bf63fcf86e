"""Mutation self-test of the FlyDSL kernel's ISA checks (kernel/flydsl/isa_edits.py).

Every mutant of the catalogue (a real bug injected into a copy of gfx950.py) is compiled for
the configurations it applies to and must compile and be flagged by one of the checks it is meant
to trip. With FLYDSL_COMPILE_ALL=1 each mutant is compiled for both CONFIGS it applies to; by
default for one of them (about 4.5 CPU-s per mutant and configuration), the two taken in turn
along the catalogue so that both are exercised. The mutants are compiled in batches, one
subprocess per batch (its imports paid once), one test per batch; a failure names every mutant
of the batch that was not flagged as expected.
The unmutated kernel passing the same checks is tests/kernel/flydsl/test_compile.py's
test_compile_and_check_isa (25 configurations; all 64 with FLYDSL_COMPILE_ALL=1). Synthetic dumps test the dataflow checks
without flydsl.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from kernel.flydsl import compile as fc
from kernel.flydsl import isa_checks as ic
from kernel.flydsl import isa_edits as mu
from kernel.flydsl.isa_flow import iteration_paths
from kernel.isa.asm import parse_program

HAVE_FLYDSL = importlib.util.find_spec("flydsl") is not None
# H < 16 (exec guards) with has_invalid and without lse; H = 16 without has_invalid, with lse.
CONFIGS = [(5, True, False), (16, False, True)]


def test_catalogue_applies_to_the_current_source():
    src = mu.KERNEL_SOURCE.read_text()
    ids = [m.id for m in mu.CATALOGUE]
    assert len(ids) >= 10 and len(set(ids)) == len(ids)
    for m in mu.CATALOGUE:
        out = mu.mutant_source(m, src)  # raises unless every edit's text occurs exactly once
        assert out != src
        assert m.expect and all(e.split(".")[0] in {"counts", "kv64", "sync", "mfma", "layout", "num", "store", "row"} for e in m.expect)
        assert any(m.applies_to(c) for c in CONFIGS)


def test_mutant_source_rejects_missing_text():
    bad = mu.Mutation("x", "x", (("no such text in the kernel", "y"),), ("counts.tile",))
    with pytest.raises(ValueError):
        mu.mutant_source(bad, mu.KERNEL_SOURCE.read_text())


BATCH = 6
BATCHES = [mu.CATALOGUE[i : i + BATCH] for i in range(0, len(mu.CATALOGUE), BATCH)]


def configs_of(mutation: mu.Mutation) -> list[fc.Config]:
    """The configurations a mutant is compiled for here (see the module docstring)."""
    applicable = [c for c in CONFIGS if mutation.applies_to(c)]
    if os.environ.get("FLYDSL_COMPILE_ALL") or not applicable:
        return applicable
    return [applicable[[m.id for m in mu.CATALOGUE].index(mutation.id) % len(applicable)]]


def test_both_configurations_are_exercised():
    assert {c for m in mu.CATALOGUE for c in configs_of(m)} == set(CONFIGS)


@pytest.mark.long
@pytest.mark.parametrize("batch", [pytest.param(b, id=f"{b[0].id}..{b[-1].id}") for b in BATCHES])
def test_mutants_are_flagged(batch):
    if not HAVE_FLYDSL:
        pytest.skip("flydsl is not installed: pip install 'flydsl>=0.4,<0.5' (and ziglang) to run the mutation self-test")
    fc.ensure_toolchain()
    results = mu.run_mutations(batch, {m.id: configs_of(m) for m in batch}, per_process=len(batch))
    problems = []
    for mutation in batch:
        mine = [r for r in results if r.mutation == mutation.id]
        if not mine:
            problems.append(f"{mutation.id}: the mutant applies to no configuration")
        for r in mine:
            if not r.compiled:
                problems.append(f"{mutation.id} {r.config}: the mutant did not compile ({r.error}); it would not test the checks")
            elif not r.flagged:
                problems.append(f"{mutation.id} {r.config}: no check flags it")
            elif not set(r.checks) & set(mutation.expect):
                problems.append(f"{mutation.id} {r.config}: flagged by {r.checks}, expected one of {mutation.expect}")
    assert not problems, "\n".join(problems)


def test_a_mutant_that_kills_the_compiler_is_compiled_again_alone():
    """A batch whose process dies in one mutant: that mutant is reported as not compiled (with the
    process's exit), the mutants after it are compiled again one per process and still judged."""
    if not HAVE_FLYDSL:
        pytest.skip("flydsl is not installed")
    fc.ensure_toolchain()
    exits = ("\ndef build_launcher(", "\nimport os\nos._exit(3)\ndef build_launcher(")
    killer = mu.Mutation("killer", "the module exits", (exits,), ("counts.tile",))
    real = next(m for m in mu.CATALOGUE if m.applies_to(CONFIGS[0]))
    results = mu.run_mutations([killer, real], CONFIGS[:1], per_process=2)
    assert [(r.mutation, r.compiled) for r in results] == [("killer", False), (real.id, True)]
    assert results[0].error  # the process's exit, named
    assert set(results[1].checks) & set(real.expect)


# ================================================================ the dataflow on synthetic dumps

_HEAD = "sparse_mla_fp8ds_gfx950_h16_i0_l0:\n"


def _sync(body: str) -> list[str]:
    prog = parse_program(_HEAD + body)
    k = ic.Kernel(prog, 16, False, False, None, [])
    return [f.check for f in ic.check_sync(k)]


def test_barrier_needs_lds_writes_done():
    assert _sync("\tds_write_b32 v1, v2\n\ts_barrier\n\ts_endpgm\n") == ["sync.barrier"]
    assert _sync("\tds_write_b32 v1, v2\n\ts_waitcnt lgkmcnt(0)\n\ts_barrier\n\ts_endpgm\n") == []
    # a register permute is not an LDS memory operation
    assert _sync("\tds_bpermute_b32 v1, v2, v3\n\ts_barrier\n\ts_endpgm\n") == []


def test_lds_read_after_dma_needs_wait_and_barrier():
    dma = "\ts_mov_b32 m0, s4\n\tglobal_load_lds_dwordx4 v[2:3], off\n"
    assert _sync(dma + "\tds_read_b128 v[4:7], v1\n\ts_endpgm\n") == ["sync.dma_read"]
    assert _sync(dma + "\ts_waitcnt vmcnt(0)\n\tds_read_b128 v[4:7], v1\n\ts_endpgm\n") == ["sync.dma_read"]
    assert _sync(dma + "\ts_waitcnt vmcnt(0)\n\ts_barrier\n\tds_read_b128 v[4:7], v1\n\ts_endpgm\n") == []
    # a later load keeps vmcnt(1) sufficient for the DMA, vmcnt(2) is not
    later = dma + "\tglobal_load_dwordx4 v[8:11], v[2:3], off\n"
    assert _sync(later + "\ts_waitcnt vmcnt(1)\n\ts_barrier\n\tds_read_b128 v[4:7], v1\n\ts_endpgm\n") == []
    assert _sync(later + "\ts_waitcnt vmcnt(2)\n\ts_barrier\n\tds_read_b128 v[4:7], v1\n\ts_endpgm\n") == ["sync.dma_read"]


def test_dma_needs_m0_and_no_outstanding_lds_reads():
    assert _sync("\ts_mov_b32 m0, s4\n\tglobal_load_lds_dwordx4 v[2:3], off\n\tglobal_load_lds_dwordx4 v[4:5], off\n\ts_endpgm\n") == [
        "sync.m0"
    ]
    assert _sync("\tds_read_b64_tr_b8 v[6:7], v1\n\ts_mov_b32 m0, s4\n\tglobal_load_lds_dwordx4 v[2:3], off\n\ts_endpgm\n") == [
        "sync.dma_war"
    ]


def test_dataflow_joins_paths_around_a_loop():
    # the DMA at the loop's end reaches the read at its top through the back edge
    body = (
        "\ts_waitcnt vmcnt(0)\n\ts_barrier\n"
        ".LBB0_1:\n\tds_read_b128 v[4:7], v1\n\ts_waitcnt lgkmcnt(0)\n"
        "\ts_mov_b32 m0, s4\n\tglobal_load_lds_dwordx4 v[2:3], off\n\ts_cbranch_scc1 .LBB0_1\n\ts_endpgm\n"
    )
    assert "sync.dma_read" in _sync(body)
    fixed = body.replace(".LBB0_1:\n", ".LBB0_1:\n\ts_waitcnt vmcnt(0)\n\ts_barrier\n")
    assert _sync(fixed) == []
    prog = parse_program(_HEAD + fixed)
    assert len(prog.loops) == 1 and len(iteration_paths(prog, prog.loops[0])) == 1
