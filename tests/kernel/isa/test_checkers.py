"""The interpreter's checkers on small hand-written programs that race, read uninitialized
registers, access out of range, and read DMA'd LDS data before its wait; and clean variants
that must report nothing."""

from __future__ import annotations

import numpy as np
import pytest

from kernel.isa.errors import CheckFailed
from kernel.isa.state import GlobalMemory
from tests.kernel.isa.harness import run_asm, sset, vset

LANE = np.arange(64)

EXCHANGE = """
v_and_b32_e32 v1, 63, v0
v_lshlrev_b32_e32 v1, 2, v1
v_readfirstlane_b32 s6, v0
s_cmp_lt_u32 s6, 64
s_cbranch_scc0 .LBB0_1
ds_write_b32 v1, v0
s_waitcnt lgkmcnt(0)
{barrier}
s_branch .LBB0_2
.LBB0_1:
{barrier}
ds_read_b32 v2, v1
s_waitcnt lgkmcnt(0)
.LBB0_2:
s_nop 0
"""


def _findings(body: str, **kw):
    r = run_asm(body, checks="collect", **kw)
    return r, r.workgroup.checks.findings


def test_lds_race_without_barrier() -> None:
    _, f = _findings(EXCHANGE.format(barrier="s_nop 0"), threads=128)
    assert [x.kind for x in f] == ["lds_race"]
    assert f[0].wave == 1 and f[0].text == "ds_read_b32 v2, v1" and f[0].lanes == list(range(64))
    assert f[0].pc == 10  # instruction index (labels take none)


def test_lds_exchange_with_barrier_is_clean() -> None:
    r, f = _findings(EXCHANGE.format(barrier="s_barrier"), threads=128)
    assert f == []
    assert r.waves[1].v[2].tolist() == list(range(64))  # wave 1 reads wave 0's writes
    assert r.barriers == 1


def test_uninitialized_vgpr_sgpr_and_partial_exec() -> None:
    _, f = _findings("v_add_u32_e32 v2, v5, v0")
    assert f[0].kind == "uninitialized_read" and f[0].pc == 0 and len(f[0].lanes) == 64 and "v5" in f[0].detail
    _, f = _findings("s_add_u32 s2, s9, 1")
    assert f[0].kind == "uninitialized_read" and "s9" in f[0].detail
    _, f = _findings("""
        v_cmp_gt_u32_e32 vcc, 8, v0
        s_and_saveexec_b64 s[4:5], vcc
        v_mov_b32_e32 v3, 1
        s_mov_b64 exec, s[4:5]
        v_add_u32_e32 v4, v3, v0
    """)
    assert len(f) == 1 and f[0].pc == 4 and f[0].lanes == list(range(8, 64))


def test_partial_writes_are_not_reads() -> None:
    """v_cvt_pk_fp8_f32 keeps the other word of its destination: filling both words of a
    never-written register and then reading it is clean; reading it after only one is not."""
    body = """
        v_mov_b32_e32 v10, 1.0
        v_cvt_pk_fp8_f32 v2, v10, v10
        v_cvt_pk_fp8_f32 v2, v10, v10 op_sel:[0,0,1]
        v_mov_b32_e32 v3, v2
    """
    r, f = _findings(body)
    assert f == [] and int(r.waves[0].v[3][0]) == 0x38383838
    _, f = _findings(body.replace("    v_cvt_pk_fp8_f32 v2, v10, v10 op_sel:[0,0,1]\n", ""))
    assert [x.kind for x in f] == ["uninitialized_read"] and f[0].pc == 2


def _buffer():
    arr = np.arange(64, dtype=np.uint32)
    mem = GlobalMemory()
    mem.add_array(arr.ctypes.data, arr.view(np.uint8), "buf")
    return mem, arr.ctypes.data


def _v64(w, idx, addrs):
    a = np.broadcast_to(np.asarray(addrs, dtype=np.uint64), (64,))
    vset(w, idx, a & np.uint64(0xFFFFFFFF))
    vset(w, idx + 1, a >> np.uint64(32))


def test_out_of_bounds_global_buffer_and_lds() -> None:
    mem, a = _buffer()
    _, f = _findings(
        "global_load_dword v2, v[10:11], off\ns_waitcnt vmcnt(0)", mem=mem, setup=lambda w: _v64(w, 10, a + 4 * LANE + 8)
    )  # lanes 62, 63 past the end
    assert [x.kind for x in f] == ["out_of_bounds"] and f[0].lanes == [62, 63]

    def setup(w):
        sset(w, 4, a & 0xFFFFFFFF)
        sset(w, 5, a >> 32)
        sset(w, 6, 1 << 20)  # the descriptor claims more than the tensor holds
        sset(w, 7, 0x27000)
        vset(w, 10, 4 * LANE + 4)

    _, f = _findings("buffer_load_dword v2, v10, s[4:7], 0 offen\ns_waitcnt vmcnt(0)", mem=mem, setup=setup)
    assert [x.kind for x in f] == ["out_of_bounds"] and f[0].lanes == [63]
    _, f = _findings("ds_read_b32 v2, v10\ns_waitcnt lgkmcnt(0)", lds=256, setup=lambda w: vset(w, 10, 4 * LANE + 8))
    assert [x.kind for x in f] == ["out_of_bounds"] and f[0].lanes == [62, 63]


def test_dma_read_before_wait() -> None:
    mem, a = _buffer()

    def setup(w):
        _v64(w, 10, a + 4 * LANE)
        sset(w, 124, 0)
        vset(w, 1, 4 * LANE)

    early = """
        global_load_lds_dword v[10:11], off
        ds_read_b32 v2, v1
        s_waitcnt vmcnt(0) lgkmcnt(0)
    """
    _, f = _findings(early, mem=mem, setup=setup)
    assert [x.kind for x in f] == ["dma_before_wait"] and f[0].pc == 1 and len(f[0].lanes) == 64
    r, f = _findings(
        """
        global_load_lds_dword v[10:11], off
        s_waitcnt vmcnt(0)
        ds_read_b32 v2, v1
        s_waitcnt lgkmcnt(0)
    """,
        mem=mem,
        setup=setup,
    )
    assert f == [] and r.waves[0].v[2].tolist() == list(range(64))


def test_dma_by_another_wave_needs_wait_and_barrier() -> None:
    mem, a = _buffer()
    body = """
        v_and_b32_e32 v1, 63, v0
        v_lshlrev_b32_e32 v1, 2, v1
        v_readfirstlane_b32 s6, v0
        s_mov_b32 m0, 0
        s_cmp_lt_u32 s6, 64
        s_cbranch_scc0 .LBB0_1
        global_load_lds_dword v[10:11], off
        {wait}
        s_barrier
        s_branch .LBB0_2
        .LBB0_1:
        s_barrier
        ds_read_b32 v2, v1
        s_waitcnt lgkmcnt(0)
        .LBB0_2:
        s_waitcnt vmcnt(0)
    """

    def setup(w):
        return _v64(w, 10, a + 4 * (LANE % 64))

    _, f = _findings(body.format(wait="s_nop 0"), mem=mem, setup=setup, threads=128)
    # the issuing wave waits only after the barrier: its data lands with no barrier before the
    # reader. The lockstep scheduler runs the reader (lower pc) before the issuer's wait, so
    # the read sees the DMA still in flight; had the issuer waited first, the landed bytes
    # would show as a race (docs/explanation/isa-interpreter.md, "Cross-wave DMA")
    assert [x.kind for x in f] == ["dma_before_wait"] and f[0].wave == 1 and f[0].text == "ds_read_b32 v2, v1"
    r, f = _findings(body.format(wait="s_waitcnt vmcnt(0)"), mem=mem, setup=setup, threads=128)
    assert f == [] and r.waves[1].v[2].tolist() == list(range(64))


def test_vgpr_read_before_its_load_completes() -> None:
    mem, a = _buffer()
    _, f = _findings(
        """
        global_load_dword v2, v[10:11], off
        global_load_dword v3, v[10:11], off
        s_waitcnt vmcnt(1)
        v_mov_b32_e32 v4, v2
        v_mov_b32_e32 v5, v3
        s_waitcnt vmcnt(0)
    """,
        mem=mem,
        setup=lambda w: _v64(w, 10, a + 4 * LANE),
    )
    assert [x.kind for x in f] == ["register_before_wait"] and f[0].pc == 4 and "v3" in f[0].detail


def test_lds_and_smem_results_need_their_lgkmcnt_wait() -> None:
    """LDS reads return in order (lgkmcnt(1) covers all but the newest); SMEM only at lgkmcnt(0)."""
    _, f = _findings(
        """
        v_lshlrev_b32_e32 v1, 2, v0
        ds_read_b32 v2, v1
        ds_read_b32 v3, v1 offset:256
        s_waitcnt lgkmcnt(1)
        v_mov_b32_e32 v4, v2
        v_mov_b32_e32 v5, v3
        s_waitcnt lgkmcnt(0)
        v_mov_b32_e32 v6, v3
    """,
        lds_init=np.zeros(1024, dtype=np.uint8),
    )
    assert [x.kind for x in f] == ["register_before_wait"] and f[0].pc == 5 and "v3" in f[0].detail
    mem, a = _buffer()

    def setup(w):
        sset(w, 4, a & 0xFFFFFFFF)
        sset(w, 5, a >> 32)

    _, f = _findings(
        """
        s_load_dword s10, s[4:5], 0x0
        ds_read_b32 v2, v0
        s_waitcnt lgkmcnt(1)
        s_add_u32 s11, s10, 1
        s_waitcnt lgkmcnt(0)
        s_add_u32 s12, s10, 1
    """,
        mem=mem,
        setup=setup,
    )
    assert [x.kind for x in f] == ["register_before_wait"] and f[0].pc == 3 and "s10" in f[0].detail


def test_raise_mode_names_instruction_and_lanes() -> None:
    with pytest.raises(CheckFailed) as err:
        run_asm("v_add_u32_e32 v2, v5, v0")
    assert err.value.finding.kind == "uninitialized_read"
    assert "`v_add_u32_e32 v2, v5, v0`" in str(err.value) and "lanes [0,1,2" in str(err.value)


@pytest.mark.parametrize(
    "asm, undefined, fires",
    [
        # a packed source's unselected half is not read (no false uninitialized_read)
        ("v_pk_mul_f32 v[2:3], v[10:11], s[18:19] op_sel_hi:[1,0]", ("s", 19), False),
        ("v_pk_mul_f32 v[2:3], v[10:11], s[18:19] op_sel_hi:[1,0]", ("s", 18), True),
        ("v_pk_add_f32 v[2:3], v[10:11], v[12:13] op_sel:[0,1] op_sel_hi:[1,1]", ("v", 12), False),
        ("v_pk_add_f32 v[2:3], v[10:11], v[12:13] op_sel:[0,1] op_sel_hi:[1,1]", ("v", 13), True),
        ("v_pk_mov_b32 v[2:3], v[10:11], v[12:13] op_sel:[1,0]", ("v", 10), False),
        ("v_pk_mov_b32 v[2:3], v[10:11], v[12:13] op_sel:[1,0]", ("v", 11), True),
        # sub-dword selects: the unselected word of the fp8 source is not read
        ("v_cvt_pk_f32_fp8_sdwa v[2:3], v10 src0_sel:WORD_1", ("v10 lo", 10), False),
        ("v_cvt_pk_f32_fp8_sdwa v[2:3], v10 src0_sel:WORD_1", ("v10 hi", 10), True),
    ],
)
def test_partial_reads_check_only_what_is_read(asm: str, undefined: tuple[str, int], fires: bool) -> None:
    """Every register is defined except the named one (or the named half of v10): a finding
    only when the instruction actually reads it."""
    kind, idx = undefined

    def setup(w):
        for i in range(10, 14):
            vset(w, i, 0x3F800000)
        for i in range(16, 20):
            sset(w, i, 0x3F800000)
        if kind == "s":
            w.sdef[idx] = False
        elif kind == "v":
            w.vdef[idx] = 0
        else:
            w.vdef[idx] = 0xC if kind.endswith("lo") else 0x3  # only the other word defined
        w.vfull[idx] = False

    res = run_asm(asm, setup=setup, checks="collect")
    kinds = [f.kind for f in res.workgroup.checks.findings]
    assert kinds == (["uninitialized_read"] if fires else []), kinds
