"""Independent correct kernels: written from the contract and the seed's documentation, sharing no
code with kernel.emulated or the oracle. Each declares the numerics profile that
describes it (a `profile` attribute holding an oracle.profiles.NumericsProfile).

- `float64_torch`: float64 throughout, out = ref.to(torch.bfloat16) (torch rounds f64 -> f32 -> bf16)
  and lse.float(); profile `exact`.
- `float32_torch`: the reference most people write: f32 dequantisation, f32 matmuls,
  torch.softmax / torch.logsumexp, out.to(bf16); profile `fp32`.
- `gfx950_sequential_rtz`: the gfx950 algorithm (fp8 hi + lo Q, scaled fp8 products, bf16 rope,
  exp2 online softmax over 128-key tiles with P = exp2(x - m + 8), P' = fp16(P * scale), 16 l
  lane partials, out = bf16(o * (1 / l))) whose QK accumulates every product sequentially in f32
  with rounding toward zero and whose PV rounds each 32-key MFMA toward zero; profile `gfx950`.
- `gfx950_sequential_l`: the gfx950 algorithm with l summed key by key in one f32 accumulator;
  profile `gfx950-l-sequential`.
- `gfx950_reverse_tiles`: the gfx950 algorithm visiting the row's tiles last to first; `gfx950`.
- `flashmla_like_split`: bf16 Q, f32 QK, 64-key tiles, exp2 online softmax, P rounded to bf16
  for PV, l from the f32 P, the row split into up to 3 KV splits combined through their lse in
  f32; profile `bf16-q-bf16-p`.
- `flashmla_ftz_split`: FlashMLA decode's arithmetic from its source and SASS: every f32 result
  flushed below 2^-126 (--use_fast_math), FFMA exp argument, one partition per 64-key block (up
  to 8) merged through log2-domain f32 lse; profile `bf16-q-bf16-p`.

Each is also a registry `Backend` (`BACKENDS`, name -> Backend) declaring its profile by name; the
mutation catalogue lists them as correct variants that must pass the suite.

The gfx950-algorithm kernels share `Gfx950Algorithm`, whose switches also build the precision
defects of conformance.mutation.precision_defects. Loops run over tiles, over the 1088 product
positions of a sequential dot, or over the keys of a tile where the accumulation order is the
point (sequential l); every loop body is vectorised over rows, heads and keys. Calls are checked
against the contract with kernel.contract.validate_call (shared contract code, not the emulator).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import torch

from kernel.backend import Backend
from kernel.contract import begin_call, validate_call

RECORD = 656
LATENT = 512
ROPE = 64
BLOCK = 128
LOG2E = math.log2(math.e)


# ---------------------------------------------------------------------------------------------
# shared: gather each row's keys into a padded block (masked slots hold zeros, never row bytes)


@dataclass(frozen=True)
class Gathered:
    """valid bool [n_q, L]; codes f32 [n_q, L, 512] (decoded e4m3 values); scales f32 [n_q, L, 4];
    scale_bits int64 [n_q, L, 4]; rope f32 [n_q, L, 64] (exact bf16 values)."""

    valid: torch.Tensor
    codes: torch.Tensor
    scales: torch.Tensor
    scale_bits: torch.Tensor
    rope: torch.Tensor


def gather(kv_cache: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor, has_invalid: bool, multiple: int = 1) -> Gathered:
    """Each row's keys, padded to a multiple of `multiple` slots."""
    device = kv_cache.device
    kv = kv_cache.reshape(-1, RECORD)
    ptr = indptr.to(device=device, dtype=torch.int64)
    start = ptr[:-1]
    length = (ptr[1:] - start).clamp_min(0)
    longest = int(length.max()) if length.numel() else 0
    width = max(multiple, -(-longest // multiple) * multiple)
    offs = torch.arange(width, device=device)
    inside = offs[None, :] < length[:, None]
    pos = torch.where(inside, start[:, None] + offs[None, :], 0)
    flat = indices.to(device=device, dtype=torch.int64)
    ids = torch.where(inside, flat[pos.clamp(0, max(flat.numel() - 1, 0))] if flat.numel() else torch.zeros_like(pos), 0)
    valid = inside & (ids >= 0) if has_invalid else inside
    if bool((valid & ((ids < 0) | (ids >= kv.shape[0]))).any()):  # before the gather: no device-side assert on GPUs
        raise IndexError(f"a consumed index lies outside the cache's {kv.shape[0]} rows")
    if kv.shape[0] == 0:  # a cache of no records: every row is empty, nothing is read
        rec = torch.zeros(*valid.shape, RECORD, dtype=torch.uint8, device=device)
    else:
        rec = kv[torch.where(valid, ids, 0)]
    codes = rec[..., :LATENT].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    scales = rec[..., LATENT : LATENT + 16].contiguous().view(torch.float32)
    bits = rec[..., LATENT : LATENT + 16].contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rope = rec[..., LATENT + 16 :].contiguous().view(torch.bfloat16).to(torch.float32)
    v3 = valid.unsqueeze(-1)
    return Gathered(
        valid=valid,
        codes=torch.where(v3, codes, 0.0),
        scales=torch.where(v3, scales, 0.0),
        scale_bits=torch.where(v3, bits, 0),
        rope=torch.where(v3, rope, 0.0),
    )


def _finish(out_f: torch.Tensor, lse: torch.Tensor, return_lse: bool, out: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    result = out_f.to(torch.bfloat16)
    if out is not None:
        out.copy_(result)
        result = out
    return result, (lse.to(torch.float32) if return_lse else None)


# ---------------------------------------------------------------------------------------------
# float64 and float32 references


def _plain(q, kv_cache, indices, indptr, softmax_scale, dtype, has_invalid, return_lse, out):  # type: ignore[no-untyped-def]
    validate_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    g = gather(kv_cache, indices, indptr, has_invalid)
    scale = g.scales.to(dtype).repeat_interleave(BLOCK, dim=-1)
    values = g.codes.to(dtype) * scale
    keys = torch.cat((values, g.rope.to(dtype)), dim=-1)
    s = torch.matmul(q.to(dtype), keys.transpose(1, 2)) * torch.tensor(softmax_scale, dtype=dtype)
    s = s.masked_fill(~g.valid[:, None, :], float("-inf"))
    any_key = g.valid.any(dim=-1)[:, None, None]
    s_safe = torch.where(any_key, s, 0.0)
    p = torch.softmax(s_safe, dim=-1)
    lse = torch.logsumexp(s_safe, dim=-1)
    o = torch.matmul(p, values)
    o = torch.where(any_key, o, 0.0)
    lse = torch.where(any_key[..., 0], lse, float("-inf"))
    return _finish(o, lse, return_lse, out)


def float64_torch(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    """float64 everything; torch's own casts to bf16 / f32 at the end."""
    return _plain(q, kv_cache, indices, indptr, softmax_scale, torch.float64, has_invalid, return_lse, out)


def float32_torch(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    """float32 everything: f32 matmuls, torch.softmax, torch.logsumexp."""
    return _plain(q, kv_cache, indices, indptr, softmax_scale, torch.float32, has_invalid, return_lse, out)


float64_torch.profile = "exact"  # type: ignore[attr-defined]
float32_torch.profile = "fp32"  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# rounding helpers (f64 values -> f32 / narrow formats, explicit modes)


def f32_toward_zero(y: torch.Tensor) -> torch.Tensor:
    """Round f64 values to f32 toward zero (returned as f32)."""
    r = y.to(torch.float32)
    over = r.double().abs() > y.abs()
    return torch.where(over, torch.nextafter(r, torch.zeros_like(r)), r)


def f16_toward_zero(y: torch.Tensor) -> torch.Tensor:
    """Round f32 values to f16 toward zero (returned as f16), as v_cvt_pkrtz_f16_f32 does."""
    r = y.to(torch.float16)
    over = r.float().abs() > y.abs()
    return torch.where(over, torch.nextafter(r, torch.zeros_like(r)), r)


def bf16_toward_zero(y: torch.Tensor) -> torch.Tensor:
    """Truncate f32 values to bf16 (returned as bf16)."""
    bits = y.contiguous().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32).to(torch.bfloat16)


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k (f64) from its bits for integer k in [-1022, 1023] (torch.pow is not exact on CUDA)."""
    return ((k.to(torch.int64).clamp(-1022, 1023) + 1023) << 52).view(torch.float64)


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """RNE of f32 values to `bits` explicit mantissa bits (normal range), as f32."""
    m, e = torch.frexp(x)
    step = 2.0 ** (bits + 1)
    return (torch.round(m.double() * step) / step * _pow2(e)).to(torch.float32)


# ---------------------------------------------------------------------------------------------
# the gfx950 algorithm, with switches


@dataclass(frozen=True)
class Gfx950Algorithm:
    """One implementation of the seed's algorithm; the fields pick orders, roundings and defects.

    qk: "mfma_exact" (each MFMA sums exactly, one f32 rounding to nearest per instruction) or
        "sequential_rtz" (every product added one by one, f32 rounding toward zero).
    pv_rtz: each 32-key PV MFMA rounds toward zero (else to nearest).
    l_mode: "lanes16" (the seed's 16 partials of 8 keys per tile) or "sequential" (key by key).
    reverse_tiles: visit the row's tiles last to first.
    Defects: p_rtz (P' = fp16 toward zero), l_bf16 (l rounded to bf16 after each update),
    alpha_bf16, exp2_f16 (P evaluated in f16), rope_fp8 (rope q and K rounded to e4m3),
    q_lo_bits (mantissa bits of Q's lo part; 3 is e4m3), out_rtz (bf16 output truncated),
    clog2_bf16 (c_log2 rounded to bf16).
    """

    qk: str = "mfma_exact"
    pv_rtz: bool = False
    l_mode: str = "lanes16"
    reverse_tiles: bool = False
    p_rtz: bool = False
    l_bf16: bool = False
    alpha_bf16: bool = False
    exp2_f16: bool = False
    rope_fp8: bool = False
    q_lo_bits: int = 3
    out_rtz: bool = False
    clog2_bf16: bool = False

    # -- QK ------------------------------------------------------------------------------------
    def _quantize_q(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(hi, lo, unit) f32 [n_q, H, 4, 128] x2 and [n_q, H, 4, 1]: q ~ (hi + lo / 32) * unit."""
        lat = q[..., :LATENT].to(torch.float32).reshape(*q.shape[:2], 4, BLOCK)
        amax = lat.abs().amax(dim=-1, keepdim=True)
        _, e = torch.frexp(amax)
        field = torch.where(amax >= 2.0**-126, e.to(torch.int64) + 126, 0)
        s = (field - 7).clamp_min(5)
        unit = _pow2(s - 127).to(torch.float32)
        x = lat / unit
        hi = x.to(torch.float8_e4m3fn).to(torch.float32)
        lo = ((x - hi) * 32).to(torch.float8_e4m3fn).to(torch.float32)
        if self.q_lo_bits < 3:
            lo = round_mantissa(lo, self.q_lo_bits).to(torch.float8_e4m3fn).to(torch.float32)
        return hi, lo, unit

    def scores(self, q: torch.Tensor, g: Gathered) -> torch.Tensor:
        """s f32 [n_q, H, L]: q . K as the kernel accumulates it."""
        hi, lo, unit = self._quantize_q(q)
        n_q, heads = q.shape[:2]
        e8 = _pow2(((g.scale_bits >> 23) & 0xFF) - 127)  # [n_q, L, 4]
        kq = q[..., LATENT:].to(torch.float32)
        kr = g.rope
        if self.rope_fp8:
            kq = kq.to(torch.float8_e4m3fn).to(torch.float32)
            kr = kr.to(torch.float8_e4m3fn).to(torch.float32)
        codes = g.codes.reshape(n_q, -1, 4, BLOCK)
        u = unit.double().squeeze(-1)  # [n_q, H, 4]
        if self.qk == "mfma_exact":
            acc = torch.zeros(n_q, heads, codes.shape[1], dtype=torch.float32, device=q.device)
            for b in range(4):
                kb = codes[:, :, b, :].double() * e8[..., b : b + 1]  # [n_q, L, 128]
                for part, factor in ((hi, 1.0), (lo, 1.0 / 32)):
                    exact = torch.matmul(part[:, :, b, :].double() * (u[..., b : b + 1] * factor), kb.transpose(1, 2))
                    acc = (acc.double() + exact).to(torch.float32)
            for half in range(2):
                sl = slice(32 * half, 32 * half + 32)
                exact = torch.matmul(kq[..., sl].double(), kr[..., sl].double().transpose(1, 2))
                acc = (acc.double() + exact).to(torch.float32)
            return acc
        # sequential, toward zero: one product at a time, in the seed's instruction order
        acc = torch.zeros(n_q, heads, codes.shape[1], dtype=torch.float64, device=q.device)
        for b in range(4):
            kb = codes[:, :, b, :].double() * e8[..., b : b + 1]  # [n_q, L, 128]
            for part, factor in ((hi, 1.0), (lo, 1.0 / 32)):
                qb = part[:, :, b, :].double() * (u[..., b : b + 1] * factor)  # [n_q, H, 128]
                for d in range(BLOCK):
                    acc = f32_toward_zero(acc + qb[:, :, d, None] * kb[:, None, :, d]).double()
        for d in range(ROPE):
            acc = f32_toward_zero(acc + kq[:, :, d, None].double() * kr[:, None, :, d].double()).double()
        return acc.to(torch.float32)

    # -- softmax and PV --------------------------------------------------------------------------
    def _exp2(self, x: torch.Tensor) -> torch.Tensor:
        if self.exp2_f16:
            return torch.exp2(x.to(torch.float16)).to(torch.float32)
        return torch.exp2(x)

    def _round_l(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16).to(torch.float32) if self.l_bf16 else x

    def __call__(self, q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
        _, early = begin_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
        if early is not None:  # no query rows: the contract's empty outputs
            return early
        g = gather(kv_cache, indices, indptr, has_invalid, multiple=BLOCK)
        n_q, heads = q.shape[:2]
        dev = q.device
        s = self.scores(q, g)
        c_log2 = torch.tensor(softmax_scale * LOG2E, dtype=torch.float64).to(torch.float32)
        if self.clog2_bf16:
            c_log2 = c_log2.to(torch.bfloat16).to(torch.float32)
        neg = torch.tensor(-1.0e30, dtype=torch.float32)
        x = torch.where(g.valid[:, None, :], s * c_log2.to(dev), neg.to(dev))
        # PV scale per key and block: stored bits clamped to [1, bits(2^7)]; 0 for a masked key
        sv_bits = g.scale_bits.clamp(1, 0x43000000).to(torch.int32)
        scale_v = torch.where(g.valid.unsqueeze(-1), sv_bits.view(torch.float32), 0.0)  # [n_q, L, 4]
        n_tiles = g.valid.shape[1] // BLOCK
        m = torch.full((n_q, heads), -1.0e30, dtype=torch.float32, device=dev)
        l_parts = torch.zeros(n_q, heads, 16, dtype=torch.float32, device=dev)
        l_seq = torch.zeros(n_q, heads, dtype=torch.float32, device=dev)
        o = torch.zeros(n_q, heads, LATENT, dtype=torch.float32, device=dev)
        order = range(n_tiles - 1, -1, -1) if self.reverse_tiles else range(n_tiles)
        for t in order:
            ks = slice(BLOCK * t, BLOCK * t + BLOCK)
            xt = x[..., ks]
            m_new = torch.maximum(m, xt.amax(dim=-1))
            alpha = self._exp2(m - m_new)
            if self.alpha_bf16:
                alpha = alpha.to(torch.bfloat16).to(torch.float32)
            m_cl = torch.maximum(m_new - 8.0, torch.tensor(-1.0e20))
            p = self._exp2(xt - m_cl[..., None])  # [n_q, H, 128]
            if self.l_mode == "lanes16":
                # key k: wave k // 32, lane group (k % 16) // 4; each lane sums its 8 keys in (s, r) order
                lanes = p.reshape(n_q, heads, 4, 2, 4, 4).permute(0, 1, 2, 4, 3, 5).reshape(n_q, heads, 16, 8)
                psum = torch.zeros(n_q, heads, 16, dtype=torch.float32, device=dev)
                for k in range(8):
                    psum = psum + lanes[..., k]
                l_parts = self._round_l(l_parts * alpha[..., None] + psum)
            else:
                l_seq = self._round_l(l_seq * alpha)
                for k in range(BLOCK):
                    l_seq = self._round_l(l_seq + p[..., k])
            pp = p[..., None] * scale_v[:, None, ks, :]  # [n_q, H, 128, 4]
            pp = f16_toward_zero(pp) if self.p_rtz else pp.to(torch.float16)
            pp = pp.to(torch.float64)
            o = o * alpha[..., None]
            vals = g.codes[:, ks, :].double().reshape(n_q, BLOCK, 4, BLOCK)  # [n_q, keys, block, dims]
            for c in range(4):  # 4 f16 MFMA of 32 keys per tile
                kc = slice(32 * c, 32 * c + 32)
                contrib = torch.einsum("qhkb,qkbd->qhbd", pp[:, :, kc, :], vals[:, kc]).reshape(n_q, heads, LATENT)
                total = o.double() + contrib
                o = f32_toward_zero(total) if self.pv_rtz else total.to(torch.float32)
            m = m_new
        if self.l_mode == "lanes16":
            per = l_parts.reshape(n_q, heads, 4, 4)
            g01 = per[..., 0] + per[..., 1]
            g23 = per[..., 2] + per[..., 3]
            per_wave = g01 + g23
            l_tot = ((per_wave[..., 0] + per_wave[..., 1]) + per_wave[..., 2]) + per_wave[..., 3]
        else:
            l_tot = l_seq
        has_l = l_tot > 0
        inv_l = torch.where(has_l, 1.0 / torch.where(has_l, l_tot, 1.0), 0.0)
        res = o * inv_l[..., None]
        lse2 = (m + torch.log2(torch.where(has_l, l_tot, 1.0))) - 8.0
        lse = torch.where(has_l, lse2 * torch.tensor(math.log(2.0), dtype=torch.float32), float("-inf"))
        if self.out_rtz:
            result = bf16_toward_zero(res)
            if out is not None:
                out.copy_(result)
                result = out
            return result, (lse if return_lse else None)
        return _finish(res, lse, return_lse, out)


def _declare(fn: Gfx950Algorithm, profile: str):  # type: ignore[no-untyped-def]
    def kernel(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
        return fn(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)

    kernel.profile = profile  # type: ignore[attr-defined]
    kernel.algorithm = fn  # type: ignore[attr-defined]
    return kernel


GFX950_REFERENCE = Gfx950Algorithm()
gfx950_sequential_rtz = _declare(Gfx950Algorithm(qk="sequential_rtz", pv_rtz=True), "gfx950")
gfx950_sequential_l = _declare(Gfx950Algorithm(l_mode="sequential"), "gfx950-l-sequential")
gfx950_reverse_tiles = _declare(Gfx950Algorithm(reverse_tiles=True), "gfx950")


def defect(**switches: object):  # type: ignore[no-untyped-def]
    """The gfx950 algorithm with precision defects switched on, declaring profile gfx950."""
    return _declare(replace(GFX950_REFERENCE, **switches), "gfx950")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# FlashMLA-like: bf16 P, split-KV


def flashmla_like_split(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    """bf16 Q, f32 QK, 64-key tiles, exp2 online softmax, bf16 P for PV, l from the f32 P, up to
    3 KV splits per row combined in f32 through their lse."""
    validate_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    tile = 64
    g = gather(kv_cache, indices, indptr, has_invalid, multiple=tile)
    n_q, heads = q.shape[:2]
    dev = q.device
    values = g.codes * g.scales.repeat_interleave(BLOCK, dim=-1)
    keys = torch.cat((values, g.rope), dim=-1)
    s = torch.matmul(q.to(torch.float32), keys.transpose(1, 2))
    c_log2 = torch.tensor(softmax_scale * LOG2E, dtype=torch.float64).to(torch.float32)
    x = torch.where(g.valid[:, None, :], s * c_log2, float("-inf"))
    n_tiles = g.valid.shape[1] // tile
    n_splits = max(1, min(3, n_tiles))
    bounds = [round(i * n_tiles / n_splits) for i in range(n_splits + 1)]
    o_parts, lse_parts = [], []
    for a, b in itertools.pairwise(bounds):
        m = torch.full((n_q, heads), float("-inf"), dtype=torch.float32, device=dev)
        l_acc = torch.zeros(n_q, heads, dtype=torch.float32, device=dev)
        o = torch.zeros(n_q, heads, LATENT, dtype=torch.float32, device=dev)
        for t in range(a, b):
            ks = slice(tile * t, tile * t + tile)
            xt = x[..., ks]
            m_new = torch.maximum(m, xt.amax(dim=-1))
            m_safe = torch.where(torch.isfinite(m_new), m_new, 0.0)
            alpha = torch.where(torch.isfinite(m), torch.exp2(m - m_safe), 0.0)
            p = torch.exp2(xt - m_safe[..., None])
            l_acc = l_acc * alpha + p.sum(dim=-1)
            o = o * alpha[..., None] + torch.matmul(p.to(torch.bfloat16).to(torch.float32), values[:, ks, :])
            m = m_new
        has = l_acc > 0
        o_parts.append(torch.where(has[..., None], o / torch.where(has, l_acc, 1.0)[..., None], 0.0))
        lse_parts.append(torch.where(has, (m + torch.log2(torch.where(has, l_acc, 1.0))) * math.log(2.0), float("-inf")))
    lse_s = torch.stack(lse_parts)  # [S, n_q, H] f32
    top = lse_s.amax(dim=0)
    top_safe = torch.where(torch.isfinite(top), top, 0.0)
    lse = torch.log(torch.exp(lse_s - top_safe).sum(dim=0)) + top_safe
    w = torch.where(torch.isfinite(lse), torch.exp(lse_s - torch.where(torch.isfinite(lse), lse, 0.0)), 0.0)
    res = (w[..., None] * torch.stack(o_parts)).sum(dim=0)
    lse = torch.where(torch.isfinite(top), lse, float("-inf"))
    return _finish(res, lse, return_lse, out)


flashmla_like_split.profile = "bf16-q-bf16-p"  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# FlashMLA decode's arithmetic as its source and SASS state it: fast-math flush-to-zero, splits


F32_TINY = 2.0**-126


def ftz(x: torch.Tensor) -> torch.Tensor:
    """Flush f32 subnormal values to a zero of the same sign (what a .FTZ instruction returns)."""
    return torch.where(x.abs() < F32_TINY, x * 0.0, x)


def _f32(x: torch.Tensor) -> torch.Tensor:
    """One rounding of f64 values to f32, then flushed."""
    return ftz(x.to(torch.float32))


def flashmla_ftz_split(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    """FlashMLA's sparse fp8 decode arithmetic: K = bf16(f32(code)) * bf16(scale), f32 QK
    (flushed), m = f32(max raw score * c) with c = f32(softmax_scale * log2 e), P = exp2 of
    FFMA(s, c, -m) (one rounding), every f32 result flushed to zero below 2^-126, l from the f32 P,
    P rounded to bf16 for PV over 64-key blocks, each row split into one partition per 64-key block
    (at most 8), partials o_i = o * f32(1 / l) with lse_i = f32(log2 l + m) merged in f32 through
    log2-domain lse: G = log2(sum exp2(lse_i - max)) + max, out = sum exp2(lse_i - G) o_i."""
    validate_call(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)
    # the kernel takes the max of the unscaled scores, so a scale <= 0 goes in as (-q, -scale) or
    # (q = 0, scale = 1), as the flashmla adapter passes it (both exact)
    if softmax_scale < 0:
        q, softmax_scale = -q, -softmax_scale
    elif softmax_scale == 0:
        q, softmax_scale = torch.zeros_like(q), 1.0
    tile = 64
    g = gather(kv_cache, indices, indptr, has_invalid, multiple=tile)
    n_q, heads = q.shape[:2]
    dev = q.device
    scale_bf16 = g.scales.to(torch.bfloat16).to(torch.float32).repeat_interleave(BLOCK, dim=-1)
    values = ftz(g.codes.to(torch.bfloat16).to(torch.float32) * scale_bf16)
    keys = torch.cat((values, g.rope), dim=-1)
    s = ftz(torch.matmul(q.to(torch.float32), keys.transpose(1, 2)))  # [n_q, H, L] raw scores
    c = torch.tensor(softmax_scale * LOG2E, dtype=torch.float64).to(torch.float32).to(torch.float64)
    raw = torch.where(g.valid[:, None, :], s, float("-inf"))
    n_tiles = g.valid.shape[1] // tile
    n_splits = max(1, min(8, n_tiles))
    bounds = [round(i * n_tiles / n_splits) for i in range(n_splits + 1)]
    o_parts, lse_parts = [], []
    for a, b in itertools.pairwise(bounds):
        m = torch.full((n_q, heads), float("-inf"), dtype=torch.float32, device=dev)
        l_acc = torch.zeros(n_q, heads, dtype=torch.float32, device=dev)
        o = torch.zeros(n_q, heads, LATENT, dtype=torch.float32, device=dev)
        for t in range(a, b):
            ks = slice(tile * t, tile * t + tile)
            st = raw[..., ks]
            m_new = torch.maximum(m, _f32(st.amax(dim=-1).to(torch.float64) * c))
            m_safe = torch.where(torch.isfinite(m_new), m_new, 0.0)
            alpha = torch.where(torch.isfinite(m), ftz(torch.exp2(_f32(m.to(torch.float64) - m_safe.to(torch.float64)))), 0.0)
            arg = torch.where(torch.isfinite(st), st.to(torch.float64) * c - m_safe.to(torch.float64)[..., None], float("-inf"))
            p = ftz(torch.exp2(_f32(arg)))
            l_acc = ftz(ftz(l_acc * alpha) + ftz(p.sum(dim=-1)))
            pv = ftz(torch.matmul(p.to(torch.bfloat16).to(torch.float32), values[:, ks, :]))
            o = ftz(ftz(o * alpha[..., None]) + pv)
            m = m_new
        has = l_acc > 0
        inv = torch.where(has, ftz(1.0 / torch.where(has, l_acc, 1.0)), 0.0)
        o_parts.append(ftz(o * inv[..., None]))
        lse_parts.append(
            torch.where(has, _f32(torch.log2(torch.where(has, l_acc, 1.0)).to(torch.float64) + m_safe.to(torch.float64)), float("-inf"))
        )
    lse_s = torch.stack(lse_parts)  # [S, n_q, H] f32, log2 units
    top = lse_s.amax(dim=0)
    top_safe = torch.where(torch.isfinite(top), top, 0.0)
    total = ftz(ftz(torch.exp2(ftz(lse_s - top_safe))).sum(dim=0))
    glob = torch.where(torch.isfinite(top), ftz(ftz(torch.log2(torch.where(total > 0, total, 1.0))) + top_safe), float("-inf"))
    glob_safe = torch.where(torch.isfinite(glob), glob, 0.0)
    w = torch.where(torch.isfinite(lse_s), ftz(torch.exp2(ftz(lse_s - glob_safe))), 0.0)
    res = ftz((ftz(w[..., None] * torch.stack(o_parts))).sum(dim=0))
    lse = torch.where(torch.isfinite(glob), ftz(glob * torch.tensor(math.log(2.0), dtype=torch.float32)), float("-inf"))
    return _finish(res, lse, return_lse, out)


flashmla_ftz_split.profile = "bf16-q-bf16-p"  # type: ignore[attr-defined]


def as_backend(name: str, fn, *, batch_invariant: bool = True) -> Backend:  # type: ignore[no-untyped-def]
    """A registry Backend for one of these kernels (CPU and CUDA/ROCm; H in 1..16; out= honoured;
    an out-of-range index raises IndexError, as torch indexing does)."""
    return Backend(
        name=name,
        fn=fn,
        profile=fn.profile,
        devices=("cpu", "cuda"),
        accepts_out=True,
        bounded_index_reads=True,
        batch_invariant=batch_invariant,
        limits=("H in 1..16", "an out-of-range consumed index raises IndexError"),
    )


#: kernels whose result for a row depends on the rest of the batch: BLAS blocking follows the padded
#: shape, and the split count follows the longest row (the suite then compares by the bound)
BATCH_DEPENDENT = frozenset({"float64_torch", "float32_torch", "flashmla_like_split", "flashmla_ftz_split"})

#: name -> the kernel; each passes the suite under the profile it declares
KERNELS = {
    "float64_torch": float64_torch,
    "float32_torch": float32_torch,
    "gfx950_sequential_rtz": gfx950_sequential_rtz,
    "gfx950_sequential_l": gfx950_sequential_l,
    "gfx950_reverse_tiles": gfx950_reverse_tiles,
    "flashmla_like_split": flashmla_like_split,
    "flashmla_ftz_split": flashmla_ftz_split,
}
