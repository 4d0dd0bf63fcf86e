"""The emulated kernel's PV products and running-state updates of one group of tiles, fused.

For each row r of a group and each of its tiles t < counts[r], in tile order (rt = r * tiles + t):

    o, l_parts = f32(o * alpha[r, t]), f32(l_parts * alpha[r, t])
    l_parts    = f32(l_parts + psum[r, t])      (lane_sums of P: 8 keys per lane, in (s, r) order)
    o[b]       = f32(o[b] + term[kk, b])  for kk = 0..3, each 128-dim block b   (f64 sum, one RNE)

    term[kk, b][h, d] = sum over the 32 keys k of MFMA kk = 2 hf + sub (key = 64 hf + 32 a +
                        16 b' + 8 c + 4 sub + t) of f16(P[r, t, h, k] * scale_v[rt, k, b]) V[rt, k, 128 b + d]

with scale_v the record's f32 scale bits clamped to [1, bits(2^7)] (0 for masked keys), the f32
product rounded to f16 (RNE), V the e4m3 values of the record's codes (0 for masked keys, whatever
their bytes) and the 32-term dot in f64. That is emulated.group_pv_terms followed by
emulated_state.advance. `advance_torch` runs those two (the reference, on every device);
`advance_triton` is one Triton kernel (CUDA, or Triton's interpreter on a CPU) that writes neither
P' nor V nor the f64 terms to memory: each program keeps o of one row, all heads (padded to 16)
and BLOCK_D dims in registers over the row's tiles, reads P, the scale bits, the codes and the
masked flags per tile, forms P' in f32 and rounds it to f16 as the torch path does, and each
term by one f64 tl.dot [16 heads, 32 keys] x [32 keys, BLOCK_D dims] (variant "dot"; variant
"sum", tried where that one's probe fails: a broadcast product summed by tl.sum); the programs
of dims 0 .. BLOCK_D - 1 also update l_parts (their lane sums in emulated_state's order). No
contraction into FMAs (enable_fp_fusion=False).

Bits: an f16 x e4m3 product is exact in f64 (15 significant bits) and, unless one 32-key group
spans more than about 2^33 between its products' lowest and highest bits, so is their sum in
any order: the kernel's dot then equals the batched matmul's bit for bit. Beyond that span
(extreme scale and P ranges in one group) the sum rounds and its bits depend on the summation
order, on every path (cuBLAS, a CPU BLAS and tl.dot each have their own). A sum of zeros is +0
on both paths (the dot's result plus +0.0: a BLAS accumulates from +0), NaN is NaN (no payload
modelled), infinities are order-independent.

The kernel is the fast path `emulated.pv` (kernel.fastpath, registered by kernel.emulated.gfx950,
which holds group_pv_terms and lane_sums): used on a device only after it reproduced
advance_torch's bits on a probe (`self_check`: every e4m3 code, NaN codes and scale bits in
masked keys, scale bits of every class, P' from f16-subnormal to infinite, NaN P, alpha 0, a -0
state meeting sums of zeros, rows ending inside the group and rows of no tile, 1, 3 and 16
heads, every launch_config; its 32-key sums exact (probe_sums_exact)). By default that kernel is
emulated_pv_cuda's (variant "cuda": the same arithmetic in CUDA C++ on the f64 tensor cores,
DMMA, where CUDA cc 8.0+ and nvcc are there); CONFORMANCE_FAST_PATHS=emulated.pv=triton selects
the Triton variants (where emulated_state.triton_reason allows). Otherwise, or with
emulated.pv=off (or emulated.state=off, which keeps all running-state updates in torch), the
caller runs group_pv_terms and emulated_state.advance.

Shapes: buffer f32 [rows, H, 512 + 16] (o then l_parts, contiguous); alpha f32 [rows, tiles, H];
p f32 [rows, tiles, H, 128] (any strides); records uint8 [rows * tiles, 128, 656] (contiguous);
masked bool [rows * tiles, 128] (contiguous); counts: the rows' tile counts in the group,
non-increasing (a host list), and the same as an int32 device tensor for the kernel. H <= 16.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

from kernel import fastpath
from kernel.emulated import pv_cuda as emulated_pv_cuda
from kernel.emulated import state as emulated_state
from kernel.emulated.state import _on, triton_reason
from kernel.fp8 import e4m3_table

LATENT = 512
RECORD = 656
SCALE_CAP_BITS = 0x43000000  # f32 bits of 2^7
HEADS_PAD = 16
FAST_PATH = "emulated.pv"  # default: the CUDA DMMA kernel (emulated_pv_cuda); opt-in: the Triton variants

# group_pv_terms(p [R, H, 128], records, masked) -> terms f64 [R, kk, b, H, 128] (torch decode:
# masked keys' record bytes zeroed by the caller), and emulated.lane_sums
PvTerms = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
LaneSums = emulated_state.LaneSums


def advance_torch(
    buffer: torch.Tensor,
    alpha: torch.Tensor,
    p: torch.Tensor,
    records: torch.Tensor,
    masked: torch.Tensor,
    counts: list[int],
    pv_terms: PvTerms,
    lane_sums: LaneSums,
) -> None:
    """The reference: pv_terms on a copy of the records with masked keys' bytes zeroed, then
    emulated_state.advance_torch, in place on `buffer`."""
    rows, tiles, heads = alpha.shape
    zeroed = records.masked_fill(masked.unsqueeze(-1), 0)
    terms = pv_terms(p.reshape(rows * tiles, heads, 128), zeroed, masked)
    emulated_state.advance_torch(buffer, alpha, p, terms, counts, lane_sums)


@functools.cache
def _kernel(interpret: bool) -> Callable[..., object]:
    """The Triton kernel (built on first use; `interpret`: for Triton's CPU interpreter)."""
    del interpret  # part of the cache key: triton.jit reads TRITON_INTERPRET when it decorates
    import triton
    import triton.language as tl

    @triton.jit
    def pv_advance(  # type: ignore[no-untyped-def]
        buf_ptr,
        alpha_ptr,
        p_ptr,
        sp_row,
        sp_tile,
        sp_head,
        sp_key,
        rec_ptr,
        words_ptr,
        masked_ptr,
        table_ptr,
        counts_ptr,
        tiles,
        heads,
        HP: tl.constexpr,
        BLOCK_D: tl.constexpr,
        DOT: tl.constexpr,
    ):
        row = tl.program_id(0)
        blk = tl.program_id(1)  # dims blk * BLOCK_D .. + BLOCK_D - 1
        block = (blk * BLOCK_D) // 128  # their 128-dim block b (its scale)
        h = tl.arange(0, HP)
        live = h < heads
        d = blk * BLOCK_D + tl.arange(0, BLOCK_D)
        row64 = row.to(tl.int64)
        state = buf_ptr + (row64 * heads + h[:, None]) * 528  # [HP, 1]
        o = tl.load(state + d[None, :], mask=live[:, None], other=0.0)  # [HP, BLOCK_D]
        lane = tl.arange(0, 16)
        lane_key = (lane // 4) * 32 + (lane % 4) * 4  # lane (w, g) sums keys 32w + 16s + 4g + r
        lp = tl.load(state + 512 + lane[None, :], mask=live[:, None], other=0.0)  # [HP, 16]
        j = tl.arange(0, 32)  # (a, b', c, t) of an MFMA's keys
        j_key = (j // 16) * 32 + ((j // 8) % 2) * 16 + ((j // 4) % 2) * 8 + j % 4
        n = tl.load(counts_ptr + row)
        for t in range(0, n):
            rt = row64 * tiles + t
            a = tl.load(alpha_ptr + rt * heads + h, mask=live, other=1.0)  # [HP]
            o = o * a[:, None]
            lp = lp * a[:, None]
            p_rows = p_ptr + row64 * sp_row + t * sp_tile + h[:, None] * sp_head  # [HP, 1]
            psum = tl.zeros([HP, 16], dtype=tl.float32)
            for k in tl.static_range(8):
                psum = psum + tl.load(p_rows + (lane_key[None, :] + (k // 4) * 16 + k % 4) * sp_key, mask=live[:, None], other=0.0)
            lp = lp + psum
            for kk in tl.static_range(4):
                key = (kk // 2) * 64 + (kk % 2) * 4 + j_key  # [32]
                slot = rt * 128 + key
                off = tl.load(masked_ptr + slot) != 0
                bits = tl.load(words_ptr + slot * 164 + 128 + block)  # the scale's int32 word 128 + b
                bits = tl.minimum(tl.maximum(bits, 1), 0x43000000)  # [1, bits(2^7)]
                scale = tl.where(off, 0, bits).to(tl.float32, bitcast=True)  # [32]
                pk = tl.load(p_rows + key[None, :] * sp_key, mask=live[:, None], other=0.0)  # [HP, 32]
                p16 = (pk * scale[None, :]).to(tl.float16).to(tl.float64)  # f32 product, RNE to f16
                code = tl.load(rec_ptr + slot[:, None] * 656 + d[None, :]).to(tl.int32)  # [32, BLOCK_D]
                v = tl.where(off[:, None], 0.0, tl.load(table_ptr + code))
                if DOT:
                    term = tl.dot(p16, v) + 0.0  # exact where the sum is; a sum of zeros is +0
                else:
                    term = tl.sum(p16[:, :, None] * v[None, :, :], axis=1) + 0.0
                o = (o.to(tl.float64) + term).to(tl.float32)
        tl.store(state + d[None, :], o, mask=live[:, None])
        owner = (lane[None, :] * 0 + blk) == 0  # l_parts: the programs of dims 0 .. BLOCK_D - 1
        tl.store(state + 512 + lane[None, :], lp, mask=live[:, None] & owner)

    return pv_advance


# how the 32-key dots are formed: DMMA in CUDA (emulated_pv_cuda), f64 tl.dot, or a broadcast
# product and tl.sum (Triton)
VARIANTS = ("cuda", "dot", "sum")
TRITON_VARIANTS = ("dot", "sum")
# (BLOCK_D, num_warps) each variant launches with (launch_config) and its probe checks; the CUDA
# kernel's blocks: 128 dims (one block b), 4 warps
CONFIGS = {"cuda": ((128, 4),), "dot": ((32, 4), (64, 4), (128, 8)), "sum": ((32, 8),)}


def launch_config(rows: int, variant: str = "dot") -> tuple[int, int]:
    """(BLOCK_D, num_warps) for a group of `rows` rows: 128 dims per program where the rows fill
    the device, fewer (more programs per row) for a few rows; the "sum" variant 32 dims and 8
    warps (its [16, 32, 32] f64 product)."""
    configs = CONFIGS[variant]
    return configs[-1] if rows >= 512 or len(configs) == 1 else configs[1] if rows >= 128 else configs[0]


def advance_triton(
    buffer: torch.Tensor,
    alpha: torch.Tensor,
    p: torch.Tensor,
    records: torch.Tensor,
    masked: torch.Tensor,
    counts: torch.Tensor,
    variant: str = "dot",
    config: tuple[int, int] | None = None,
) -> None:
    """The fused updates by the Triton kernel, in place on `buffer` (counts: int32 device tensor;
    variant: one of VARIANTS; config: (BLOCK_D, num_warps), default launch_config). Raises
    ValueError, before any launch, on layouts it does not take."""
    rows, heads = buffer.shape[0], buffer.shape[1]
    tiles = alpha.shape[1]
    if heads > HEADS_PAD or p.dim() != 4 or variant not in TRITON_VARIANTS:
        raise ValueError(f"advance_triton takes 1..{HEADS_PAD} heads, P [rows, tiles, H, 128] and a variant of {TRITON_VARIANTS}")
    if not (buffer.is_contiguous() and alpha.is_contiguous() and records.is_contiguous() and masked.is_contiguous()):
        raise ValueError("advance_triton needs contiguous buffer, alpha, records and masked")
    if records.shape != (rows * tiles, 128, RECORD) or masked.shape != (rows * tiles, 128):
        raise ValueError("advance_triton needs records [rows * tiles, 128, 656] and masked [rows * tiles, 128]")
    words = records.view(torch.int32)  # the scale bits (raises on a misaligned storage offset)
    table = e4m3_table(records.device, torch.float64)
    dims, warps = config or launch_config(rows, variant)
    kernel = _kernel(fastpath.interpreting())
    options = {} if fastpath.interpreting() else {"enable_fp_fusion": False, "num_warps": warps}
    with _on(buffer.device):
        strides = (p.stride(0), p.stride(1), p.stride(2), p.stride(3))
        grid = (rows, LATENT // dims)
        kernel[grid](  # type: ignore[index]
            buffer,
            alpha,
            p,
            *strides,
            records,
            words,
            masked.view(torch.uint8),
            table,
            counts,
            tiles,
            heads,
            HP=HEADS_PAD,
            BLOCK_D=dims,
            DOT=variant == "dot",
            **options,
        )


def advance_kernel(
    buffer: torch.Tensor,
    alpha: torch.Tensor,
    p: torch.Tensor,
    records: torch.Tensor,
    masked: torch.Tensor,
    counts: torch.Tensor,
    variant: str,
    config: tuple[int, int] | None = None,
) -> None:
    """The fused updates by the kernel of `variant` (VARIANTS), in place on `buffer`."""
    if variant == "cuda":
        emulated_pv_cuda.advance_cuda(buffer, alpha, p, records, masked, counts)
    else:
        advance_triton(buffer, alpha, p, records, masked, counts, variant, config)


# (rows, tiles, heads) of the probe's groups: ragged counts, sizes of 1 (which Triton
# specialises into constants) and 16 heads
PROBE_SHAPES = ((5, 3, 3), (2, 1, 1), (3, 2, 16), (1, 4, 2))


def probe_inputs(
    device: torch.device, rows: int = 5, tiles: int = 3, heads: int = 3
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """(buffer, alpha, p, records, masked, counts) of a group of rows x tiles x heads with values
    of every class the fused updates meet, each 32-key sum exact in f64 (probe_sums_exact).

    P per (row, tile, head) within 2^-6 of a level 2^e, e from -27 (P' f16-subnormal or 0) to 10
    (P' infinite with the largest scales), a few NaN; unmasked keys' scale bits from [2^-3, 2^7],
    the clamped classes (negative, 0, subnormal, above 2^7, NaN bits) and 2^-149-like tiny scales
    whose P' is 0; codes of every value (NaN codes rare in unmasked keys, frequent in masked
    ones, with NaN scale bits); the state as emulated_state.probe_inputs draws it, with row 0,
    head 0 at -0 and its P 0 on every tile (zero sums must keep -0 + +0 = +0 as the BLAS does)."""
    g = torch.Generator().manual_seed(31 + rows * 1000 + tiles * 10 + heads)
    buffer, alpha, _, _, counts = emulated_state.probe_inputs(torch.device("cpu"), rows, tiles, heads)
    r = rows * tiles
    level = torch.randint(-27, 11, (rows, tiles, heads, 1), generator=g).double()
    spread = torch.randint(-5, 1, (rows, tiles, heads, 128), generator=g).double()
    p = (torch.rand(rows, tiles, heads, 128, generator=g, dtype=torch.float64) + 1.0) * torch.exp2(level + spread - 1.0)
    p = torch.where(torch.rand(p.shape, generator=g) < 0.01, float("nan"), p)
    p = torch.where(torch.rand(p.shape, generator=g) < 0.03, 0.0, p).to(torch.float32)
    p[0, :, 0] = 0.0
    buffer[0, 0, :LATENT] = -0.0
    alpha[0, :, 0] = 1.0
    p = p.transpose(1, 2).contiguous().transpose(1, 2)  # the batched path's layout: [row, H, tile, key] in memory
    masked = torch.rand(r, 128, generator=g) < 0.3
    masked[:tiles] = False  # row 0's tiles
    codes = torch.randint(0, 256, (r, 128, LATENT), generator=g, dtype=torch.int64)
    nan_code = (codes & 0x7F) == 0x7F
    keep_nan = torch.rand(codes.shape, generator=g) < 0.002
    codes = torch.where(nan_code & ~keep_nan & ~masked.unsqueeze(-1), codes ^ 0x01, codes)
    codes[:tiles, :, :64] = torch.randint(0x80, 0xFF, (tiles, 128, 64), generator=g)  # row 0: V <= -0 under its head 0's zero P
    codes[masked] = torch.where(torch.rand(int(masked.sum()), LATENT, generator=g) < 0.5, 0x7F, codes[masked])
    scale = torch.exp2(torch.randint(-3, 7, (r, 128, 4), generator=g).double()) * (
        torch.rand(r, 128, 4, generator=g, dtype=torch.float64) + 1.0
    )
    bits = scale.to(torch.float32).view(torch.int32)
    special = torch.tensor(
        [0, 1, 5, -1, -(2**31), 0x00400000, 0x43000000, 0x43000001, 0x7F800000, 0x7FC00000, -0x00400000, 0x3F800000], dtype=torch.int32
    )
    pick = torch.rand(bits.shape, generator=g) < 0.15
    bits = torch.where(pick, special[torch.randint(0, special.numel(), bits.shape, generator=g)], bits)
    bits = torch.where(masked.unsqueeze(-1) & (torch.rand(bits.shape, generator=g) < 0.5), 0x7FC00000, bits)
    records = torch.randint(0, 256, (r, 128, RECORD), generator=g, dtype=torch.uint8)
    records[..., :LATENT] = codes.to(torch.uint8)
    records[..., LATENT : LATENT + 16] = bits.view(torch.uint8).view(r, 128, 16)
    return buffer.to(device), alpha.to(device), p.to(device), records.to(device), masked.to(device), counts


def probe_sums_exact(p: torch.Tensor, records: torch.Tensor, masked: torch.Tensor) -> bool:
    """Whether every finite 32-key sum of the group's PV products is exact in f64 (Knuth's
    two-sum of the sequential sum leaves no error at any step), so that every summation order
    gives its bits."""
    rows, tiles, heads = p.shape[0], p.shape[1], p.shape[2]
    r = rows * tiles
    bits = records[..., LATENT : LATENT + 16].contiguous().view(torch.int32)
    scale = torch.where(masked.unsqueeze(-1), 0, bits.clamp(1, SCALE_CAP_BITS)).view(torch.float32)  # [R, 128, 4]
    codes = records[..., :LATENT].masked_fill(masked.unsqueeze(-1), 0)
    v = e4m3_table(records.device, torch.float64)[codes.long()].view(r, 128, 4, 128)  # [R, key, b, d]
    p16 = (p.reshape(r, heads, 128, 1) * scale.unsqueeze(1)).to(torch.float16).to(torch.float64)  # [R, H, key, b]
    key = torch.arange(128, device=p.device).view(2, 2, 2, 2, 2, 4).permute(0, 4, 1, 2, 3, 5).reshape(4, 32)  # [kk, j]
    s = torch.zeros(r, 4, heads, 4, 128, dtype=torch.float64, device=p.device)
    exact = torch.ones_like(s, dtype=torch.bool)
    for i in range(32):
        k = key[:, i]
        x = p16[:, :, k, :].permute(0, 2, 1, 3).unsqueeze(-1) * v[:, k].unsqueeze(2)  # [R, kk, H, b, d]
        total = s + x
        back = total - s
        err = (s - (total - back)) + (x - back)
        exact &= ~torch.isfinite(total) | (err == 0)
        s = total
    return bool(exact.all())


def self_check(device: torch.device, pv_terms: PvTerms, lane_sums: LaneSums, variant: str = "dot") -> bool:
    """Whether the kernel of `variant` gives advance_torch's bits on the probe's groups on
    `device`, at every BLOCK_D it may pick."""
    for shape in PROBE_SHAPES:
        buffer, alpha, p, records, masked, counts = probe_inputs(device, *shape)
        expected = buffer.clone()
        advance_torch(expected, alpha, p, records, masked, counts, pv_terms, lane_sums)
        counts_dev = torch.tensor(counts, dtype=torch.int32, device=device)
        for config in CONFIGS[variant]:
            got = buffer.clone()
            advance_kernel(got, alpha, p, records, masked, counts_dev, variant, config)
            if not fastpath.same_bits(expected, got):
                return False
    return True


def eligible(device: torch.device, variant: str) -> str:
    """Where `variant` may run (kernel.fastpath.FastPath.eligible): "cuda" where
    emulated_pv_cuda.supported (CUDA cc 8.0+, nvcc; on one H200 the f64 tl.dot variant did not
    compile and with the tl.sum variant emulated took 486 ms at n_q 4096, 98.7 without), the
    Triton variants where emulated_state.triton_reason allows."""
    if variant == "cuda":
        return "" if emulated_pv_cuda.supported(device) else "needs a CUDA device of compute capability 8.0+ and nvcc"
    return triton_reason(device)


def advance(
    buffer: torch.Tensor, alpha: torch.Tensor, p: torch.Tensor, records: torch.Tensor, masked: torch.Tensor, counts: torch.Tensor
) -> bool:
    """The fused updates by the variant the fast path FAST_PATH gives on the device (the caller
    checked it gives one), in place on `buffer`; False, with a warning and `buffer` untouched,
    where it raises before its launch (the caller then runs group_pv_terms and
    emulated_state.advance)."""
    variant = fastpath.choose(FAST_PATH, buffer.device) or "dot"
    try:
        advance_kernel(buffer, alpha.contiguous(), p, records, masked, counts, variant)
    except Exception as err:  # noqa: BLE001 - a layout or shape the kernel does not take: the torch path
        warnings.warn(f"emulated: {variant} PV kernel failed ({type(err).__name__}: {err}); using torch", stacklevel=2)
        return False
    return True
