"""A catalogue of broken kernels: the suite's own strength is measured by how many it catches.

Each mutant is the emulated gfx950 kernel (`kernel.emulated.gfx950`) with one realistic bug: one stage
replaced by a broken copy (the smallest change that reproduces the bug class), or the kernel
wrapped. Every mutant is a module-level `Backend`, so

    --conformance-kernel conformance.mutation.catalogue:tail_unmasked   (the conformance suite's kernel option)

runs the conformance suite against it through `kernel.registry.resolve`, and an entry of
`CATALOGUE` (name -> `Mutant`), whose names are stable snake_case identifiers: a mutation-score
run iterates `CATALOGUE.items()` and resolves `Mutant.spec` (``conformance.mutation.catalogue:NAME``).

A mutant declares the same numerics profile as the emulated kernel (gfx950): the bug must be
caught by the oracle's bound or by an exact check, never by a profile mismatch.
docs/reference/mutants.md explains each bug, why it is realistic and which property of a conformance
suite should catch it; tests/conformance/mutation/test_mutants.py shows, for each one, a case that kills it and a case
outside its bug class where it agrees bit for bit with the emulated kernel.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from conformance.mutation import independent as _independent
from conformance.mutation import precision_defects as _precision
from kernel.backend import Backend
from kernel.emulated import gfx950 as emulated
from kernel.emulated.gfx950 import (
    LN2_F32,
    LO_E8M0_OFFSET,
    LO_FACTOR,
    M_FLOOR,
    MASKED_SCORE,
    P_SHIFT,
    SCALE_CAP_BITS,
    TILE,
    QuantizedQ,
    SoftmaxState,
    _e8m0_factor,
    bounded_read,
    exp2_f32,
    f32,
    log2_f32,
    run_emulated,
)
from kernel.fp8 import decode_e4m3, e4m3_table, encode_e4m3, f32_exponent_field
from kernel.record import HEAD_DIM, LATENT_DIM, RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET

MODULE = "conformance.mutation.catalogue"

BugClass = Literal["addressing", "masking", "tiling", "layout", "quantization", "qk", "softmax", "pv", "finalize"]
BUG_CLASSES: tuple[BugClass, ...] = ("addressing", "masking", "tiling", "layout", "quantization", "qk", "softmax", "pv", "finalize")


@dataclass(frozen=True)
class Mutant:
    """One broken kernel.

    name: stable snake_case identifier (the module attribute and the CATALOGUE key);
    backend: the registry Backend (profile gfx950, like the kernel it breaks);
    description: the bug in one line;
    bug_class: which part of the kernel it breaks (one of BUG_CLASSES);
    needs: what an input must have for the bug to show (one line, for reports).
    """

    name: str
    backend: Backend
    description: str
    bug_class: BugClass
    needs: str

    @property
    def spec(self) -> str:
        """The `--conformance-kernel` spelling that resolves to this mutant (`conformance.mutation.catalogue:NAME`)."""
        return f"{MODULE}:{self.name}"


# ---------------------------------------------------------------------------------------------
# Broken stages. Each is a copy of the stage in kernel.emulated.gfx950 with one change, marked "BUG".


def read_q_head_stride_ignored(q: torch.Tensor) -> torch.Tensor:
    """read_q addressing head h at row * stride_q + h * 576 (heads assumed contiguous)."""
    wrong = q.as_strided(q.shape, (q.stride(0), HEAD_DIM, 1), q.storage_offset())  # BUG: q.stride(1) ignored
    return wrong.to(torch.float32)


def load_row_ranges_begin_off_by_one(indptr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row q starts at indptr[q + 1] (the end pointer loaded as the begin); its length is right."""
    ptr = indptr.to(torch.int64)
    return ptr[1:], (ptr[1:] - ptr[:-1]).clamp_min(0)  # BUG: ptr[1:] for the begin


def tile_count_last_valid_off_by_one(indices: torch.Tensor, r_beg: torch.Tensor, r_len: torch.Tensor, has_invalid: bool) -> torch.Tensor:
    """tile_count whose has_invalid scan keeps the last valid position, not one past it."""
    if not has_invalid:
        return (r_len + TILE - 1) // TILE
    width = int(r_len.max()) if r_len.numel() else 0
    if width == 0:
        return torch.zeros_like(r_len)
    offsets = torch.arange(width, device=r_len.device)
    in_row = offsets < r_len.unsqueeze(1)
    entries = bounded_read(indices, r_beg.unsqueeze(1) + offsets)
    marks = torch.where(in_row & (entries >= 0), offsets, 0)  # BUG: offsets instead of offsets + 1
    last_valid = marks.amax(dim=1)
    return (last_valid + TILE - 1) // TILE


def _load_slots(
    indices: torch.Tensor,
    r_beg: torch.Tensor,
    r_len: torch.Tensor,
    tile: int,
    *,
    tile_stride: int = TILE,
    mask_tail: bool = True,
    mask_negative: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """kernel.emulated.gfx950.load_slots with one knob per bug (the defaults reproduce it exactly).

    tile_stride: first position of tile t is t * tile_stride; mask_tail: positions >= len masked;
    mask_negative: entries < 0 masked (when off, their address is still clamped to row 0, as the
    seed kernel clamps every negative entry's DMA address)."""
    positions = tile * tile_stride + torch.arange(TILE, device=r_beg.device)
    in_row = positions < r_len.unsqueeze(1)
    entries = bounded_read(indices, r_beg.unsqueeze(1) + positions)
    masked = torch.zeros_like(in_row)
    if mask_tail:
        masked = masked | ~in_row
    if mask_negative:
        masked = masked | (entries < 0)
    return torch.where(masked | (entries < 0), 0, entries), masked


def load_slots_tail_unmasked(
    indices: torch.Tensor, r_beg: torch.Tensor, r_len: torch.Tensor, tile: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """load_slots without the `position < len` mask: the last tile reads the next row's entries."""
    return _load_slots(indices, r_beg, r_len, tile, mask_tail=False)


def load_slots_invalid_unmasked(
    indices: torch.Tensor, r_beg: torch.Tensor, r_len: torch.Tensor, tile: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """load_slots without the `entry < 0` mask: a -1 entry is a valid key read from row 0."""
    return _load_slots(indices, r_beg, r_len, tile, mask_negative=False)


def load_slots_tile_stride_off_by_one(
    indices: torch.Tensor, r_beg: torch.Tensor, r_len: torch.Tensor, tile: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """load_slots with tile t starting at t * 129: position 128 (and 257, ...) is never read."""
    return _load_slots(indices, r_beg, r_len, tile, tile_stride=TILE + 1)


def gather_records_offset32(kv_rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """gather_records with the byte offset slot * 656 computed in 32 bits (a buffer descriptor's
    unsigned voffset): past 4 GiB it wraps and the 656 bytes at the wrapped offset are read.

    The windows are an unfolded view of the flat uint8 cache, so nothing large is materialized."""
    flat = kv_rows.reshape(-1)
    offsets = (slots.to(torch.int64) * RECORD_BYTES) & 0xFFFFFFFF  # BUG: 32-bit offset
    windows = flat.unfold(0, RECORD_BYTES, 1)  # [bytes - 655, 656] view, window i = flat[i : i + 656]
    return windows[offsets]


def quantize_q_hi_only(q32: torch.Tensor) -> QuantizedQ:
    """quantize_q without the lo residual: Q enters QK as hi alone (4 significant bits)."""
    qq = emulated.quantize_q(q32)
    return dataclasses.replace(qq, lo=torch.zeros_like(qq.lo))  # BUG: lo dropped


def quantize_q_lo_e8m0_wraps(q32: torch.Tensor) -> QuantizedQ:
    """quantize_q as the seed writes it: s = max(exp(amax) - 7, 1), and the lo part's E8M0 byte
    s - 5 wraps modulo 256 for tiny blocks (s < 5 gives 2^125 .. 2^127 or NaN)."""
    n_q, heads, _ = q32.shape
    blocks = q32[..., :LATENT_DIM].reshape(n_q, heads, 4, 128)
    amax = blocks.abs().amax(dim=-1)
    s = (f32_exponent_field(amax) - 7).clamp_min(1)  # BUG: floor 1, not 5
    inv = ((254 - s) << 23).to(torch.int32).view(torch.float32)
    x = blocks * inv.unsqueeze(-1)
    hi_codes = encode_e4m3(x, saturate=False)
    hi = decode_e4m3(hi_codes, torch.float32)
    lo_codes = encode_e4m3((x - hi) * LO_FACTOR, saturate=False)
    return QuantizedQ(
        hi=decode_e4m3(hi_codes).reshape(n_q, heads, LATENT_DIM),
        lo=decode_e4m3(lo_codes).reshape(n_q, heads, LATENT_DIM),
        hi_e8m0=s,
        lo_e8m0=(s - LO_E8M0_OFFSET) & 0xFF,  # BUG: the byte wraps below 0
        rope=q32[..., LATENT_DIM:].to(torch.float64),
    )


def _qk_scores(
    qq: QuantizedQ, rows: torch.Tensor, records: torch.Tensor, *, k_scale: Literal["exponent", "value"] = "exponent", rope: bool = True
) -> torch.Tensor:
    """kernel.emulated.gfx950.qk_scores with one knob per bug (the defaults reproduce it exactly).

    k_scale: "exponent" feeds the record scale's exponent field as E8M0 (mantissa dropped),
    "value" multiplies by the full f32 scale; rope: whether the two rope MFMAs run."""
    r = records.shape[0]
    table = e4m3_table(records.device, torch.float64)
    k_codes = table[records[..., :SCALE_OFFSET].to(torch.int64)]
    k_scale_bits = records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)
    if k_scale == "exponent":
        k_scale_value = _e8m0_factor(f32_exponent_field(k_scale_bits))
    else:
        k_scale_value = k_scale_bits.to(torch.float64)
    k_rope = records[..., ROPE_OFFSET:].contiguous().view(torch.bfloat16).to(torch.float64)
    k_view = k_codes.reshape(r, TILE, 4, 4, 32).permute(0, 2, 3, 4, 1)
    heads = qq.hi.shape[1]
    acc = torch.zeros(r, heads, TILE, dtype=torch.float32, device=records.device)
    k_factor = k_scale_value.permute(0, 2, 1).unsqueeze(2).unsqueeze(2)
    terms = []
    for part, e8m0 in ((qq.hi[rows], qq.hi_e8m0[rows]), (qq.lo[rows], qq.lo_e8m0[rows])):
        q_view = part.reshape(r, heads, 4, 4, 32).permute(0, 2, 3, 1, 4)
        dots = torch.matmul(q_view, k_view)
        q_factor = _e8m0_factor(e8m0).permute(0, 2, 1).unsqueeze(2).unsqueeze(-1)
        terms.append((dots * q_factor * k_factor).sum(dim=1))
    hi_terms, lo_terms = terms
    for j in range(4):
        acc = f32(acc.to(torch.float64) + hi_terms[:, j])
        acc = f32(acc.to(torch.float64) + lo_terms[:, j])
    if not rope:
        return acc
    rope_dots = torch.matmul(
        qq.rope[rows].reshape(r, heads, 2, 32).permute(0, 2, 1, 3),
        k_rope.reshape(r, TILE, 2, 32).permute(0, 2, 3, 1),
    )
    for i in range(2):
        acc = f32(acc.to(torch.float64) + rope_dots[:, i])
    return acc


def qk_scores_scale_mantissa(qq: QuantizedQ, rows: torch.Tensor, records: torch.Tensor) -> torch.Tensor:
    """qk_scores dequantising K with the full f32 scale (mantissa kept) instead of its exponent."""
    return _qk_scores(qq, rows, records, k_scale="value")


def qk_scores_rope_ignored(qq: QuantizedQ, rows: torch.Tensor, records: torch.Tensor) -> torch.Tensor:
    """qk_scores without the two rope MFMAs: scores are q_latent . K_latent only."""
    return _qk_scores(qq, rows, records, rope=False)


def _online_softmax(
    state: SoftmaxState,
    scores: torch.Tensor,
    masked: torch.Tensor,
    c_log2: torch.Tensor,
    *,
    rescale_l: bool = True,
    log2e: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """kernel.emulated.gfx950.online_softmax with one knob per bug (the defaults reproduce it exactly).

    rescale_l: l = l * alpha + psum (else l + psum); log2e: the exp2 argument is s * c_log2 (else
    s * softmax_scale, the natural-log factor log2(e) forgotten)."""
    c = c_log2 if log2e else f32(c_log2.to(torch.float64) / math.log2(math.e))
    x = scores * c
    x = torch.where(masked.unsqueeze(1), torch.tensor(MASKED_SCORE, dtype=torch.float32, device=x.device), x)
    tile_max = torch.where(torch.isnan(x), float("-inf"), x).amax(dim=-1)
    m_new = torch.maximum(state.m, tile_max)
    alpha = exp2_f32(state.m - m_new)
    m_clamped = torch.clamp_min(m_new - P_SHIFT, M_FLOOR)
    p = exp2_f32(x - m_clamped.unsqueeze(-1))
    r, heads, _ = p.shape
    lanes = p.reshape(r, heads, 4, 2, 4, 4).permute(0, 1, 2, 4, 3, 5).reshape(r, heads, 4, 4, 8)
    psum = torch.zeros(r, heads, 4, 4, dtype=torch.float32, device=p.device)
    for k in range(8):
        psum = psum + lanes[..., k]
    if rescale_l:
        state.l_parts = state.l_parts * alpha.view(r, heads, 1, 1) + psum
    else:
        state.l_parts = state.l_parts + psum
    state.m = m_new
    return p, alpha


def online_softmax_l_not_rescaled(
    state: SoftmaxState, scores: torch.Tensor, masked: torch.Tensor, c_log2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """online_softmax with l = l + psum: l is not rescaled by alpha when the running max grows."""
    return _online_softmax(state, scores, masked, c_log2, rescale_l=False)


def online_softmax_without_log2e(
    state: SoftmaxState, scores: torch.Tensor, masked: torch.Tensor, c_log2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """online_softmax taking exp2 of softmax_scale * s (the log2(e) factor forgotten)."""
    return _online_softmax(state, scores, masked, c_log2, log2e=False)


def scale_p_uncapped(p: torch.Tensor, records: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """scale_p without the 2^7 cap on scale_v: P * scale_v overflows f16 to inf for scales > 2^7."""
    bits = records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.int32)
    clamped = bits.clamp_min(1)  # BUG: no upper clamp at bits(2^7)
    clamped = torch.where(masked.unsqueeze(-1), torch.zeros_like(clamped), clamped)
    scale_v = clamped.view(torch.float32)
    return (p.unsqueeze(-1) * scale_v.unsqueeze(1)).to(torch.float16)


def scale_p_bf16(p: torch.Tensor, records: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """scale_p rounding P' to bf16 (8 significant bits) instead of f16 (11) before the PV MFMA."""
    bits = records[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.int32)
    clamped = bits.clamp(1, SCALE_CAP_BITS)
    clamped = torch.where(masked.unsqueeze(-1), torch.zeros_like(clamped), clamped)
    scale_v = clamped.view(torch.float32)
    return (p.unsqueeze(-1) * scale_v.unsqueeze(1)).to(torch.bfloat16)  # BUG: bf16, not f16


def _pv_accumulate(
    o: torch.Tensor,
    alpha: torch.Tensor,
    p_scaled: torch.Tensor,
    records: torch.Tensor,
    masked: torch.Tensor,
    *,
    zero_masked_v: bool = True,
    rescale_o: bool = True,
) -> torch.Tensor:
    """kernel.emulated.gfx950.pv_accumulate with one knob per bug (the defaults reproduce it exactly).

    zero_masked_v: V codes of masked keys zeroed (else the row they fall back to, row 0, is used
    as is: 0 * NaN = NaN); rescale_o: o = o * alpha before the tile's MFMAs."""
    r, heads, _, _ = p_scaled.shape
    codes = records[..., :SCALE_OFFSET]
    if zero_masked_v:
        codes = torch.where(masked.unsqueeze(-1), torch.zeros_like(codes), codes)
    v = e4m3_table(records.device, torch.float64)[codes.to(torch.int64)]
    v_groups = v.reshape(r, 2, 2, 2, 2, 2, 4, 4, 128).permute(0, 1, 5, 7, 2, 3, 4, 6, 8).reshape(r, 4, 4, 32, 128)
    p_groups = (
        p_scaled.to(torch.float64).reshape(r, heads, 2, 2, 2, 2, 2, 4, 4).permute(0, 1, 2, 6, 8, 3, 4, 5, 7).reshape(r, heads, 4, 4, 32)
    )
    terms = torch.matmul(p_groups.permute(0, 2, 3, 1, 4), v_groups)
    terms = terms.permute(0, 1, 3, 2, 4).reshape(r, 4, heads, LATENT_DIM)
    if rescale_o:
        o = o * alpha.unsqueeze(-1)
    for kk in range(4):
        o = f32(o.to(torch.float64) + terms[:, kk])
    return o


def pv_accumulate_masked_v_not_zeroed(
    o: torch.Tensor, alpha: torch.Tensor, p_scaled: torch.Tensor, records: torch.Tensor, masked: torch.Tensor
) -> torch.Tensor:
    """pv_accumulate as the seed does it: a masked key's P' is 0 but its V (row 0) is not zeroed."""
    return _pv_accumulate(o, alpha, p_scaled, records, masked, zero_masked_v=False)


def pv_accumulate_o_not_rescaled(
    o: torch.Tensor, alpha: torch.Tensor, p_scaled: torch.Tensor, records: torch.Tensor, masked: torch.Tensor
) -> torch.Tensor:
    """pv_accumulate without o = o * alpha: earlier tiles keep their weight when the max grows."""
    return _pv_accumulate(o, alpha, p_scaled, records, masked, rescale_o=False)


def _finalize(
    state: SoftmaxState,
    *,
    guard_empty_out: bool = True,
    empty_lse: float = float("-inf"),
    natural_log: bool = True,
    shift: float = P_SHIFT,
) -> tuple[torch.Tensor, torch.Tensor]:
    """kernel.emulated.gfx950.finalize with one knob per bug (the defaults reproduce it exactly).

    guard_empty_out: 1 / l replaced by 0 where l == 0 (else 0 * inf = NaN); empty_lse: lse of a
    row with l == 0; natural_log: lse * ln 2 (else lse in log2 units); shift: the +8 of P undone."""
    parts = state.l_parts
    per_wave = (parts[..., 0] + parts[..., 1]) + (parts[..., 2] + parts[..., 3])
    l_tot = ((per_wave[..., 0] + per_wave[..., 1]) + per_wave[..., 2]) + per_wave[..., 3]
    has_l = l_tot > 0
    if guard_empty_out:
        inv_l = torch.where(has_l, 1.0 / torch.where(has_l, l_tot, 1.0), 0.0)
    else:
        inv_l = 1.0 / l_tot
    out = (state.o * inv_l.unsqueeze(-1)).to(torch.bfloat16)
    lse2 = (state.m + log2_f32(torch.where(has_l, l_tot, 1.0))) - shift
    lse = lse2 * LN2_F32 if natural_log else lse2
    return out, torch.where(has_l, lse, empty_lse)


def finalize_empty_row_nan_out(state: SoftmaxState) -> tuple[torch.Tensor, torch.Tensor]:
    """finalize with out = o * (1 / l) unguarded: an empty row gives 0 * inf = NaN."""
    return _finalize(state, guard_empty_out=False)


def finalize_empty_row_lse_zero(state: SoftmaxState) -> tuple[torch.Tensor, torch.Tensor]:
    """finalize writing lse = 0 for an empty row (a zero-initialised lse left as is), not -inf."""
    return _finalize(state, empty_lse=0.0)


def finalize_lse_base2(state: SoftmaxState) -> tuple[torch.Tensor, torch.Tensor]:
    """finalize returning lse in log2 units (the final * ln 2 forgotten)."""
    return _finalize(state, natural_log=False)


def finalize_lse_shift_missing(state: SoftmaxState) -> tuple[torch.Tensor, torch.Tensor]:
    """finalize not undoing the +8 of P = exp2(x - m + 8): lse too large by 8 ln 2."""
    return _finalize(state, shift=0.0)


# ---------------------------------------------------------------------------------------------
# Wrapped kernels (bugs outside the stages).

Outputs = tuple[torch.Tensor, torch.Tensor | None]


@dataclass(frozen=True)
class Call:
    """One call's arguments as the contract names them (kernel.contract), for a wrapped mutant to
    read and rewrite before (or instead of) running the emulated kernel."""

    q: torch.Tensor
    kv_cache: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    softmax_scale: float
    has_invalid: bool
    return_lse: bool
    out: torch.Tensor | None

    def emulated(self, **changes: object) -> Outputs:
        """run_emulated on these arguments with `changes` (field=value) applied."""
        c = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        return run_emulated(
            c.q, c.kv_cache, c.indices, c.indptr, c.softmax_scale, has_invalid=c.has_invalid, return_lse=c.return_lse, out=c.out
        )


def contract_kernel(body: Callable[[Call], Outputs]) -> Callable[..., Outputs]:
    """A kernel with the contract's signature whose work is `body(Call(...))` (its name and
    docstring are the body's; its signature stays the contract's, for what reads it)."""

    def kernel(
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        indices: torch.Tensor,
        indptr: torch.Tensor,
        softmax_scale: float,
        *,
        has_invalid: bool = False,
        return_lse: bool = False,
        out: torch.Tensor | None = None,
    ) -> Outputs:
        return body(Call(q, kv_cache, indices, indptr, softmax_scale, has_invalid, return_lse, out))

    kernel.__name__, kernel.__qualname__, kernel.__doc__ = body.__name__, body.__qualname__, body.__doc__
    return kernel


def _out_row_stride_ignored(c: Call) -> Outputs:
    """The emulated kernel storing a preallocated out at row * H * stride_oh + h * stride_oh
    (the row stride ignored: rows assumed packed)."""
    result, lse = c.emulated(out=None)
    if c.out is None:
        return result, lse
    heads = c.out.shape[1]
    wrong = c.out.as_strided(c.out.shape, (heads * c.out.stride(1), c.out.stride(1), 1), c.out.storage_offset())  # BUG
    wrong.copy_(result)
    return c.out, lse


# ---------------------------------------------------------------------------------------------
# The catalogue.


CATALOGUE: dict[str, Mutant] = {}


def _register(name: str, backend: Backend, description: str, bug_class: BugClass, needs: str) -> Backend:
    if name in CATALOGUE:
        raise ValueError(f"duplicate mutant {name!r}")
    if bug_class not in BUG_CLASSES:
        raise ValueError(f"unknown bug class {bug_class!r}")
    CATALOGUE[name] = Mutant(name=name, backend=backend, description=description, bug_class=bug_class, needs=needs)
    return backend


def _stage_mutant(name: str, description: str, bug_class: BugClass, needs: str, **stages: object) -> Backend:
    """A mutant replacing stages of the emulated kernel (kernel.emulated.gfx950.with_stage)."""
    return _register(name, emulated.with_stage(f"{MODULE}:{name}", **stages), description, bug_class, needs)  # type: ignore[arg-type]


def _wrapped_mutant(name: str, description: str, bug_class: BugClass, needs: str, body: Callable[[Call], Outputs]) -> Backend:
    """A mutant wrapping the emulated kernel (same declared limits and profile): its kernel is
    `contract_kernel(body)`."""
    backend = dataclasses.replace(emulated.emulated_backend(name=f"{MODULE}:{name}"), fn=contract_kernel(body))
    return _register(name, backend, description, bug_class, needs)


# Addressing ---------------------------------------------------------------------------------
offset32 = _stage_mutant(
    "offset32",
    "record byte offset slot * 656 computed in 32 bits: wraps past 4 GiB and reads the wrong bytes",
    "addressing",
    "a referenced KV row whose record starts beyond 4 GiB",
    gather_records=gather_records_offset32,
)
row_begin_off_by_one = _stage_mutant(
    "row_begin_off_by_one",
    "row q reads its CSR slice from indptr[q + 1] (the neighbour's slice), length unchanged",
    "addressing",
    "two rows whose CSR slices hold different keys",
    load_row_ranges=load_row_ranges_begin_off_by_one,
)

# Masking ------------------------------------------------------------------------------------
invalid_unmasked = _stage_mutant(
    "invalid_unmasked",
    "with has_invalid, a -1 entry is not masked: it is read as a valid key from row 0 (address clamp)",
    "masking",
    "has_invalid with negative entries inside a row",
    load_slots=load_slots_invalid_unmasked,
)
tail_unmasked = _stage_mutant(
    "tail_unmasked",
    "positions >= len in the last tile are not masked: the next row's index entries are read as keys",
    "masking",
    "a row whose length is not a multiple of 128",
    load_slots=load_slots_tail_unmasked,
)
last_valid_off_by_one = _stage_mutant(
    "last_valid_off_by_one",
    "the has_invalid scan stores the last valid position, not one past it: a key at 128 t is dropped",
    "masking",
    "has_invalid and a row whose last valid key sits at a position that is a multiple of 128",
    tile_count=tile_count_last_valid_off_by_one,
)
masked_v_not_zeroed = _stage_mutant(
    "masked_v_not_zeroed",
    "masked positions fall back to row 0 and its V is not zeroed: NaN codes there give 0 * NaN = NaN",
    "masking",
    "a masked position (tail or -1) while row 0 holds NaN codes",
    pv_accumulate=pv_accumulate_masked_v_not_zeroed,
)

# Tiling -------------------------------------------------------------------------------------
tile_stride_off_by_one = _stage_mutant(
    "tile_stride_off_by_one",
    "tile t starts at position 129 t instead of 128 t: the key at each tile boundary is skipped",
    "tiling",
    "a row longer than 128",
    load_slots=load_slots_tile_stride_off_by_one,
)

# Layout -------------------------------------------------------------------------------------
head_stride_ignored = _stage_mutant(
    "head_stride_ignored",
    "q head h read at row * stride_q + h * 576: a padded head stride is ignored",
    "layout",
    "q with H > 1 and a head stride other than 576",
    read_q=read_q_head_stride_ignored,
)
out_row_stride_ignored = _wrapped_mutant(
    "out_row_stride_ignored",
    "a preallocated out is stored at row * H * stride_oh: a padded row stride is ignored",
    "layout",
    "out= given with a row stride other than H * head stride",
    _out_row_stride_ignored,
)

# Q quantisation -----------------------------------------------------------------------------
q_lo_dropped = _stage_mutant(
    "q_lo_dropped",
    "Q enters QK as its fp8 hi part only (the lo residual is dropped)",
    "quantization",
    "q values that need more than hi's 4 significant bits",
    quantize_q=quantize_q_hi_only,
)
q_lo_e8m0_wraps = _stage_mutant(
    "q_lo_e8m0_wraps",
    "Q's E8M0 floor is 1 (not 5), so the lo part's byte s - 5 wraps to 2^125..NaN for tiny blocks",
    "quantization",
    "a q block with amax below about 2^-115",
    quantize_q=quantize_q_lo_e8m0_wraps,
)

# QK -----------------------------------------------------------------------------------------
qk_scale_mantissa = _stage_mutant(
    "qk_scale_mantissa",
    "QK dequantises K with the full f32 scale instead of its exponent (identical on pow2 scales)",
    "qk",
    "a non-pow2 scale (a violated precondition), judged against the documented mantissa drop",
    qk_scores=qk_scores_scale_mantissa,
)
rope_ignored = _stage_mutant(
    "rope_ignored",
    "the two rope MFMAs are skipped: scores are q_latent . K_latent",
    "qk",
    "non-zero q rope and K rope",
    qk_scores=qk_scores_rope_ignored,
)

# Softmax ------------------------------------------------------------------------------------
l_not_rescaled = _stage_mutant(
    "l_not_rescaled",
    "online softmax adds a tile's P to l without rescaling l by alpha when the running max grows",
    "softmax",
    "a row longer than 128 whose running max grows after the first tile",
    online_softmax=online_softmax_l_not_rescaled,
)
exp2_without_log2e = _stage_mutant(
    "exp2_without_log2e",
    "exp2 is applied to softmax_scale * s (the log2(e) factor forgotten): softmax too flat",
    "softmax",
    "keys with different scores",
    online_softmax=online_softmax_without_log2e,
)

# PV -----------------------------------------------------------------------------------------
scale_cap_missing = _stage_mutant(
    "scale_cap_missing",
    "scale_v is not capped at 2^7: P' = fp16(P * scale) overflows to inf for scale > 2^7",
    "pv",
    "a KV scale above 2^7 (a violated precondition, documented as clamped)",
    scale_p=scale_p_uncapped,
)
p_bf16 = _stage_mutant(
    "p_bf16",
    "P' is rounded to bf16 instead of f16 before the PV MFMA (3 significant bits lost)",
    "pv",
    "a P' not representable in bf16 whose rounding does not cancel in the output",
    scale_p=scale_p_bf16,
)
o_not_rescaled = _stage_mutant(
    "o_not_rescaled",
    "o is not rescaled by alpha before a tile's PV MFMAs when the running max grows",
    "pv",
    "a row longer than 128 whose running max grows after the first tile",
    pv_accumulate=pv_accumulate_o_not_rescaled,
)

# Finalize -----------------------------------------------------------------------------------
empty_row_nan_out = _stage_mutant(
    "empty_row_nan_out",
    "out = o * (1 / l) without the l == 0 guard: an empty row's out is NaN (0 * inf), not 0",
    "finalize",
    "a row with no valid key",
    finalize=finalize_empty_row_nan_out,
)
empty_row_lse_zero = _stage_mutant(
    "empty_row_lse_zero",
    "an empty row's lse is 0 instead of -inf",
    "finalize",
    "a row with no valid key and return_lse",
    finalize=finalize_empty_row_lse_zero,
)
lse_base2 = _stage_mutant(
    "lse_base2",
    "lse is returned in log2 units (the final * ln 2 forgotten)",
    "finalize",
    "return_lse and a non-empty row with lse != 0",
    finalize=finalize_lse_base2,
)
lse_shift_missing = _stage_mutant(
    "lse_shift_missing",
    "lse does not undo the +8 of P = exp2(x - m + 8): too large by 8 ln 2",
    "finalize",
    "return_lse and a non-empty row",
    finalize=finalize_lse_shift_missing,
)


# Freedoms of the contract (docs/reference/contract.md, the freedom table): each mutant below is caught
# only by the strategy that draws its freedom (tests/conformance/mutation/test_freedom_mutants.py).


def _paged_cache_as_rows(c: Call) -> Outputs:
    """The emulated kernel addressing record i at byte i * kv_cache.stride(0), as if the cache
    were [rows, 656]: on a paged [blocks, block_size, 656] cache, index i reads the first record
    of block i (wrapping at the end of the cache)."""
    flat = c.kv_cache.reshape(-1, RECORD_BYTES)
    step = c.kv_cache.stride(0) // RECORD_BYTES if c.kv_cache.dim() > 2 else 1
    if step > 1 and flat.shape[0]:
        flat = flat[(torch.arange(flat.shape[0], device=flat.device) * step) % flat.shape[0]]  # BUG
    return c.emulated(kv_cache=flat)


def _empty_cache_early_return(c: Call) -> Outputs:
    """The emulated kernel with an early return for a cache of 0 rows (valid when every row is
    empty) that skips the empty-row finalisation: out is left unwritten (NaN here; whatever the
    memory held on a device) and lse is 0 instead of -inf."""
    if c.kv_cache.numel() == 0 and c.q.shape[0]:
        n_q, heads = c.q.shape[0], c.q.shape[1]
        result = c.out if c.out is not None else torch.empty(n_q, heads, LATENT_DIM, dtype=torch.bfloat16, device=c.q.device)
        result.fill_(float("nan"))  # BUG: never written
        return result, (torch.zeros(n_q, heads, dtype=torch.float32, device=c.q.device) if c.return_lse else None)
    return c.emulated()


def _uniform_rows_from_stream_length(c: Call) -> Outputs:
    """The emulated kernel with a fixed-top-k fast path: when every row has the same length, it
    takes that length as (len(indices) - indptr[0]) // n_q, assuming the stream ends where the
    rows end (entries after the last consumed one are allowed and must not be read)."""
    indptr = c.indptr
    n_q = indptr.numel() - 1
    lengths = indptr[1:] - indptr[:-1]
    if n_q >= 1 and bool((lengths == lengths[0]).all()) and int(lengths[0]) >= 0:
        topk = (c.indices.numel() - int(indptr[0])) // n_q  # BUG: the stream may hold trailing entries
        indptr = (int(indptr[0]) + topk * torch.arange(n_q + 1, device=indptr.device)).to(torch.int32)
    return c.emulated(indptr=indptr)


def _scale_magnitude(c: Call) -> Outputs:
    """The emulated kernel taking |softmax_scale| (the scale kept as a magnitude, e.g. as
    log2(scale) in a constant buffer): a negative softmax_scale attends to the wrong keys."""
    return c.emulated(softmax_scale=abs(float(c.softmax_scale)))  # BUG: the contract's softmax_scale is any finite real


paged_cache_as_rows = _wrapped_mutant(
    "paged_cache_as_rows",
    "record i addressed at i * kv_cache.stride(0): a paged [blocks, block_size, 656] cache reads block i's first record",
    "addressing",
    "a cache with more than one leading dim (paged) and more than one row per block",
    _paged_cache_as_rows,
)
empty_cache_early_return = _wrapped_mutant(
    "empty_cache_early_return",
    "an early return for a cache of 0 rows leaves out unwritten and lse 0 (every row is empty: out 0, lse -inf)",
    "finalize",
    "a cache of 0 rows (every row empty)",
    _empty_cache_early_return,
)
uniform_rows_from_stream_length = _wrapped_mutant(
    "uniform_rows_from_stream_length",
    "rows of equal length take it as (len(indices) - indptr[0]) // n_q: trailing stream entries are read as keys",
    "addressing",
    "rows of one length and index entries after the last consumed one",
    _uniform_rows_from_stream_length,
)
scale_magnitude = _wrapped_mutant(
    "scale_magnitude",
    "softmax_scale is used as |softmax_scale|: a negative scale attends to the wrong keys",
    "softmax",
    "a negative softmax_scale and keys with different scores",
    _scale_magnitude,
)


# More freedoms of the freedom table: q and out layouts beyond padded
# row-major (strategies.layouts), garbage in unconsumed index entries, a one-row cache.


def read_q_extent_from_row_stride(q: torch.Tensor) -> torch.Tensor:
    """read_q through a bounded buffer of n_q * q.stride(0) elements from q's first element (the
    row pitch times the rows, as if rows were q's outermost dimension): reads past it return 0.
    Right for every row-major q, padded or not; a head-major q, or rows of stride 0, reads 0."""
    n_q, heads, width = q.shape
    extent = n_q * q.stride(0)  # BUG: q spans (n_q - 1) * stride(0) + (H - 1) * stride(1) + 576
    return _bounded_view(q, extent).to(torch.float32)


def _strided_offsets(t: torch.Tensor) -> torch.Tensor:
    """int64 [n, H, D]: the element offset of each element of a 3-D t from its first element."""
    n, heads, width = t.shape
    rows = torch.arange(n, device=t.device).view(n, 1, 1) * t.stride(0)
    return rows + torch.arange(heads, device=t.device).view(1, heads, 1) * t.stride(1) + torch.arange(width, device=t.device)


def _bounded_view(t: torch.Tensor, extent: int) -> torch.Tensor:
    """t's elements read through a buffer of `extent` elements from its first one (0 past it)."""
    offsets = _strided_offsets(t)
    if offsets.numel() == 0:
        return t.clone()
    flat = t.as_strided((int(offsets.max()) + 1,), (1,), t.storage_offset())
    inside = offsets < extent
    return torch.where(inside, flat[offsets.clamp_max(max(extent - 1, 0))], torch.zeros((), dtype=t.dtype, device=t.device))


def _out_extent_from_row_stride(c: Call) -> Outputs:
    """The emulated kernel storing a preallocated out through a bounded buffer of n_q *
    out.stride(0) elements (stores past it are dropped, as a buffer descriptor drops them): right
    for every row-major out; a head-major out keeps what it held in heads 1.. ."""
    result, lse = c.emulated(out=None)
    out = c.out
    if out is None:
        return result, lse
    offsets = _strided_offsets(out)
    inside = offsets < out.shape[0] * out.stride(0)  # BUG: out spans (n_q - 1) * stride(0) + (H - 1) * stride(1) + 512
    if offsets.numel():
        flat = out.as_strided((int(offsets.max()) + 1,), (1,), out.storage_offset())
        flat[offsets[inside]] = result[inside]
    return out, lse


def _stream_gathered_whole(c: Call) -> Outputs:
    """The emulated kernel with a batched prefetch: the records of every entry >= 0 of the whole
    index stream are gathered before the rows are split by indptr (a cache of 0 rows skips it).
    Right while every entry of the stream is a row; an unconsumed entry >= kv rows is read
    anyway (a fault on a device: IndexError here)."""
    flat = c.kv_cache.reshape(-1, RECORD_BYTES)
    if flat.shape[0] and c.indices.numel():
        ids = c.indices[c.indices >= 0].to(torch.int64)
        flat.index_select(0, ids)  # BUG: only consumed entries are promised to be rows
    return c.emulated()


def _one_row_cache_as_empty(c: Call) -> Outputs:
    """The emulated kernel with the empty-cache shortcut (every row empty: out 0, lse -inf)
    guarded by `last row id <= 0` instead of `rows == 0`: a one-row cache is taken as empty."""
    if c.kv_cache.numel() // RECORD_BYTES - 1 <= 0 and c.q.shape[0]:  # BUG: rows - 1 <= 0 is also true for one row
        n_q, heads = c.q.shape[0], c.q.shape[1]
        result = c.out if c.out is not None else torch.empty(n_q, heads, LATENT_DIM, dtype=torch.bfloat16, device=c.q.device)
        result.zero_()
        lse = torch.full((n_q, heads), float("-inf"), dtype=torch.float32, device=c.q.device) if c.return_lse else None
        return result, lse
    return c.emulated()


q_extent_from_row_stride = _stage_mutant(
    "q_extent_from_row_stride",
    "q read through a buffer of n_q * stride(0) elements: a head-major q, or rows of stride 0, read 0 past it",
    "layout",
    "q head-major (H > 1) or with a row stride 0",
    read_q=read_q_extent_from_row_stride,
)
out_extent_from_row_stride = _wrapped_mutant(
    "out_extent_from_row_stride",
    "a preallocated out stored through a buffer of n_q * stride(0) elements: a head-major out loses heads 1..",
    "layout",
    "out= head-major with H > 1",
    _out_extent_from_row_stride,
)
stream_gathered_whole = _wrapped_mutant(
    "stream_gathered_whole",
    "the records of every entry >= 0 of the whole index stream are prefetched: an unconsumed entry >= kv rows is read",
    "addressing",
    "an index entry no row consumes holding a value >= kv rows",
    _stream_gathered_whole,
)
one_row_cache_as_empty = _wrapped_mutant(
    "one_row_cache_as_empty",
    "the empty-cache shortcut tests rows - 1 <= 0: a one-row cache returns out 0 and lse -inf",
    "finalize",
    "a cache of one row and a row with keys",
    _one_row_cache_as_empty,
)


def get_mutant(name: str) -> Mutant:
    """The mutant called `name`; KeyError naming the known ones otherwise."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown mutant {name!r}; known: {', '.join(CATALOGUE)}") from None


# ---------------------------------------------------------------------------------------------
# Kernels written independently of the emulator: precision defects, which must be
# killed like the mutants above, and correct variants of other numerics, which must pass the
# suite under the profile each declares. Kept out of CATALOGUE (whose entries are emulator stage
# mutants with kill / spare cases in tests/conformance/mutation/test_mutants.py); a mutation-score run takes
# PRECISION_DEFECTS as mutants and CORRECT_VARIANTS as further baselines.


@dataclass(frozen=True)
class CorrectVariant:
    """A correct kernel of some declared numerics: it must pass the whole suite.

    name: module attribute and key; backend: its Backend (profile: the shipped profile that
    describes it); description: one line; nightly: so slow on CPU that it runs in the nightly
    Hypothesis profile on a GPU host only (the sequential-accumulation model loops over products)."""

    name: str
    backend: Backend
    description: str
    nightly: bool = False

    @property
    def spec(self) -> str:
        return f"{MODULE}:{self.name}"


PRECISION_DEFECTS: dict[str, Mutant] = {}
for _name, (_switches, _bug_class, _description, _needs) in _precision.DEFECTS.items():
    globals()[_name] = _precision.BACKENDS[_name]
    PRECISION_DEFECTS[_name] = Mutant(
        name=_name, backend=_precision.BACKENDS[_name], description=_description, bug_class=_bug_class, needs=_needs
    )  # type: ignore[arg-type]

_VARIANT_TEXT = {
    "float64_torch": "float64 throughout, torch's own f64 -> bf16 cast (rounds twice); profile exact",
    "float32_torch": "plain torch float32: f32 matmuls, torch.softmax, torch.logsumexp; profile fp32",
    "gfx950_sequential_rtz": (
        "gfx950 algorithm, QK products accumulated one by one rounding toward zero, PV MFMAs toward zero; profile gfx950"
    ),
    "gfx950_sequential_l": "gfx950 algorithm with l summed key by key in one f32 accumulator; profile gfx950-l-sequential",
    "gfx950_reverse_tiles": "gfx950 algorithm visiting the tiles last to first; profile gfx950",
    "flashmla_like_split": "bf16 Q, f32 QK, 64-key tiles, bf16 P for PV, up to 3 KV splits merged by lse; profile bf16-q-bf16-p",
    "flashmla_ftz_split": (
        "FlashMLA decode's arithmetic: f32 flushed to zero everywhere, FFMA exp argument, a partition per 64-key block "
        "merged through log2 f32 lse; profile bf16-q-bf16-p"
    ),
}
CORRECT_VARIANTS: dict[str, CorrectVariant] = {}
for _name, _fn in _independent.KERNELS.items():
    _backend = _independent.as_backend(f"{MODULE}:{_name}", _fn, batch_invariant=_name not in _independent.BATCH_DEPENDENT)
    globals()[_name] = _backend
    CORRECT_VARIANTS[_name] = CorrectVariant(_name, _backend, _VARIANT_TEXT[_name], nightly=_name == "gfx950_sequential_rtz")
