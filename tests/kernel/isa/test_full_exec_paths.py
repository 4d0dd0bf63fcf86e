"""The interpreter's full-EXEC fast paths agree with its general (partial-EXEC) paths.

Many semantics have a fast path taken only when EXEC is all ones (in-place byte / half writes,
whole-row gathers from LDS and global memory, [2, 64] packed-f32 rows, one read of all of a
buffer load's dwords). Each instruction here runs twice from the same random state: with EXEC
all ones, and with a partial EXEC. On the active lanes both runs must give the same register
bits and definedness; on the inactive lanes the registers must be as they were. The partial run
takes the general path, so a fast path that computed anything else would show here.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernel.isa.state import GlobalMemory
from tests.kernel.isa.harness import run_asm, sset

PARTIAL = 0xF7FF_FFFF_7FFF_FFFE  # lanes 0, 31 and 59 inactive
LDS = 8192
BUF = np.random.default_rng(7).integers(0, 256, 1 << 16, dtype=np.uint8)
LDS_INIT = np.random.default_rng(8).integers(0, 256, LDS, dtype=np.uint8)

INSTRUCTIONS = [
    "v_cvt_pk_fp8_f32 v1, v10, v11",
    "v_cvt_pk_fp8_f32 v1, v10, v11 op_sel:[0,0,1]",
    "v_cvt_scalef32_pk_f16_fp8 v1, v12, v13",
    "v_cvt_scalef32_pk_f16_fp8 v1, v12, v13 op_sel:[1,0,0]",
    "v_cvt_pk_f32_fp8_e32 v[2:3], v12",
    "v_cvt_pk_f32_fp8_sdwa v[2:3], v12 src0_sel:WORD_1",
    "v_cvt_pk_bf16_f32 v1, v10, v11",
    "v_cvt_pk_f16_f32 v1, v10, v11",
    "v_pk_mul_f32 v[2:3], v[10:11], v[14:15]",
    "v_pk_mul_f32 v[2:3], v[10:11], s[20:21] op_sel_hi:[1,0]",
    "v_pk_add_f32 v[2:3], v[10:11], v[14:15] op_sel:[1,0] op_sel_hi:[0,1] neg_lo:[0,1] neg_hi:[1,0]",
    "v_pk_fma_f32 v[2:3], v[10:11], v[14:15], v[16:17]",
    "v_mfma_f32_16x16x32_f16 v[2:5], v[10:13], v[14:17], v[18:21]",
    "v_mfma_f32_16x16x32_bf16 v[2:5], v[10:13], v[14:17], 0",
    "v_mfma_f32_16x16x32_fp8_fp8 v[2:5], v[12:13], v[14:15], v[18:21]",
    "v_mfma_scale_f32_16x16x128_f8f6f4 v[2:5], v[24:31], v[32:39], v[18:21], v12, v13 op_sel_hi:[0,0,0]",
    "v_lshl_add_u64 v[2:3], v[40:41], 2, v[14:15]",
    "v_mov_b64_e32 v[2:3], v[14:15]",
    "v_mad_u64_u32 v[2:3], s[22:23], v10, v11, v[14:15]",
    "v_cndmask_b32_e32 v1, v10, v11, vcc",
    "ds_read_b128 v[2:5], v42",
    "ds_read_b128 v[2:5], v43",
    "ds_read_b64 v[2:3], v42 offset:8",
    "ds_read_b32 v1, v43 offset:4",
    "ds_read2_b32 v[2:3], v42 offset0:1 offset1:5",
    "global_load_dwordx4 v[2:5], v[40:41], off",
    "global_load_dword v1, v44, s[24:25] offset:4",
    "buffer_load_dword v1, v44, s[28:31], 0 offen",
    "buffer_load_dwordx4 v[2:5], v44, s[28:31], 0 offen offset:16",
    "buffer_load_dwordx4 v[2:5], v42, s[28:31], 0 offen",
]
DMA = [  # (instruction, bytes per lane, LDS address of lane 0's bytes: M0 (+ the buffer form's offset))
    ("global_load_lds_dwordx4 v[40:41], off", 16, 1024),
    ("global_load_lds_dword v[40:41], off", 4, 1024),
    ("buffer_load_dword v42, s[28:31], 0 offen lds", 4, 1024),
    ("buffer_load_dwordx4 v42, s[28:31], 0 offen offset:32 lds", 16, 1056),
]


def _setup(exec_mask: int):
    def setup(w) -> None:
        rng = np.random.default_rng(3)
        n = w.v.shape[0]
        floats = rng.standard_normal((n, 64)).astype(np.float32) * np.float32(8)
        w.v[:] = floats.view(np.uint32)
        w.v[12:14] = rng.integers(0, 1 << 32, (2, 64), dtype=np.uint64).astype(np.uint32)  # fp8 bytes, scales
        w.v[24:40] = rng.integers(0, 1 << 32, (16, 64), dtype=np.uint64).astype(np.uint32)
        w.v[12] &= np.uint32(0x7E7E7E7E)  # finite E4M3 codes
        w.v[13] = (w.v[13] & np.uint32(0x00030303)) | np.uint32(0x7C7C7C7C)  # E8M0 scales near 2^0
        w.v[24:40] &= np.uint32(0x7E7E7E7E)
        base = BUF.ctypes.data
        addr = base + 16 * np.arange(64, dtype=np.uint64)[::-1] + 256
        w.v[40] = (addr & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        w.v[41] = (addr >> np.uint64(32)).astype(np.uint32)
        w.v[42] = (16 * rng.permutation(64)).astype(np.uint32)  # 16-byte aligned LDS addresses
        w.v[43] = (4 * rng.integers(0, LDS // 4 - 8, 64)).astype(np.uint32)  # dword aligned only
        w.v[44] = (4 * rng.integers(0, 1024, 64)).astype(np.uint32)
        w.vdef[:] = 0xF
        regs = {124: 1024, 20: 0x3F800000, 21: 0xC0000000, 24: base & 0xFFFFFFFF, 25: base >> 32, 106: 0x5A5A5A5A, 107: 0xA5A5A5A5}
        for i, val in regs.items():
            sset(w, i, val)
        for i, val in enumerate((base & 0xFFFFFFFF, base >> 32, 1 << 16, 0x00020000)):
            sset(w, 28 + i, val)  # raw buffer descriptor over BUF
        sset(w, 126, exec_mask & 0xFFFFFFFF)
        sset(w, 127, exec_mask >> 32)
        w.set_exec_from_sgprs()

    return setup


def _run_wg(asm: str, exec_mask: int):
    mem = GlobalMemory()
    mem.add_array(BUF.ctypes.data, BUF, "buf")
    return run_asm(asm + "\ns_waitcnt vmcnt(0) lgkmcnt(0)", vgprs=48, lds=LDS, lds_init=LDS_INIT, mem=mem, setup=_setup(exec_mask))


def _run(asm: str, exec_mask: int):
    return _run_wg(asm, exec_mask).waves[0]


@pytest.mark.parametrize("asm", INSTRUCTIONS)
def test_fast_path_equals_general_path(asm: str) -> None:
    full = _run(asm, 0xFFFFFFFFFFFFFFFF)
    part = _run(asm, PARTIAL)
    init = _run("s_nop 0", PARTIAL)
    act = ((PARTIAL >> np.arange(64, dtype=np.uint64)) & 1).astype(bool)
    assert (part.v[:, act] == full.v[:, act]).all(), asm
    assert (part.vdef[:, act] == full.vdef[:, act]).all(), asm
    assert (part.v[:, ~act] == init.v[:, ~act]).all(), asm
    assert (part.vdef[:, ~act] == init.vdef[:, ~act]).all(), asm
    assert (full.v != init.v).any(), f"{asm} changed nothing: the case tests nothing"


@pytest.mark.parametrize(("asm", "size", "base"), DMA)
def test_dma_fast_path_equals_general_path(asm: str, size: int, base: int) -> None:
    """LDS DMA (M0 = 1024): lane l's bytes land at base + size * l; the full-EXEC run lands
    one contiguous block, the partial run lane by lane; an inactive lane's block is untouched."""
    full = _run_wg(asm, 0xFFFFFFFFFFFFFFFF).workgroup
    part = _run_wg(asm, PARTIAL).workgroup
    for lane in range(64):
        blk = slice(base + size * lane, base + size * (lane + 1))
        want = full.lds[blk] if (PARTIAL >> lane) & 1 else LDS_INIT[blk]
        assert (part.lds[blk] == want).all(), (asm, lane)
        if (PARTIAL >> lane) & 1:
            assert (part.lds_writer[blk] == full.lds_writer[blk]).all() and (part.lds_pending[blk] == 0).all()
    assert (full.lds != LDS_INIT).any(), f"{asm} changed nothing"
