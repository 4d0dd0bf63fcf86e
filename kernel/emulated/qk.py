"""The emulated kernel's QK scores of one group of tiles in one Triton kernel: records in, f32
scores out, no f64 keys, dots or rope products in memory.

It computes what emulated.group_scores computes with torch operations (the K decode of
emulated_decode, the batched f64 matmuls and emulated_scores' accumulation), for each row r of
the group, head h and key n (records [r * n_keys + n]):

    d[b, j, g] = sum_i Q[r, 4 b + j, g, i] code[n, 128 b + 32 j + i]     (exact: e4m3 x e4m3
                 products under one power-of-two factor per operand, 32 of them, in f64)
    s[j, g]    = ((d[0] f0 + d[1] f1) + d[2] f2) + d[3] f3                (f64, each op rounded)
    acc        = 0, then acc = f32(acc + s[j, h]), f32(acc + s[j, H + h]) for j = 0..3
    acc        = f32(acc + sum_i rope_q[r, h, 32 k + i] rope_k[n, 32 k + i]) for k = 0, 1

with f_b the key's E8M0 factor of block b (2^(e - 127) of its f32 scale's exponent field, NaN for
255). The latent dots are exact, so their summation order (the kernel's tl.dot or numpy's under
the interpreter, cuBLAS's in the torch path) cannot change a bit; the rope dots are sums of 32
bf16 x bf16 products, exact unless their magnitudes span more than about 2^32 within one MFMA.
The kernel is the fast path `emulated.qk` (kernel.fastpath, registered by kernel.emulated.gfx950,
which holds the torch path group_scores_torch): used on a device only after it reproduced the
torch path's bits on a probe (every code, scales of every class, rope patterns, masked keys, 1
and 16 heads). By default it is emulated_qk_cuda's DMMA kernel (variant "cuda", CUDA cc 8.0+ and
nvcc); the Triton variants run only when CONFORMANCE_FAST_PATHS=emulated.qk=triton asks for them
(where the emulator's other Triton kernels may run, emulated.state not off): on one H200 its f64
tl.dot variant did not compile (Triton's ConvertTritonGPUToLLVM failed) and the FMA variant is
not yet timed there. Otherwise, or if a launch fails, group_scores uses the torch operations.

Shapes (emulated.ChunkQ): latent f64 [rows, 16 (b, j), 2H, 32] (hi heads then lo heads, each
scaled by its block's E8M0 factor), rope f64 [rows, H, 64]; records uint8 [live0 * group, 128,
656] contiguous (row-major: the group's tiles of a row together); returns f32 [live0, H, group * 128].
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from kernel import fastpath
from kernel.emulated import qk_cuda as emulated_qk_cuda
from kernel.emulated.state import FAST_PATH as STATE_PATH
from kernel.emulated.state import _on, triton_reason
from kernel.fp8 import e4m3_table

RECORD = 656
TILE = 128
MAX_HEADS = 16  # heads per program (tl.dot's smallest M); emulated supports H in 1..16
BLOCK_KEYS = 64  # keys per program
FAST_PATH = "emulated.qk"  # default: the CUDA DMMA kernel (emulated_qk_cuda); opt-in: the Triton variants
# how the 32-term dots are formed: DMMA in CUDA (emulated_qk_cuda), 32 outer products (f64 FMA
# units, Triton), or f64 tl.dot (Triton)
VARIANTS = ("cuda", "fma", "dot")
TRITON_VARIANTS = ("fma", "dot")


@functools.cache
def _kernel(interpret: bool) -> Callable[..., object]:
    """The Triton kernel (built on first use; `interpret`: for Triton's CPU interpreter)."""
    del interpret  # part of the cache key: triton.jit reads TRITON_INTERPRET when it decorates
    import triton
    import triton.language as tl

    @triton.jit
    def scores(
        lat_ptr,
        rope_ptr,
        rec_ptr,
        word_ptr,
        half_ptr,
        table_ptr,
        out_ptr,
        heads,
        n_keys,
        HB: tl.constexpr,
        BK: tl.constexpr,
        FMA: tl.constexpr,
    ):  # type: ignore[no-untyped-def]
        row = tl.program_id(0).to(tl.int64)
        kb = tl.program_id(1)
        h = tl.arange(0, HB)
        live_h = h < heads
        i = tl.arange(0, 32)
        key = row * n_keys + (kb * BK + tl.arange(0, BK)).to(tl.int64)  # [BK] records of the group
        rec = rec_ptr + key * 656
        words = word_ptr + key * 164  # the same records as int32 words (scales: words 128..131)
        halves = half_ptr + key * 328  # and as int16 halves (rope: halves 264..327)
        two_h = 2 * heads
        lat_row = lat_ptr + row * (16 * two_h * 32)
        acc = tl.zeros([HB, BK], dtype=tl.float32)
        for j in tl.static_range(4):
            s_hi = tl.zeros([HB, BK], dtype=tl.float64)
            s_lo = tl.zeros([HB, BK], dtype=tl.float64)
            for b in tl.static_range(4):
                bj = 4 * b + j
                # the keys' E8M0 factor of block b: 2^(e - 127) of the f32 scale's exponent field, NaN for 255
                e = ((tl.load(words + 128 + b) >> 23) & 255).to(tl.int64)
                factor = tl.where(e == 255, float("nan"), ((e + (1023 - 127)) << 52).to(tl.float64, bitcast=True))
                # the 32-term dots in f64 [HB, BK] (exact: any order)
                if FMA:  # 32 outer products, each exact
                    d_hi = tl.zeros([HB, BK], dtype=tl.float64)
                    d_lo = tl.zeros([HB, BK], dtype=tl.float64)
                    for ii in range(32):
                        kv = tl.load(table_ptr + tl.load(rec + (bj * 32 + ii)).to(tl.int32))  # [BK]
                        qh = tl.load(lat_row + (bj * two_h + h) * 32 + ii, mask=live_h, other=0.0)  # [HB]
                        ql = tl.load(lat_row + (bj * two_h + heads + h) * 32 + ii, mask=live_h, other=0.0)
                        d_hi = d_hi + qh[:, None] * kv[None, :]
                        d_lo = d_lo + ql[:, None] * kv[None, :]
                else:
                    codes = tl.load(rec[None, :] + (bj * 32 + i)[:, None]).to(tl.int32)  # [32, BK]
                    k = tl.load(table_ptr + codes)
                    q_hi = tl.load(lat_row + (bj * two_h + h)[:, None] * 32 + i[None, :], mask=live_h[:, None], other=0.0)
                    q_lo = tl.load(lat_row + (bj * two_h + heads + h)[:, None] * 32 + i[None, :], mask=live_h[:, None], other=0.0)
                    d_hi = tl.dot(q_hi, k)
                    d_lo = tl.dot(q_lo, k)
                if b == 0:
                    s_hi = d_hi * factor[None, :]
                    s_lo = d_lo * factor[None, :]
                else:
                    s_hi = s_hi + d_hi * factor[None, :]
                    s_lo = s_lo + d_lo * factor[None, :]
            acc = (acc.to(tl.float64) + s_hi).to(tl.float32)
            acc = (acc.to(tl.float64) + s_lo).to(tl.float32)
        rope_row = rope_ptr + row * (heads * 64)
        for k2 in tl.static_range(2):
            if FMA:
                d_rope = tl.zeros([HB, BK], dtype=tl.float64)
                for ii in range(32):
                    half = tl.load(halves + (264 + 32 * k2 + ii))  # [BK] bf16 bits
                    kr = ((half.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True).to(tl.float64)
                    qr = tl.load(rope_row + h * 64 + (32 * k2 + ii), mask=live_h, other=0.0)
                    d_rope = d_rope + qr[:, None] * kr[None, :]
            else:
                half = tl.load(halves[None, :] + (264 + 32 * k2 + i)[:, None])  # [32, BK] bf16 bits
                k_rope = ((half.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True).to(tl.float64)
                q_rope = tl.load(rope_row + h[:, None] * 64 + (32 * k2 + i)[None, :], mask=live_h[:, None], other=0.0)
                d_rope = tl.dot(q_rope, k_rope)
            acc = (acc.to(tl.float64) + d_rope).to(tl.float32)
        n = kb * BK + tl.arange(0, BK)
        out = out_ptr + (row * heads + h[:, None]) * n_keys + n[None, :]
        tl.store(out, acc, mask=live_h[:, None])

    return scores


def scores_triton(
    latent: torch.Tensor, rope: torch.Tensor, records: torch.Tensor, live0: int, group: int, variant: str = "fma"
) -> torch.Tensor:
    """The group's f32 scores [live0, H, group * 128] by the kernel (shapes: module docstring)."""
    heads = rope.shape[1]
    n_keys = group * TILE
    if heads > MAX_HEADS or latent.shape[1:] != (16, 2 * heads, 32):
        raise ValueError(f"emulated_qk needs 1..{MAX_HEADS} heads and latent [rows, 16, 2H, 32], got {tuple(latent.shape)}")
    if not (latent.is_contiguous() and rope.is_contiguous() and records.is_contiguous()):
        raise ValueError("emulated_qk needs contiguous latent, rope and records")
    if records.numel() != live0 * n_keys * RECORD:
        raise ValueError(f"emulated_qk: records hold {records.numel() // RECORD} keys, not live0 x group x 128 = {live0 * n_keys}")
    out = torch.empty(live0, heads, n_keys, dtype=torch.float32, device=records.device)
    if live0 == 0:
        return out
    table = e4m3_table(records.device, torch.float64)
    options = {} if fastpath.interpreting() else {"enable_fp_fusion": False, "num_warps": 4}
    with _on(records.device):
        _kernel(fastpath.interpreting())[(live0, n_keys // BLOCK_KEYS)](  # type: ignore[index]
            latent,
            rope,
            records,
            records.view(torch.int32),
            records.view(torch.int16),
            table,
            out,
            heads,
            n_keys,
            HB=MAX_HEADS,
            BK=BLOCK_KEYS,
            FMA=variant == "fma",
            **options,
        )
    return out


Reference = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, int], torch.Tensor]

# (live0, group, heads) of the probe's groups: one tile, several tiles, sizes of 1, 16 heads
PROBE_SHAPES = ((2, 1, 3), (1, 2, 1), (3, 2, 16), (1, 1, 2))


def probe_inputs(device: torch.device, live0: int = 2, group: int = 1, heads: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(latent, rope, records) of one group whose scores are mostly finite: every finite e4m3
    code at every latent position of some key (a few keys also hold a NaN code), scales of
    2^-30 .. 2^10 of both signs and, in about one (key, block) in 12, of a special class
    (subnormal, +-0, +-inf, NaN, f32 max, 2^-126), Q's hi and lo halves of finite e4m3 values
    under factors 2^-30 .. 2^10, rope of both operands with bf16 values of every sign over 2^-8
    .. 2^8 (and zeros)."""
    g = torch.Generator().manual_seed(31 + live0 * 100 + group * 10 + heads)
    r = live0 * group
    keys = r * TILE
    finite_codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.int64)
    pick = torch.randint(0, finite_codes.numel(), (keys, 512), generator=g)
    rotating = min(keys, finite_codes.numel())
    pick[:rotating] = (torch.arange(512)[None, :] + torch.arange(rotating)[:, None]) % finite_codes.numel()
    codes = finite_codes[pick]
    nan_keys = torch.randint(0, keys, (3,), generator=g)
    codes[nan_keys, torch.randint(0, 512, (3,), generator=g)] = torch.tensor([0x7F, 0xFF, 0x7F])
    scales = torch.exp2(torch.randint(-30, 11, (keys, 4), generator=g).float()) * (torch.rand(keys, 4, generator=g) * 1.5 + 0.5)
    scales = torch.where(torch.rand(keys, 4, generator=g) < 0.2, -scales, scales)
    special = torch.tensor([1e-40, 0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3.4e38, 2.0**-126], dtype=torch.float32)
    odd = torch.rand(keys, 4, generator=g) < 1 / 12
    scales = torch.where(odd, special[torch.randint(0, special.numel(), (keys, 4), generator=g)], scales)
    rope_k = (torch.randn(keys, 64, generator=g) * torch.exp2(torch.randint(-8, 8, (keys, 64), generator=g).float())).to(torch.bfloat16)
    rope_k[:3, :5] = 0.0
    records = torch.cat((codes.to(torch.uint8), scales.view(torch.uint8).view(-1, 16), rope_k.view(torch.uint8).view(-1, 128)), dim=1).view(
        r, TILE, RECORD
    )
    values = e4m3_table("cpu", torch.float64)[finite_codes[torch.randint(0, finite_codes.numel(), (live0, 16, 2 * heads, 32), generator=g)]]
    factor = torch.exp2(torch.randint(-30, 11, (live0, 16, 2 * heads, 1), generator=g).double())
    latent = (values * factor).contiguous()
    rope = (torch.randn(live0, heads, 64, generator=g) * torch.exp2(torch.randint(-8, 8, (live0, heads, 64), generator=g).float())).to(
        torch.bfloat16
    )
    return latent.to(device), rope.to(torch.float64).to(device), records.to(device)


def scores_kernel(latent: torch.Tensor, rope: torch.Tensor, records: torch.Tensor, live0: int, group: int, variant: str) -> torch.Tensor:
    """The group's scores by the kernel of `variant` (VARIANTS)."""
    if variant == "cuda":
        return emulated_qk_cuda.scores_cuda(latent, rope, records, live0, group)
    return scores_triton(latent, rope, records, live0, group, variant)


def self_check(device: torch.device, reference: Reference, variant: str = "fma") -> bool:
    """Whether the kernel of `variant` gives reference(latent, rope, records, live0, group)'s
    bits (the torch path: emulated.group_scores without the kernel; NaN matching NaN) on every
    probe group on `device`."""
    for live0, group, heads in PROBE_SHAPES:
        latent, rope, records = probe_inputs(device, live0, group, heads)
        want = reference(latent, rope, records, live0, group)
        got = scores_kernel(latent, rope, records, live0, group, variant)
        if not fastpath.same_bits(want.double(), got.double()):
            return False
    return True


def eligible(device: torch.device, variant: str) -> str:
    """Where `variant` may run (kernel.fastpath.FastPath.eligible): "cuda" where
    emulated_qk_cuda.supported (CUDA cc 8.0+, nvcc), the Triton variants where
    emulated_state.triton_reason allows and the setting does not turn emulated.state off."""
    if variant == "cuda":
        return "" if emulated_qk_cuda.supported(device) else "needs a CUDA device of compute capability 8.0+ and nvcc"
    if fastpath.switched_off(STATE_PATH):
        return f"the setting turns {STATE_PATH} off, and with it the emulator's Triton kernels"
    return triton_reason(device)


def scores(latent: torch.Tensor, rope: torch.Tensor, records: torch.Tensor, live0: int, group: int, reference: Reference) -> torch.Tensor:
    """The group's scores: the kernel where the fast path FAST_PATH gives one, else (or if its
    launch raises) reference, the torch operations."""
    variant = fastpath.choose(FAST_PATH, records.device)
    if variant is not None:
        try:
            return scores_kernel(latent, rope, records, live0, group, variant)
        except Exception as err:  # noqa: BLE001 - a shape the kernel does not compile for: torch
            warnings.warn(f"emulated: QK scores kernel ({variant}) failed ({type(err).__name__}: {err}); using torch", stacklevel=2)
    return reference(latent, rope, records, live0, group)
