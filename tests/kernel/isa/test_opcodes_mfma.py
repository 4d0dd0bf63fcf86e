"""MFMA tests: operand placement per the documented lane layouts (IREE getSingleSubgroupLayout
tables; AMD matrix instruction calculator) and scale application, values chosen so every
expected result is an exact small number worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import kernel.isa.ops_matrix as om
from tests.kernel.isa.harness import run_asm, vset

LANE = np.arange(64)
T = LANE % 16
G = LANE // 16


def _pack(vals: np.ndarray, dtype) -> np.ndarray:
    """[64, n] values -> [64, n * itemsize / 4] dwords."""
    b = np.ascontiguousarray(vals.astype(dtype)).view(np.uint32)
    return b.reshape(64, -1)


def _set_block(w, base: int, dwords: np.ndarray) -> None:
    for i in range(dwords.shape[1]):
        vset(w, base + i, dwords[:, i])


@pytest.mark.parametrize("opcode", ["v_mfma_f32_16x16x32_f16", "v_mfma_f32_16x16x32_bf16"])
def test_mfma_16x16x32(opcode: str) -> None:
    """A[m][k] = 1 iff k == m (lane (t, g) half j holds A[t][8g + j]); B[k][n] = k + 16 n
    (lane (t, g) half j holds B[8g + j][t]); C = 0.5 -> D[m][n] = m + 16 n + 0.5, and lane
    (t, g) dword r holds D[4g + r][t]."""
    k = 8 * G[:, None] + np.arange(8)[None, :]
    a = (k == T[:, None]).astype(np.float32)
    b = (k + 16 * T[:, None]).astype(np.float32)
    if opcode.endswith("_f16"):
        ad, bd = _pack(a, np.float16), _pack(b, np.float16)
    else:
        ad = _pack((a.view(np.uint32) >> 16).astype(np.uint16), np.uint16)
        bd = _pack((b.view(np.uint32) >> 16).astype(np.uint16), np.uint16)

    def setup(w):
        _set_block(w, 10, ad)
        _set_block(w, 14, bd)
        for r in range(4):
            vset(w, 20 + r, np.float32(0.5).view(np.uint32))

    w = run_asm(f"{opcode} v[2:5], v[10:13], v[14:17], v[20:23]\ns_nop 7", setup=setup).waves[0]
    got = np.stack([w.v[2 + r].view(np.float32) for r in range(4)], axis=1)  # [lane, r]
    want = (4 * G[:, None] + np.arange(4)[None, :]) + 16 * T[:, None] + 0.5
    assert (got == want).all()


def _scaled_setup(k_of):
    """A[m][k] = 1 iff k == 32 (m % 4) + m; B = 1; scale_a(m, kb) = 2^kb; scale_b(kb, n) =
    2^((n + kb) % 2) -> D[m][n] = 2^(m % 4) * 2^((n + m % 4) % 2)."""
    a = np.zeros((64, 32), dtype=np.uint8)
    target = 32 * (T % 4) + T
    a[k_of == target[:, None]] = 0x38  # e4m3 1.0
    b = np.full((64, 32), 0x38, dtype=np.uint8)
    sa = 127 + G  # lane m + 16 kb -> 2^kb
    sb = 127 + (T + G) % 2

    def setup(w):
        _set_block(w, 10, a.view(np.uint32).reshape(64, 8))
        _set_block(w, 18, b.view(np.uint32).reshape(64, 8))
        vset(w, 26, sa)
        vset(w, 27, sb)

    return setup


def test_mfma_scale_16x16x128_contiguous_layout(monkeypatch) -> None:
    """IREE's layout table (MFMA_SCALE_F32_16x16x128_B32, all element types): lane (t, g) byte j = K 32 g + j."""
    monkeypatch.setattr(om, "F8_LAYOUT", "contiguous")
    k_of = 32 * G[:, None] + np.arange(32)[None, :]
    w = run_asm(
        "v_mfma_scale_f32_16x16x128_f8f6f4 v[2:5], v[10:17], v[18:25], 0, v26, v27 op_sel_hi:[0,0,0]\ns_nop 7", setup=_scaled_setup(k_of)
    ).waves[0]
    got = np.stack([w.v[2 + r].view(np.float32) for r in range(4)], axis=1)
    m = 4 * G[:, None] + np.arange(4)[None, :]
    n = T[:, None]
    want = 2.0 ** (m % 4) * 2.0 ** ((n + m % 4) % 2)
    assert (got == want).all()


def test_mfma_scale_16x16x128_fp8_layout(monkeypatch) -> None:
    """Triton's fp8 layout (the default): byte j < 16 is K = 16 g + j, byte 16 + j is 64 + 16 g + j."""
    monkeypatch.setattr(om, "F8_LAYOUT", "split")
    j = np.arange(32)[None, :]
    k_of = np.where(j < 16, 16 * G[:, None] + j, 64 + 16 * G[:, None] + (j - 16))
    w = run_asm(
        "v_mfma_scale_f32_16x16x128_f8f6f4 v[2:5], v[10:17], v[18:25], v[30:33], v26, v27 op_sel_hi:[0,0,0]\ns_nop 7",
        setup=lambda w: (_scaled_setup(k_of)(w), [vset(w, 30 + r, np.float32(-1.0).view(np.uint32)) for r in range(4)]),
    ).waves[0]
    got = np.stack([w.v[2 + r].view(np.float32) for r in range(4)], axis=1)
    m = 4 * G[:, None] + np.arange(4)[None, :]
    n = T[:, None]
    want = 2.0 ** (m % 4) * 2.0 ** ((n + m % 4) % 2) - 1.0
    assert (got == want).all()


def test_mfma_rounds_once() -> None:
    """Sum 1 + 2^-24 + 2^-24 (three f16 products plus C): exact sum 1 + 2^-23 is representable;
    rounding after each addition would give 1 (ties to even twice)."""
    a = np.zeros((64, 8), dtype=np.float32)
    b = np.zeros((64, 8), dtype=np.float32)
    # row m = 0 (lanes with t = 0): k = 0 and k = 1 (lane g = 0, halves 0 and 1)
    a[0, 0] = 2.0**-12
    a[0, 1] = 2.0**-12
    b[0, 0] = 2.0**-12  # B[k=0][n=0] lives in lane t=0, g=0 half 0
    b[0, 1] = 2.0**-12

    def setup(w):
        _set_block(w, 10, _pack(a, np.float16))
        _set_block(w, 14, _pack(b, np.float16))
        for r in range(4):
            vset(w, 20 + r, np.float32(1.0).view(np.uint32))

    w = run_asm("v_mfma_f32_16x16x32_f16 v[2:5], v[10:13], v[14:17], v[20:23]", setup=setup).waves[0]
    assert int(w.v[2][0]) == 0x3F800001  # D[0][0] = 1 + 2^-23
    assert int(w.v[2][1]) == 0x3F800000
