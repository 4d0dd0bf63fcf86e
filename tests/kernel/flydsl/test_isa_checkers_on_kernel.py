"""The checkers on the real compiled kernel with its synchronisation removed: without its
barriers the interpreter must report LDS races, without its vmcnt waits DMA reads before their
wait, without its lgkmcnt waits register reads before their load completes."""

from __future__ import annotations

import pytest

pytest.importorskip("flydsl")

from kernel.flydsl.host import plan_call
from kernel.flydsl.isa_cache import kernel_asm
from kernel.isa.launch import IsaKernel
from strategies.materialize import materialize
from strategies.recipe import Recipe


def _kinds(drop) -> set[str]:
    text = kernel_asm(1, False, False)
    lines = [ln for ln in text.splitlines() if not drop(ln.strip())]
    k = IsaKernel.from_asm("\n".join(lines))
    r = Recipe(
        seed=5,
        n_q=1,
        heads=1,
        row_lengths=(150,),
        cache_rows=200,
        latent="exact",
        rope="exact",
        q="exact",
        softmax_scale="exact",
        return_lse=False,
    )
    p = materialize(r, "cpu")
    plan = plan_call(*p.args)
    bufs = [
        (plan.q_run, "q"),
        (plan.kv_cache, "kv"),
        (plan.indices, "idx"),
        (plan.indptr, "iptr"),
        (plan.out_run, "out"),
        (plan.zero, "zero"),
    ]
    stats = k.launch(plan.n_q, plan.args, bufs, checks="collect")
    return {f.kind for f in stats.findings}


def test_unmodified_kernel_is_clean() -> None:
    assert _kinds(lambda s: False) == set()


def test_without_barriers_lds_races_are_reported() -> None:
    assert "lds_race" in _kinds(lambda s: s == "s_barrier")


def test_without_vmcnt_waits_dma_reads_are_reported() -> None:
    kinds = _kinds(lambda s: s.startswith("s_waitcnt") and "vmcnt" in s)
    assert {"dma_before_wait", "lds_race"} & kinds and "register_before_wait" in kinds


def test_without_lgkmcnt_waits_early_reads_are_reported() -> None:
    assert "register_before_wait" in _kinds(lambda s: s.startswith("s_waitcnt") and "lgkmcnt" in s)
