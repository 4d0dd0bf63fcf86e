"""The static memory-pipeline model (kernel/flydsl/pipeline_model.py) and what it says
about the kernel's tile loop against the seed's documented structure."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernel.flydsl import compile as fc
from kernel.flydsl import pipeline_model as pm
from kernel.isa.asm import parse_program

HAVE_FLYDSL = importlib.util.find_spec("flydsl") is not None
TR8 = "PV V tr8 (ds_read_b64_tr_b8)"


def test_bank_model_basics():
    assert pm.lds_cycles([4 * lane for lane in range(64)], 4) == 1  # 64 consecutive dwords
    assert pm.lds_cycles([256 * lane for lane in range(64)], 4) == 64  # one bank, 64 addresses
    assert pm.lds_cycles([128] * 64, 4) == 1  # broadcast
    assert pm.lds_cycles([16 * lane for lane in range(64)], 16) == 4  # 4 phases of 16 lanes
    assert pm.lds_cycles([8 * lane for lane in range(64)], 8) == 2
    # two 8-byte lanes per phase on the same banks, different addresses: 2-way
    addrs = [8 * (lane % 16) + 1024 * (lane // 16) for lane in range(64)]
    assert pm.lds_cycles(addrs, 8) == 4


def _pat(layout):
    return {p.name: p for p in pm.tile_patterns(layout)}


def test_tr8_reads_conflict_free_like_the_seed():
    before, after, seed = _pat(pm.unswizzled_layout()), _pat(pm.current_layout()), _pat(pm.seed_layout())
    # the unswizzled [chunk][token] layout: lane groups 0/1 (and 2/3) hit the same banks
    assert before[TR8].cycles_each == 2 * before[TR8].minimum_each and before[TR8].per_tile == 128
    assert seed[TR8].cycles_each == seed[TR8].minimum_each and seed[TR8].per_tile == 64
    assert after[TR8].per_tile == seed[TR8].per_tile == 32 * after[TR8].minimum_each
    # every read pattern of the current layout is at its conflict-free minimum, on every wave
    for w in range(4):
        for p in pm.tile_patterns(pm.current_layout(), w):
            assert p.cycles_each == p.minimum_each, p
    # the QK record-scale word: 4-way before the padded rows
    assert before["QK record scale word (ds_read_b32)"].cycles_each == 4


def test_scoreboard_waits():
    text = (
        "k:\n\tglobal_load_dword v1, v[2:3], off\n\tv_add_u32_e32 v4, v5, v6\n"
        "\ts_waitcnt vmcnt(0)\n\tv_add_u32_e32 v7, v1, v1\n\ts_endpgm\n"
    )
    prog = parse_program(text)
    costs = pm.Costs(vm_latency=100)
    est = pm.simulate(prog.instrs[:-1], lambda i: 1, costs, iterations=1)
    # issued at 0, done at 100; the wait starts after the load (4) and the add (4)
    assert [s[2] for s in est.stalls] == [100 - 8]


def test_seed_listing_has_the_documented_structure():
    prog = parse_program(pm.seed_tile_listing())
    ms = [i.mnemonic for i in prog.instrs]
    assert ms.count("v_mfma_scale_f32_16x16x128_f8f6f4") == 16 and ms.count("v_mfma_f32_16x16x32_f16") == 32
    assert ms.count("ds_read_b64_tr_b8") == 32 and ms.count("global_load_lds_dwordx4") == 16 and ms.count("s_barrier") == 3
    last_dma = max(k for k, m in enumerate(ms) if m == "global_load_lds_dwordx4")
    assert ms[last_dma:].count("v_mfma_f32_16x16x32_f16") == 16  # refill halfway through PV


@pytest.fixture(scope="module")
def isa_text(tmp_path_factory) -> str:
    if not HAVE_FLYDSL:
        pytest.skip("flydsl is not installed: pip install 'flydsl>=0.4,<0.5' (and ziglang)")
    fc.ensure_toolchain()
    root = Path(tmp_path_factory.mktemp("pm_isa"))
    res = fc.compile_configs([(16, False, False)], dump_root=root)[0]
    assert res.ok, res.failures or res.error
    return Path(res.isa_path).read_text()


def test_tile_loop_pipeline_matches_or_beats_the_seed(isa_text):
    path = pm.loop_path(parse_program(isa_text))
    ms = [i.mnemonic for i in path]
    # refill DMA halfway through PV, as the seed: 16 of the 32 f16 MFMAs after the last DMA
    last_dma = max(k for k, m in enumerate(ms) if m.startswith("global_load_lds"))
    assert ms[last_dma:].count("v_mfma_f32_16x16x32_f16") == 16
    for lat in (500, 1000, 2000):
        costs = pm.Costs(vm_latency=lat)
        mine = pm.estimate_isa(isa_text, pm.current_layout(), costs)
        seed = pm.estimate_seed(costs)
        vm_stalls = [s for s in mine.stalls if "vmcnt" in s[1]]
        # the only VMEM wait that stalls is the loop-top vmcnt(0): no index or rope load is
        # waited for inside the tile that issues it
        assert len(vm_stalls) <= 1 and all(s[1] == "vmcnt(0)" for s in vm_stalls), vm_stalls
        seed_vm = sum(s[2] for s in seed.stalls if "vmcnt" in s[1])
        assert sum(s[2] for s in vm_stalls) <= seed_vm
        assert mine.lds_busy <= seed.lds_busy
