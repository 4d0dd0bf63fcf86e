"""emulated_pv's fused updates (P', the PV products and the running-state updates of one group of
tiles) as one CUDA kernel on the f64 tensor cores (DMMA, `mma.sync.m8n8k4.f64`, compute
capability 8.0+), built by kernel.cuda_binary: the same contract and arithmetic as the Triton
kernel there (module docstring of emulated_pv), nothing but the state written to memory.

Per block: one row of the group and one 128-dim block b of o (blockIdx.y), 16 heads (two DMMA
M tiles of 8), 4 warps of 32 dims each (4 DMMA N tiles of 8; N tile nt, column n holds the
warp's dim 4 n + nt, so that each thread reads its 4 dims of one key as one 32-bit word of
codes). The block keeps its o [16 heads, 128 dims] in registers (f32) over the row's tiles; per
tile it stages the 128 keys' clamped scales (0 for masked keys) and masked flags, then P' =
f16(f32(P * scale_v)) of the 4 MFMAs x 16 heads x 32 keys as f64 in shared memory (A fragment
order), then o = f32(o * alpha) and per MFMA kk the 32-key dot [16, 32] x [32, 128] by 8 DMMA
steps of 4 keys (B: the e4m3 table value of the code, 0 for masked keys), plus +0.0 (a sum of
zeros is +0, as the BLAS's), and o = f32(f64(o) + term), kk = 0..3 in order. The blocks of b = 0
also update l_parts: f32(l * alpha), then + the lane sums (8 keys per lane from +0, in
emulated.lane_sums' order). Every f32/f64 operation is rounded alone (__fmul_rn, __fadd_rn,
__dadd_rn, __double2float_rn, __float2half_rn: no contraction).

Exactness of the dots: a product of an f16 P' (11 significant bits) and an e4m3 V (4) has at
most 15 significant bits, between 2^-33 (f16 subnormal 2^-24 times e4m3 subnormal 2^-9) and
2^25, so every product is exact in f64 and, where the 32 products' bits span at most 53 bits
(any partial sum then is a multiple of the lowest bit below 2^54 in magnitude), so is every
partial sum in any order and grouping: the DMMA's order (and its internal grouping of 4) gives
the batched matmul's bits. Inf and NaN products give order-independent results (NaN, or inf of
one sign, or NaN for opposite infinities). Only where one group's products span more than 53
bits (P' and scale extremes within one MFMA) does the sum round, and then every path (cuBLAS,
a CPU BLAS, tl.dot, DMMA) has its own order: emulated_pv uses the kernel only after its bit
probe (exact sums, probe_sums_exact) passed on the device.
"""

from __future__ import annotations

import ctypes

import torch

from kernel import cuda_binary
from kernel.fp8 import e4m3_table

RECORD = 656
TILE = 128
LATENT = 512
STATE = 528  # o then l_parts per (row, head)
MAX_HEADS = 16

SOURCE = r"""
#include <cstdint>
#include <cuda_fp16.h>

#define RECORD 656
#define STATE 528

__device__ __forceinline__ void dmma(double& d0, double& d1, double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
}

// buffer [rows, heads, 528] f32 in place; alpha [rows, tiles, heads] f32; p f32 with strides (elements);
// records [rows * tiles, 128, 656]; masked [rows * tiles, 128] (bytes); counts [rows] int32.
// grid (rows, 4 blocks b), 128 threads.
extern "C" __global__ void __launch_bounds__(128) emulated_pv_advance(
    float* __restrict__ buffer, const float* __restrict__ alpha, const float* __restrict__ p,
    long long sp_row, long long sp_tile, long long sp_head, long long sp_key,
    const uint8_t* __restrict__ records, const uint8_t* __restrict__ masked,
    const double* __restrict__ table, const int* __restrict__ counts, int tiles, int heads)
{
    __shared__ double ps[4 * 2 * 8 * 32];  // P' of (kk, m tile, step, lane): A fragments
    __shared__ double tab[256];
    __shared__ float sc[128];              // the keys' scale_v of block b (0 for masked keys)
    __shared__ unsigned char off[128];     // masked keys
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const long long row = blockIdx.x;
    const int b = blockIdx.y;
    const int n = counts[row];
    if (n <= 0) return;
    for (int i = tid; i < 256; i += 128) tab[i] = table[i];
    // this thread's o: head 8 mt + g, dim 128 b + 32 warp + 8 t + 4 i + nt
    const int dim0 = 128 * b + 32 * warp + 8 * t;
    float o[2][2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        const int head = 8 * mt + g;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
                o[mt][i][nt] = head < heads ? buffer[(row * heads + head) * STATE + dim0 + 4 * i + nt] : 0.0f;
    }
    // l_parts (blocks of b = 0): heads lh and lh + 8, lane (w, gl) = tid & 15
    const int lh = tid >> 4, ll = tid & 15;
    const int lane_key = (ll >> 2) * 32 + (ll & 3) * 4;  // lane (w, gl) sums keys 32 w + 16 s + 4 gl + r
    float lp[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const int head = lh + 8 * q;
        lp[q] = (b == 0 && head < heads) ? buffer[(row * heads + head) * STATE + 512 + ll] : 0.0f;
    }
    for (int tile = 0; tile < n; ++tile) {
        const long long rt = row * tiles + tile;
        const uint8_t* tile_rec = records + rt * 128 * RECORD;
        __syncthreads();  // the previous tile's ps and sc are read
        {
            const int key = tid;
            const int bits = *reinterpret_cast<const int*>(tile_rec + (long long)key * RECORD + 512 + 4 * b);
            const int clamped = min(max(bits, 1), 0x43000000);  // [1, bits(2^7)]
            const bool m = masked[rt * 128 + key] != 0;
            sc[key] = m ? 0.0f : __int_as_float(clamped);
            off[key] = m ? 1 : 0;
        }
        __syncthreads();
        const float* p_tile = p + row * sp_row + tile * sp_tile;
        for (int i = tid; i < 16 * 128; i += 128) {
            const int h = i >> 7, key = i & 127;
            // key = 64 hf + 32 a + 16 b' + 8 c + 4 sub + kt: MFMA kk = 2 hf + sub, step (a, b', c), k lane kt
            const int kk = 2 * (key >> 6) + ((key >> 2) & 1);
            const int st = ((key >> 3) & 7);  // 4 a + 2 b' + c
            const int kt = key & 3;
            double v = 0.0;
            if (h < heads) {
                const float pk = p_tile[h * sp_head + key * sp_key];
                v = (double)__half2float(__float2half_rn(__fmul_rn(pk, sc[key])));
            }
            ps[((kk * 2 + (h >> 3)) * 8 + st) * 32 + 4 * (h & 7) + kt] = v;
        }
        __syncthreads();
        if (b == 0) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int head = lh + 8 * q;
                if (head < heads) {
                    const float a = alpha[rt * heads + head];
                    const float* pr = p_tile + head * sp_head;
                    float s = 0.0f;
#pragma unroll
                    for (int k = 0; k < 8; ++k) s = __fadd_rn(s, pr[(lane_key + (k >> 2) * 16 + (k & 3)) * sp_key]);
                    lp[q] = __fadd_rn(__fmul_rn(lp[q], a), s);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const int head = 8 * mt + g;
            const float a = head < heads ? alpha[rt * heads + head] : 1.0f;
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) o[mt][i][nt] = __fmul_rn(o[mt][i][nt], a);
        }
        const uint8_t* codes = tile_rec + 128 * b + 32 * warp + 4 * g;  // this thread's 4 dims of a key
#pragma unroll 1
        for (int kk = 0; kk < 4; ++kk) {
            double d[2][4][2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) d[mt][nt][0] = d[mt][nt][1] = 0.0;
#pragma unroll
            for (int st = 0; st < 8; ++st) {
                // B row kt = t: key 64 (kk >> 1) + 32 a + 16 b' + 8 c + 4 (kk & 1) + t, (a, b', c) = st
                const int key = 64 * (kk >> 1) + 8 * st + 4 * (kk & 1) + t;
                const uint32_t word = *reinterpret_cast<const uint32_t*>(codes + (long long)key * RECORD);
                const bool m = off[key] != 0;
                double v[4];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) v[nt] = m ? 0.0 : tab[(word >> (8 * nt)) & 255u];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    const double a = ps[((kk * 2 + mt) * 8 + st) * 32 + lane];
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) dmma(d[mt][nt][0], d[mt][nt][1], a, v[nt]);
                }
            }
            // D[m = g][n = 2 t + i] of (mt, nt): head 8 mt + g, dim 32 warp + 4 (2 t + i) + nt = dim0 + 4 i + nt
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        const double term = __dadd_rn(d[mt][nt][i], 0.0);  // a sum of zeros is +0
                        o[mt][i][nt] = __double2float_rn(__dadd_rn((double)o[mt][i][nt], term));
                    }
        }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        const int head = 8 * mt + g;
        if (head >= heads) continue;
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) buffer[(row * heads + head) * STATE + dim0 + 4 * i + nt] = o[mt][i][nt];
    }
    if (b == 0) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const int head = lh + 8 * q;
            if (head < heads) buffer[(row * heads + head) * STATE + 512 + ll] = lp[q];
        }
    }
}
"""


supported = cuda_binary.dmma_supported  # a CUDA device of compute capability 8.0+ and nvcc


def advance_cuda(
    buffer: torch.Tensor, alpha: torch.Tensor, p: torch.Tensor, records: torch.Tensor, masked: torch.Tensor, counts: torch.Tensor
) -> None:
    """The fused updates, in place on `buffer` (shapes: emulated_pv's module docstring; counts:
    int32 device tensor). Raises ValueError, before any launch, on layouts it does not take,
    cuda_binary.CudaBuildError when it cannot be built or launched. No host read."""
    rows, heads = buffer.shape[0], buffer.shape[1]
    tiles = alpha.shape[1]
    if not 1 <= heads <= MAX_HEADS or buffer.shape[2:] != (STATE,) or p.dim() != 4 or p.shape != (rows, tiles, heads, TILE):
        raise ValueError(f"emulated_pv_cuda takes 1..{MAX_HEADS} heads, buffer [rows, H, 528] and P [rows, tiles, H, 128]")
    if alpha.shape != (rows, tiles, heads) or counts.shape != (rows,):
        raise ValueError("emulated_pv_cuda needs alpha [rows, tiles, H] and counts [rows]")
    if buffer.dtype != torch.float32 or alpha.dtype != torch.float32 or p.dtype != torch.float32:
        raise ValueError("emulated_pv_cuda needs f32 buffer, alpha and P")
    if records.dtype != torch.uint8 or masked.dtype != torch.bool or counts.dtype != torch.int32:
        raise ValueError("emulated_pv_cuda needs uint8 records, bool masked and int32 counts")
    if not (
        buffer.is_contiguous() and alpha.is_contiguous() and records.is_contiguous() and masked.is_contiguous() and counts.is_contiguous()
    ):
        raise ValueError("emulated_pv_cuda needs contiguous buffer, alpha, records, masked and counts")
    if records.shape != (rows * tiles, TILE, RECORD) or masked.shape != (rows * tiles, TILE):
        raise ValueError("emulated_pv_cuda needs records [rows * tiles, 128, 656] and masked [rows * tiles, 128]")
    if records.data_ptr() % 4 or buffer.data_ptr() % 4:
        raise ValueError("emulated_pv_cuda needs 4-byte aligned records")
    if rows == 0 or tiles == 0:
        return
    table = e4m3_table(records.device, torch.float64)
    strides = (ctypes.c_int64(s) for s in p.stride())
    cuda_binary.load(SOURCE, records.device).launch(
        "emulated_pv_advance", (rows, LATENT // TILE, 1), (128, 1, 1),
        (buffer, alpha, p, *strides, records, masked, table, counts, ctypes.c_int32(tiles), ctypes.c_int32(heads)),
    )  # fmt: skip
