"""The reference's two float64 products straight from the records, on CUDA: no f64 key tensor.

For a block of R query rows with their key slots (int64 [R, L], -1 at a masked slot) over the flat
cache (uint8 [rows, 656]):

    scores(q_ref, rows, slots)  z   f64 [R, H, L]   z[r, h, l] = sum_d q_ref[rows[r], h, d] K[slot(r, l), d]
    weighted(w, slots)          o   f64 [R, H, 512] o[r, h, c] = sum_l w[r, h, l] V[slot(r, l), c]

with K = [code * scale (512), rope (64)] and V = code * scale, +0 at masked slots: the values
oracle.key_decode's kernel writes (the code through the 256-entry table key_decode.code_table, a
NaN code keeping its own payload, the f32 scale widened exactly, rope a bf16 widened), decoded in
registers from each record as the Triton kernels read it, never stored. The sums are tl.dot's
(float64 operands: DMMA or FMA on a GPU, numpy under Triton's interpreter) in an order of their
own: each result is a float64 dot of the exact products, within gamma_m(2^-53) sum |terms| of
the exact value, m the number of terms (576 for z, L for o); the bits may differ from cuBLAS's
bmm (oracle.reference's other path) within that rounding, which oracle.bound charges the reference
(ref_qk_err, gamma(2 n_valid + 4)).

Two implementations of these Products: the Triton kernels here, and oracle.dmma_products' CUDA
kernels on the f64 tensor cores (DMMA; the same contract): the variants of the fast path
`oracle.products` (kernel.fastpath). CONFORMANCE_FAST_PATHS chooses: unset or
`oracle.products=auto`, the DMMA kernels on a CUDA device of compute capability 8.0+ with an nvcc
to build them (else the bmm's, silently); `oracle.products=dmma`, the same, with a warning when
they cannot be used; `oracle.products=triton`, the Triton kernels (CUDA, or Triton's CPU
interpreter; opt-in: on one H200 their f64 tl.dot did not compile with the Triton there);
`oracle.products=off`, never. Either is used (oracle.reference, `products`) only after
`self_check` passed on the device: on a probe of every code under scales of every class (0,
subnormal, inf, NaN included), masked slots and rows without a key, both products agree with the
torch bmm's of the decoded keys within gamma_m(2^-53) sum |terms| per result, NaN exactly where
the bmm's are NaN and infinities equal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from kernel import cuda_binary, fastpath
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET
from oracle import key_decode
from oracle.accumulation import gamma

FAST_PATH = "oracle.products"
U64 = 2.0**-53


@dataclass
class Shapes:
    """Launch shapes (module-level `SHAPES`; tunable). scores: keys per program, dims per dot
    step, warps; weighted: keys per step, output columns per program (divides 128), warps;
    heads per program: at most max_heads (a power of two >= 16)."""

    score_keys: int = 64
    score_dims: int = 64
    score_warps: int = 4
    out_keys: int = 32
    out_cols: int = 128
    out_warps: int = 4
    max_heads: int = 64


SHAPES = Shapes()


@functools.cache
def _kernels(interpret: bool) -> tuple[Callable[..., object], Callable[..., object]]:
    """(scores kernel, weighted kernel), built on first use (`interpret`: the cache key, as in key_decode)."""
    del interpret
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n_keys", "H"])
    def scores_kernel(  # type: ignore[no-untyped-def]
        q_ptr,
        rows_ptr,
        slots_ptr,
        cache_ptr,
        scale_ptr,
        rope_ptr,
        table_ptr,
        z_ptr,
        n_keys,
        H,
        HB: tl.constexpr,
        BL: tl.constexpr,
        BD: tl.constexpr,
    ):
        r = tl.program_id(0).to(tl.int64)
        key = tl.program_id(1).to(tl.int64) * BL + tl.arange(0, BL).to(tl.int64)
        head = tl.program_id(2) * HB + tl.arange(0, HB)
        live = key < n_keys
        hmask = head < H
        slot = tl.load(slots_ptr + r * n_keys + key, mask=live, other=-1)
        valid = slot >= 0
        record = tl.where(valid, slot, 0) * 656
        row = tl.load(rows_ptr + r)
        q_row = q_ptr + row * (H * 576) + head.to(tl.int64) * 576
        acc = tl.zeros((HB, BL), dtype=tl.float64)
        for piece in tl.static_range(512 // BD):
            # K [BL, BD] at latent columns piece * BD.. (one scale block): key_decode's table
            # variant (a NaN code keeps its own payload; the f32 scale widened exactly)
            cols = piece * BD + tl.arange(0, BD)
            code = tl.load(cache_ptr + record[:, None] + cols[None, :], mask=valid[:, None], other=0).to(tl.int32)
            value = tl.load(table_ptr + code)
            scale = tl.load(scale_ptr + (record // 4 + 128 + (piece * BD) // 128), mask=valid, other=0.0).to(tl.float64)
            nan_value = (value.to(tl.int64, bitcast=True) & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000
            k = tl.where(valid[:, None], tl.where(nan_value, value, value * scale[:, None]), 0.0)
            qp = tl.load(q_row[:, None] + cols[None, :], mask=hmask[:, None], other=0.0)
            acc = tl.dot(qp, tl.trans(k), acc)
        rcols = tl.arange(0, 64)
        half = tl.load(rope_ptr + (record // 2 + 264)[:, None] + rcols[None, :], mask=valid[:, None], other=0)
        rope = ((half.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True).to(tl.float64)
        rope = tl.where(valid[:, None], rope, 0.0)
        qr = tl.load(q_row[:, None] + (512 + rcols)[None, :], mask=hmask[:, None], other=0.0)
        acc = tl.dot(qr, tl.trans(rope), acc)
        out = z_ptr + r * (H * n_keys) + head.to(tl.int64)[:, None] * n_keys + key[None, :]
        tl.store(out, acc, mask=hmask[:, None] & live[None, :])

    @triton.jit(do_not_specialize=["n_keys", "H"])
    def weighted_kernel(  # type: ignore[no-untyped-def]
        w_ptr,
        slots_ptr,
        cache_ptr,
        scale_ptr,
        table_ptr,
        o_ptr,
        n_keys,
        H,
        HB: tl.constexpr,
        BL: tl.constexpr,
        BC: tl.constexpr,
    ):
        r = tl.program_id(0).to(tl.int64)
        col0 = tl.program_id(1) * BC
        head = tl.program_id(2) * HB + tl.arange(0, HB)
        hmask = head < H
        w_row = w_ptr + r * (H * n_keys) + head.to(tl.int64) * n_keys
        acc = tl.zeros((HB, BC), dtype=tl.float64)
        cols = col0 + tl.arange(0, BC)
        for start in range(0, n_keys, BL):
            key = start + tl.arange(0, BL).to(tl.int64)
            live = key < n_keys
            slot = tl.load(slots_ptr + r * n_keys + key, mask=live, other=-1)
            valid = slot >= 0
            record = tl.where(valid, slot, 0) * 656
            code = tl.load(cache_ptr + record[:, None] + cols[None, :], mask=valid[:, None], other=0).to(tl.int32)
            value = tl.load(table_ptr + code)
            scale = tl.load(scale_ptr + (record // 4 + 128 + col0 // 128), mask=valid, other=0.0).to(tl.float64)
            nan_value = (value.to(tl.int64, bitcast=True) & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000
            v = tl.where(valid[:, None], tl.where(nan_value, value, value * scale[:, None]), 0.0)
            w = tl.load(w_row[:, None] + key[None, :], mask=hmask[:, None] & live[None, :], other=0.0)
            acc = tl.dot(w, v, acc)
        out = o_ptr + r * (H * 512) + head.to(tl.int64)[:, None] * 512 + cols[None, :]
        tl.store(out, acc, mask=hmask[:, None])

    return scores_kernel, weighted_kernel


def _head_block(heads: int, shapes: Shapes) -> int:
    return min(max(16, 1 << (heads - 1).bit_length()), shapes.max_heads)


@dataclass(frozen=True)
class Products:
    """The two products over one flat cache (uint8 [rows, 656], contiguous, 16-byte aligned; see
    key_decode.usable) on its device; `table`: key_decode.code_table of that device."""

    flat: torch.Tensor
    table: torch.Tensor

    def scores(self, q_ref: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, shapes: Shapes | None = None) -> torch.Tensor:
        """z f64 [R, H, L] = q_ref[rows] . K[slots] (q_ref f64 [n_q, H, 576] contiguous, rows
        int64 [R], slots int64 [R, L] contiguous, -1: masked, K +0). No host read."""
        s = shapes or SHAPES
        n_rows, n_keys = slots.shape
        heads = q_ref.shape[1]
        z = torch.empty(n_rows, heads, n_keys, dtype=torch.float64, device=slots.device)
        if z.numel() == 0:
            return z.zero_()
        hb = _head_block(heads, s)
        grid = (n_rows, triton_cdiv(n_keys, s.score_keys), triton_cdiv(heads, hb))
        kernel = _kernels(fastpath.interpreting())[0]
        kernel[grid](
            q_ref, rows, slots, self.flat, self.flat.view(torch.float32), self.flat.view(torch.int16), self.table, z, n_keys,
            H=heads, HB=hb, BL=s.score_keys, BD=s.score_dims, num_warps=s.score_warps,
        )  # fmt: skip
        return z

    def weighted(self, w: torch.Tensor, slots: torch.Tensor, shapes: Shapes | None = None) -> torch.Tensor:
        """o f64 [R, H, 512] = w @ V[slots] (w f64 [R, H, L] contiguous, slots int64 [R, L]
        contiguous, -1: masked, V +0). No host read."""
        s = shapes or SHAPES
        n_rows, heads, n_keys = w.shape
        o = torch.empty(n_rows, heads, LATENT_DIM, dtype=torch.float64, device=w.device)
        if o.numel() == 0:
            return o
        if n_keys == 0:
            return o.zero_()
        hb = _head_block(heads, s)
        grid = (n_rows, LATENT_DIM // s.out_cols, triton_cdiv(heads, hb))
        kernel = _kernels(fastpath.interpreting())[1]
        kernel[grid](
            w, slots, self.flat, self.flat.view(torch.float32), self.table, o, n_keys,
            H=heads, HB=hb, BL=s.out_keys, BC=s.out_cols, num_warps=s.out_warps,
        )  # fmt: skip
        return o


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def usable(flat: torch.Tensor) -> bool:
    """Whether the kernels can read this flat cache (layout only)."""
    return key_decode.usable(flat)


def _decode_torch(flat: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Keys f64 [*S, 576] of slots int64 [*S] (-1: masked, +0) as the torch decode forms them."""
    from oracle.rows import _decode_keys_torch

    return _decode_keys_torch(flat, slots, slots >= 0, False)


@dataclass(frozen=True)
class CheckResult:
    """self_check's findings: ok, and the largest |fused - torch| / bound of each product
    (0 where every finite result agrees exactly; inf where a NaN or infinity differs)."""

    ok: bool
    scores_ratio: float
    out_ratio: float


def _within(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor) -> tuple[bool, float]:
    """(NaN exactly where want is NaN, infinities equal, |got - want| <= bound elsewhere; the
    largest |got - want| / bound over the finite results, inf when the first two fail)."""
    nan = want.isnan()
    if not torch.equal(got.isnan(), nan):
        return False, float("inf")
    inf = want.isinf()
    if not torch.equal(got[inf], want[inf]) or bool(got[~inf & ~nan].isinf().any()):
        return False, float("inf")
    fin = ~(nan | inf)
    diff = (got[fin] - want[fin]).abs()
    b = bound[fin]
    ok = bool((diff <= b).all())
    ratio = torch.where(diff == 0, 0.0, diff / b)
    return ok, float(ratio.max()) if ratio.numel() else 0.0


def probe_problem(device: torch.device, heads: int = 5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(flat uint8 [2048, 656], q_ref f64 [24, heads, 576], rows int64 [20], slots int64 [20, 110])
    for self_check: kernel.fastpath.check_records' records (every code in every block under scales of
    every class: 0, subnormal, inf, NaN, extremes) followed by 1024 records of finite codes under
    finite scales of every magnitude class (their rows give finite results that test the rounding
    bound); slots mix the two, masked slots (-1) in between, and two rows hold no key at all. q
    is bf16-valued with zeros, negatives and subnormals, its rows taken out of order."""
    gen = torch.Generator().manual_seed(31)
    special, probe_slots = fastpath.check_records(torch.device("cpu"))
    n = 1024
    codes = torch.randint(0, 256, (n, LATENT_DIM), generator=gen, dtype=torch.int32)
    codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes).to(torch.uint8)  # no NaN code
    finite = torch.tensor([1.0, 2.0**-10, 3.7e-5, 1e-40, 0.0, -0.0, -2.5, 2.0**-126, 2.0**-149, 448.0, 0.1, 7.0e3], dtype=torch.float32)
    scales = finite[torch.randint(0, finite.numel(), (n, 4), generator=gen)]
    rope = (torch.randn(n, 64, generator=gen) * torch.pow(2.0, torch.randint(-20, 20, (n, 1), generator=gen))).to(torch.bfloat16)
    plain = torch.cat((codes, scales.view(torch.uint8).view(n, 16), rope.view(torch.uint8).view(n, 128)), dim=1)
    flat = torch.cat((special, plain), dim=0)
    width = 110
    special_rows = probe_slots[: 10 * width].view(10, width)  # every probe record once, masked slots between
    plain_rows = n + torch.randint(0, n, (8, width), generator=gen)
    plain_rows[2, ::3] = -1
    plain_rows[5, 100:] = -1
    empty = torch.full((2, width), -1, dtype=torch.int64)
    slots = torch.cat((special_rows, plain_rows, empty), dim=0)
    q = torch.randn(24, heads, HEAD_DIM, generator=gen) * torch.pow(2.0, torch.randint(-8, 8, (24, heads, 1), generator=gen))
    q[0, 0, :100] = 0.0
    q[3, -1, 7] = 1e-39
    q = q.to(torch.bfloat16).to(torch.float64)
    rows = torch.randperm(24, generator=gen)[:20]
    return flat.to(device), q.to(device), rows.to(device), slots.to(device)


def self_check(device: torch.device, products: ProductsLike | None = None, heads: int = 5, impl: str = "triton") -> CheckResult:
    """Whether the kernels agree with the torch bmm's of the torch-decoded keys on probe_problem
    within the reference's rounding: per score gamma_576(2^-53) sum_d |q_d| |K_d|, per output
    gamma_L(2^-53) sum_l |w_l| |V_l| (w: the probe's exp weights, the old scores' softmax
    numerators), NaN exactly where the bmm's give NaN, infinities equal. `products`: over
    probe_problem's flat cache (default: built here, of implementation `impl`: "triton" or
    "dmma")."""
    flat, q, rows, slots = probe_problem(device, heads)
    products = products or make_products(impl, flat, key_decode.code_table(device))
    keys = _decode_torch(flat, slots)  # [R, L, 576]
    want = torch.bmm(q[rows], keys.transpose(1, 2))
    bound = gamma(HEAD_DIM, U64) * torch.bmm(q[rows].abs(), keys.abs().transpose(1, 2))
    got = products.scores(q, rows, slots)
    ok_s, ratio_s = _within(got, want, bound)
    z = want.masked_fill(~(slots >= 0).unsqueeze(1), float("-inf"))
    w = torch.exp(z - z.amax(dim=-1, keepdim=True)).contiguous()  # NaN rows: no key, or NaN scores
    values = keys[..., :LATENT_DIM]
    want_o = torch.bmm(w, values)
    bound_o = gamma(slots.shape[1], U64) * torch.bmm(w.abs(), values.abs())
    got_o = products.weighted(w, slots)
    ok_o, ratio_o = _within(got_o, want_o, bound_o)
    return CheckResult(ok_s and ok_o, ratio_s, ratio_o)


IMPLEMENTATIONS = ("dmma", "triton")


class ProductsLike(Protocol):
    """What oracle.reference calls: Products or oracle.dmma_products.DmmaProducts."""

    def scores(self, q_ref: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, shapes: Shapes | None = None) -> torch.Tensor: ...

    def weighted(self, w: torch.Tensor, slots: torch.Tensor, shapes: Shapes | None = None) -> torch.Tensor: ...


def make_products(impl: str, flat: torch.Tensor, table: torch.Tensor) -> ProductsLike:
    """The products of implementation `impl` ("dmma" or "triton") over `flat`."""
    if impl == "dmma":
        from oracle.dmma_products import DmmaProducts

        return DmmaProducts(flat, table)
    if impl == "triton":
        return Products(flat, table)
    raise ValueError(f"unknown fused-products implementation {impl!r} (one of {IMPLEMENTATIONS})")


def _dmma_supported(device: torch.device) -> bool:
    return cuda_binary.dmma_supported(device)


def eligible(device: torch.device, variant: str) -> str:
    """Where `variant` may run (kernel.fastpath.FastPath.eligible): "dmma" on a CUDA device of
    compute capability 8.0+ with nvcc; "triton" on CUDA or under Triton's CPU interpreter, Triton
    importable."""
    if variant == "dmma":
        return "" if _dmma_supported(device) else "the DMMA products need a CUDA device of compute capability 8.0+ and nvcc"
    if device.type != "cuda" and not (device.type == "cpu" and fastpath.interpreting()):
        return "needs a CUDA device, or Triton's interpreter (TRITON_INTERPRET=1) on a CPU"
    return "" if fastpath.have_triton() else "Triton is not installed"


def _checked(device: torch.device, variant: str) -> bool:
    """self_check of `variant` on `device`, raising with the ratios when it fails (the fast path's
    warning then says by how much)."""
    result = self_check(device, impl=variant)
    if not result.ok:
        raise ValueError(
            f"the products differ from the bmm's beyond the reference's rounding on the probe "
            f"(scores {result.scores_ratio:.3g}, out {result.out_ratio:.3g} x the bound)"
        )
    return True


fastpath.register(
    fastpath.FastPath(
        FAST_PATH, IMPLEMENTATIONS[:1], lambda device, variant: _checked(device, variant), eligible, opt_in=IMPLEMENTATIONS[1:]
    )
)


def products(flat: torch.Tensor) -> ProductsLike | None:
    """The fused products over the flat cache (usable(flat) held) where the fast path FAST_PATH
    gives a variant on its device, else None (the bmm's)."""
    variant = fastpath.choose(FAST_PATH, flat.device)
    return None if variant is None else make_products(variant, flat, key_decode.code_table(flat.device))


# the kernels' constants
assert LATENT_DIM == 512 and RECORD_BYTES == 656 and SCALE_OFFSET == 512 and ROPE_OFFSET == 528 and HEAD_DIM == 576
