"""The reference's two float64 products straight from the records on the f64 tensor cores (DMMA,
`mma.sync.m8n8k4.f64`, compute capability 8.0 and up): the contract of oracle.fused_products'
Products, as a CUDA kernel pair built by kernel.cuda_binary.

    scores(q_ref, rows, slots)  z f64 [R, H, L]   z[r, h, l] = sum_d q_ref[rows[r], h, d] K[slot(r, l), d]
    weighted(w, slots)          o f64 [R, H, 512] o[r, h, c] = sum_l w[r, h, l] V[slot(r, l), c]

K and V are decoded in registers from each record as it is read (the code through
oracle.key_decode.code_table, a NaN code keeping its own payload, times the f32 scale widened;
rope a bf16 widened; +0 at a masked slot or past the last key), never stored. Each result is a
float64 dot of the exact products accumulated by DMMA steps of 4 terms in an order of the kernel's
own (the d index is permuted within 64-wide pieces for vector loads; keys in steps of 4), so it is
within gamma_m(2^-53) sum |terms| of the exact value (m = 576 for z, L for o): the reference's
rounding model, which oracle.bound charges (ref_qk_err). Its bits may differ from cuBLAS's bmm.

Launch shapes: scores, 128 threads per block, 16 heads x 128 keys per block (grid: rows x key
tiles, head groups of 16); weighted, 128 threads, 16 heads x 256 output columns per block (grid:
rows x 2 column halves, head groups). Shared memory: 10 KiB (scores), 2 KiB (weighted).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from kernel import cuda_binary
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET

SCORE_KEYS = 128  # keys per block of the scores kernel (4 warps x 4 tiles of 8)
HEAD_GROUP = 16  # heads per block (two 8-row DMMA tiles)
OUT_COLS = 256  # output columns per block of the weighted kernel (4 warps x 64)

SOURCE = r"""
#include <cstdint>

#define RECORD 656
#define WARPS 4

__device__ __forceinline__ void dmma(double& d0, double& d1, double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
}

// a latent code's value: the table's (a NaN code keeps its payload), else value * scale
__device__ __forceinline__ double latent(const double* tab, uint32_t code, double scale) {
    double v = tab[code & 255u];
    return (v != v) ? v : v * scale;
}

__device__ __forceinline__ double bf16_value(uint32_t bits) {
    return (double)__uint_as_float((bits & 0xFFFFu) << 16);
}

// z[r, h, l] = q_ref[rows[r], h, :] . K[slots[r, l], :]; blockIdx.x = r * tiles + tile
extern "C" __global__ void __launch_bounds__(128) oracle_scores(
    const double* __restrict__ q, const int64_t* __restrict__ rows, const int64_t* __restrict__ slots,
    const uint8_t* __restrict__ cache, const double* __restrict__ table, double* __restrict__ z,
    int n_keys, int heads, int tiles)
{
    constexpr int NT = 4;                 // 8-key tiles per warp
    constexpr int KEYS = WARPS * NT * 8;  // keys per block
    __shared__ double qs[2 * 16 * 32];    // one 64-wide piece of 16 heads, in fragment order
    __shared__ double tab[256];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const long long r = blockIdx.x / tiles;
    const int tile = blockIdx.x % tiles;
    const int h0 = blockIdx.y * 16;
    const long long qrow = rows[r];
    for (int i = tid; i < 256; i += 128) tab[i] = table[i];
    const int key_base = tile * KEYS + warp * NT * 8;
    const uint8_t* rec[NT];
    bool live[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int key = key_base + nt * 8 + g;
        const long long slot = key < n_keys ? slots[r * n_keys + key] : -1;
        live[nt] = slot >= 0;
        rec[nt] = cache + (live[nt] ? slot : 0) * RECORD;
    }
    double acc[2][NT][2];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) acc[m][nt][0] = acc[m][nt][1] = 0.0;
    const double* qbase = q + qrow * (long long)heads * 576;
    for (int p = 0; p < 9; ++p) {
        __syncthreads();
        for (int i = tid; i < 1024; i += 128) {
            const int h = i >> 6, d = i & 63;
            const double v = (h0 + h < heads) ? qbase[(long long)(h0 + h) * 576 + p * 64 + d] : 0.0;
            qs[(((h >> 3) * 16 + (d & 15)) * 8 + (h & 7)) * 4 + (d >> 4)] = v;
        }
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            double b[16];
            if (p < 8) {
                uint4 c = make_uint4(0u, 0u, 0u, 0u);
                double scale = 0.0;
                if (live[nt]) {
                    c = *reinterpret_cast<const uint4*>(rec[nt] + p * 64 + 16 * t);
                    scale = (double)*reinterpret_cast<const float*>(rec[nt] + 512 + 4 * (p >> 1));
                }
                const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
                for (int k = 0; k < 16; ++k)
                    b[k] = live[nt] ? latent(tab, words[k >> 2] >> (8 * (k & 3)), scale) : 0.0;
            } else {
                uint4 c0 = make_uint4(0u, 0u, 0u, 0u), c1 = c0;
                if (live[nt]) {
                    c0 = *reinterpret_cast<const uint4*>(rec[nt] + 528 + 32 * t);
                    c1 = *reinterpret_cast<const uint4*>(rec[nt] + 528 + 32 * t + 16);
                }
                const uint32_t words[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
                for (int k = 0; k < 16; ++k) b[k] = bf16_value(words[k >> 1] >> (16 * (k & 1)));
            }
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                dmma(acc[0][nt][0], acc[0][nt][1], qs[s * 32 + lane], b[s]);
                dmma(acc[1][nt][0], acc[1][nt][1], qs[(16 + s) * 32 + lane], b[s]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        const int head = h0 + m * 8 + g;
        if (head >= heads) continue;
        double* out = z + (r * heads + head) * (long long)n_keys;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int key = key_base + nt * 8 + 2 * t + i;
                if (key < n_keys) out[key] = acc[m][nt][i];
            }
    }
}

// o[r, h, c] = sum_l w[r, h, l] V[slots[r, l], c]; blockIdx.x = r * 2 + column half
extern "C" __global__ void __launch_bounds__(128) oracle_weighted(
    const double* __restrict__ w, const int64_t* __restrict__ slots, const uint8_t* __restrict__ cache,
    const double* __restrict__ table, double* __restrict__ o, int n_keys, int heads)
{
    constexpr int U = 4;  // 4-key steps per loop iteration
    __shared__ double tab[256];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const long long r = blockIdx.x >> 1;
    const int cw = (blockIdx.x & 1) * 256 + warp * 64;  // this warp's 64 columns: one scale block
    const int h0 = blockIdx.y * 16;
    for (int i = tid; i < 256; i += 128) tab[i] = table[i];
    __syncthreads();
    const bool in0 = h0 + g < heads, in1 = h0 + 8 + g < heads;
    const double* w0 = w + (r * heads + (in0 ? h0 + g : 0)) * (long long)n_keys;
    const double* w1 = w + (r * heads + (in1 ? h0 + 8 + g : 0)) * (long long)n_keys;
    const int64_t* srow = slots + r * n_keys;
    double acc[2][8][2];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[m][j][0] = acc[m][j][1] = 0.0;
    for (int l0 = 0; l0 < n_keys; l0 += 4 * U) {
        uint2 c[U];
        double scale[U], a0[U], a1[U];
        bool live[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int key = l0 + 4 * u + t;
            const bool in = key < n_keys;
            const long long slot = in ? srow[key] : -1;
            live[u] = slot >= 0;
            const uint8_t* rec = cache + (live[u] ? slot : 0) * RECORD;
            c[u] = live[u] ? *reinterpret_cast<const uint2*>(rec + cw + 8 * g) : make_uint2(0u, 0u);
            scale[u] = live[u] ? (double)*reinterpret_cast<const float*>(rec + 512 + 4 * (cw >> 7)) : 0.0;
            a0[u] = (in && in0) ? w0[key] : 0.0;
            a1[u] = (in && in1) ? w1[key] : 0.0;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t word = j < 4 ? c[u].x : c[u].y;
                const double b = live[u] ? latent(tab, word >> (8 * (j & 3)), scale[u]) : 0.0;
                dmma(acc[0][j][0], acc[0][j][1], a0[u], b);
                dmma(acc[1][j][0], acc[1][j][1], a1[u], b);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        const int head = h0 + m * 8 + g;
        if (head >= heads) continue;
        double* out = o + (r * heads + head) * 512LL;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int i = 0; i < 2; ++i) out[cw + 8 * (2 * t + i) + j] = acc[m][j][i];
    }
}
"""

supported = cuda_binary.dmma_supported  # CUDA, compute capability 8.0+ (f64 mma.sync), and nvcc


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


@dataclass(frozen=True)
class DmmaProducts:
    """The two products over one flat cache (uint8 [rows, 656], contiguous, 16-byte aligned) on a
    CUDA device; `table`: oracle.key_decode.code_table of that device. Same contract as
    oracle.fused_products.Products (`shapes` accepted and ignored)."""

    flat: torch.Tensor
    table: torch.Tensor

    def _module(self) -> cuda_binary.Module:
        return cuda_binary.load(SOURCE, self.flat.device)

    def scores(self, q_ref: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, shapes: object = None) -> torch.Tensor:
        """z f64 [R, H, L] = q_ref[rows] . K[slots] (q_ref f64 [n_q, H, 576] contiguous, rows
        int64 [R], slots int64 [R, L] contiguous, -1: masked, K +0). No host read."""
        del shapes
        n_rows, n_keys = slots.shape
        heads = q_ref.shape[1]
        z = torch.empty(n_rows, heads, n_keys, dtype=torch.float64, device=slots.device)
        if z.numel() == 0:
            return z
        tiles = _cdiv(n_keys, SCORE_KEYS)
        self._module().launch(
            "oracle_scores", (n_rows * tiles, _cdiv(heads, HEAD_GROUP), 1), (128, 1, 1),
            (q_ref, rows, slots, self.flat, self.table, z, ctypes.c_int32(n_keys), ctypes.c_int32(heads), ctypes.c_int32(tiles)),
        )  # fmt: skip
        return z

    def weighted(self, w: torch.Tensor, slots: torch.Tensor, shapes: object = None) -> torch.Tensor:
        """o f64 [R, H, 512] = w @ V[slots] (w f64 [R, H, L] contiguous, slots int64 [R, L]
        contiguous, -1: masked, V +0). No host read."""
        del shapes
        n_rows, heads, n_keys = w.shape
        o = torch.empty(n_rows, heads, LATENT_DIM, dtype=torch.float64, device=w.device)
        if o.numel() == 0:
            return o
        if n_keys == 0:
            return o.zero_()
        self._module().launch(
            "oracle_weighted", (n_rows * (LATENT_DIM // OUT_COLS), _cdiv(heads, HEAD_GROUP), 1), (128, 1, 1),
            (w, slots, self.flat, self.table, o, ctypes.c_int32(n_keys), ctypes.c_int32(heads)),
        )  # fmt: skip
        return o


# the kernels' constants
assert LATENT_DIM == 512 and RECORD_BYTES == 656 and SCALE_OFFSET == 512 and ROPE_OFFSET == 528 and HEAD_DIM == 576
