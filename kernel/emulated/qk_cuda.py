"""emulated_qk's scores as one CUDA kernel on the f64 tensor cores (DMMA, `mma.sync.m8n8k4.f64`,
compute capability 8.0+), built by kernel.cuda_binary: the same contract and arithmetic as the
Triton kernel there (module docstring of emulated_qk), records in, f32 scores out.

Per block: one row of the group and one tile of 128 keys, 16 heads (hi rows 0..15, lo rows
16..31 of the DMMA's M = 32). For each (b, j) MFMA the 32-term dot of the unscaled key codes
(e4m3 table values) with Q's (b, j) operand is formed by 8 DMMA steps of 4 terms (each product
exact, the sum exact: e4m3 x e4m3 under one power of two, so the order of the terms cannot change
a bit; the d index is permuted within the 32 so that each thread loads 8 contiguous codes), then
s[j] = ((d0 f0 + d1 f1) + d2 f2) + d3 f3 and acc = f32(acc + s[j, hi]), f32(acc + s[j, lo]),
then the two rope MFMAs' f64 dots, each added as f32(acc + dot), every operation rounded alone
(__dmul_rn, __dadd_rn, __double2float_rn: no contraction). The rope dots are exact unless their
terms' magnitudes span more than about 2^32 (their order then is the DMMA's); the kernel is used
only after it reproduced the torch path's bits on emulated_qk's probe.
"""

from __future__ import annotations

import ctypes

import torch

from kernel import cuda_binary
from kernel.fp8 import e4m3_table

RECORD = 656
TILE = 128
MAX_HEADS = 16

SOURCE = r"""
#include <cstdint>

#define RECORD 656

__device__ __forceinline__ void dmma(double& d0, double& d1, double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
}

__device__ __forceinline__ double bf16_value(uint32_t bits) {
    return (double)__uint_as_float((bits & 0xFFFFu) << 16);
}

// out[r, h, n] (f32) for the group's row r and key n; blockIdx.x = r * tiles + tile
extern "C" __global__ void __launch_bounds__(128) emulated_qk_scores(
    const double* __restrict__ latent, const double* __restrict__ rope, const uint8_t* __restrict__ records,
    const double* __restrict__ table, float* __restrict__ out, int heads, int n_keys, int tiles)
{
    constexpr int NT = 4;  // 8-key tiles per warp: 4 warps x 32 keys = one 128-key tile
    __shared__ double qs[4 * 8 * 32];  // one MFMA's Q operand (32 rows x 32 dims), in fragment order
    __shared__ double fac[128 * 4];    // the keys' E8M0 factors of blocks 0..3
    __shared__ double tab[256];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const long long r = blockIdx.x / tiles;
    const int tile = blockIdx.x % tiles;
    const int two_h = 2 * heads;
    const uint8_t* tile_rec = records + (r * n_keys + (long long)tile * 128) * RECORD;
    for (int i = tid; i < 256; i += 128) tab[i] = table[i];
    for (int i = tid; i < 512; i += 128) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(tile_rec + (long long)(i >> 2) * RECORD + 512 + 4 * (i & 3));
        const long long e = (word >> 23) & 255u;
        fac[i] = e == 255 ? __longlong_as_double(0x7FF8000000000000LL) : __longlong_as_double((e + (1023 - 127)) << 52);
    }
    const int kw = warp * NT * 8;  // this warp's first key in the tile
    const uint8_t* rec[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) rec[nt] = tile_rec + (long long)(kw + nt * 8 + g) * RECORD;
    const double* lat_row = latent + r * 16LL * two_h * 32;
    float acc[2][NT][2];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) acc[m][nt][0] = acc[m][nt][1] = 0.0f;
    for (int j = 0; j < 4; ++j) {
        double s[4][NT][2];
        for (int b = 0; b < 4; ++b) {
            const int bj = 4 * b + j;
            __syncthreads();
            for (int i = tid; i < 1024; i += 128) {
                const int m = i >> 5, d = i & 31;  // m < 16: hi head m; else lo head m - 16
                const int h = m & 15;
                double v = 0.0;
                if (h < heads) v = lat_row[((long long)bj * two_h + (m < 16 ? h : heads + h)) * 32 + d];
                qs[(((m >> 3) * 8 + (d & 7)) * 8 + (m & 7)) * 4 + (d >> 3)] = v;
            }
            __syncthreads();
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint2 c = *reinterpret_cast<const uint2*>(rec[nt] + bj * 32 + 8 * t);
                double kv[8];
#pragma unroll
                for (int k = 0; k < 8; ++k) kv[k] = tab[((k < 4 ? c.x : c.y) >> (8 * (k & 3))) & 255u];
                double d[4][2];
#pragma unroll
                for (int m = 0; m < 4; ++m) d[m][0] = d[m][1] = 0.0;
#pragma unroll
                for (int st = 0; st < 8; ++st)
#pragma unroll
                    for (int m = 0; m < 4; ++m) dmma(d[m][0], d[m][1], qs[(m * 8 + st) * 32 + lane], kv[st]);
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const double f = fac[(kw + nt * 8 + 2 * t + i) * 4 + b];
#pragma unroll
                    for (int m = 0; m < 4; ++m) {
                        const double prod = __dmul_rn(d[m][i], f);
                        s[m][nt][i] = b == 0 ? prod : __dadd_rn(s[m][nt][i], prod);
                    }
                }
            }
        }
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    float a = __double2float_rn(__dadd_rn((double)acc[m][nt][i], s[m][nt][i]));
                    acc[m][nt][i] = __double2float_rn(__dadd_rn((double)a, s[m + 2][nt][i]));
                }
    }
    const double* rope_row = rope + r * (long long)heads * 64;
    for (int k2 = 0; k2 < 2; ++k2) {
        __syncthreads();
        for (int i = tid; i < 512; i += 128) {
            const int m = i >> 5, d = i & 31;
            const double v = m < heads ? rope_row[m * 64 + 32 * k2 + d] : 0.0;
            qs[(((m >> 3) * 8 + (d & 7)) * 8 + (m & 7)) * 4 + (d >> 3)] = v;
        }
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const uint4 c = *reinterpret_cast<const uint4*>(rec[nt] + 528 + 64 * k2 + 16 * t);
            const uint32_t words[4] = {c.x, c.y, c.z, c.w};
            double kr[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) kr[k] = bf16_value(words[k >> 1] >> (16 * (k & 1)));
            double d[2][2] = {{0.0, 0.0}, {0.0, 0.0}};
#pragma unroll
            for (int st = 0; st < 8; ++st)
#pragma unroll
                for (int m = 0; m < 2; ++m) dmma(d[m][0], d[m][1], qs[(m * 8 + st) * 32 + lane], kr[st]);
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
                for (int i = 0; i < 2; ++i) acc[m][nt][i] = __double2float_rn(__dadd_rn((double)acc[m][nt][i], d[m][i]));
        }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        const int head = m * 8 + g;
        if (head >= heads) continue;
        float* o = out + (r * heads + head) * (long long)n_keys + (long long)tile * 128 + kw;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            o[nt * 8 + 2 * t] = acc[m][nt][0];
            o[nt * 8 + 2 * t + 1] = acc[m][nt][1];
        }
    }
}
"""


supported = cuda_binary.dmma_supported  # a CUDA device of compute capability 8.0+ and nvcc


def scores_cuda(latent: torch.Tensor, rope: torch.Tensor, records: torch.Tensor, live0: int, group: int) -> torch.Tensor:
    """The group's f32 scores [live0, H, group * 128] (shapes: emulated_qk's module docstring);
    raises ValueError on shapes the kernel does not take, cuda_binary.CudaBuildError when it
    cannot be built or launched. No host read."""
    heads = rope.shape[1]
    n_keys = group * TILE
    if not 1 <= heads <= MAX_HEADS or latent.shape[1:] != (16, 2 * heads, 32) or rope.shape[2:] != (64,):
        raise ValueError(
            f"emulated_qk_cuda needs 1..{MAX_HEADS} heads, latent [rows, 16, 2H, 32], rope [rows, H, 64]; got {tuple(latent.shape)}"
        )
    if latent.dtype != torch.float64 or rope.dtype != torch.float64 or records.dtype != torch.uint8:
        raise ValueError("emulated_qk_cuda needs f64 latent and rope and uint8 records")
    if not (latent.is_contiguous() and rope.is_contiguous() and records.is_contiguous()):
        raise ValueError("emulated_qk_cuda needs contiguous latent, rope and records")
    if records.numel() != live0 * n_keys * RECORD or latent.shape[0] < live0 or rope.shape[0] < live0:
        raise ValueError(f"emulated_qk_cuda: records hold {records.numel() // RECORD} keys, not live0 x group x 128 = {live0 * n_keys}")
    out = torch.empty(live0, heads, n_keys, dtype=torch.float32, device=records.device)
    if live0 == 0 or group == 0:
        return out
    table = e4m3_table(records.device, torch.float64)
    cuda_binary.load(SOURCE, records.device).launch(
        "emulated_qk_scores", (live0 * group, 1, 1), (128, 1, 1),
        (latent, rope, records, table, out, ctypes.c_int32(heads), ctypes.c_int32(n_keys), ctypes.c_int32(group)),
    )  # fmt: skip
    return out
