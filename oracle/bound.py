"""A-priori per-element error bounds on |out - out_ref| and |lse - lse_ref| for a numerics profile.

The bound is computed from the inputs alone (q, records, indices, softmax_scale) and a profile,
never from a kernel's output. TOLERANCES.md derives every term; the names below follow it.

Two comparison modes:
- "float64": the reference is plain float64 on the stored bf16 Q; every step of the profile,
  the representation of Q included, is bounded.
- "exact-steps": the reference applies the profile's deterministic steps exactly (Q's hi + lo
  representation for gfx950; K is exact for pow2 scales in every profile), so the bound covers
  only the rounding steps that depend on the kernel's arithmetic. Much tighter.

Per row r, head h, with z_i the reference scores (natural units) of the valid keys:
    E_i   = score error (QK accumulation, Q representation in "float64" mode)
            + softmax-stage log-weight errors (score scaling, subtraction, exp, rescales)
    w     = 2 max_i E_i                                  (window of log-weight perturbations)
    d_soft(d) = tanh(w / 4) * (max_i v_id - min_i v_id)
    d_p(d)    = P rounding before PV, relative p_u and underflow floor
    d_acc(d)  = f32 accumulation of o and l, 1 / l, o * (1 / l)
    out_bound = d_pre + half_ulp_bf16(|out_ref| + d_pre),  d_pre = d_soft + d_p + d_acc
    lse_bound = max_i E_i + l accumulation + log and lse arithmetic.
An empty row has bound 0: out must be exactly 0 and lse exactly -inf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from kernel.fp8 import e4m3_table
from kernel.record import LATENT_DIM, SCALE_BLOCK
from oracle import q_representation as qrep
from oracle.profiles import NumericsProfile
from oracle.reference import chunk_softmax
from oracle.rows import DEFAULT_KEY_BUDGET, KeyChunk, PreconditionError, iter_chunks, row_bounds

Mode = Literal["float64", "exact-steps"]
MODES: tuple[Mode, ...] = ("float64", "exact-steps")
LN2 = math.log(2.0)


@dataclass(frozen=True)
class Evaluation:
    """Reference and bound for one call.

    out, out_bound: f64 [n_q, H, 512]; lse, lse_bound: f64 [n_q, H] (natural log);
    window: f64 [n_q, H] the log-weight window w (0 for empty rows); mode, profile: what produced it.
    """

    out: torch.Tensor
    lse: torch.Tensor
    out_bound: torch.Tensor
    lse_bound: torch.Tensor
    window: torch.Tensor
    mode: Mode
    profile: str


def gamma(k: torch.Tensor | float, u: float) -> torch.Tensor | float:
    """Higham's gamma_k = k u / (1 - k u) (k roundings of unit roundoff u); inf when k u >= 1."""
    if isinstance(k, torch.Tensor):
        ku = k.to(torch.float64) * u
        return torch.where(ku < 1, ku / (1 - ku), torch.full_like(ku, float("inf")))
    ku = k * u
    return ku / (1 - ku) if ku < 1 else float("inf")


def half_ulp_bf16(y: torch.Tensor) -> torch.Tensor:
    """Largest error of rounding any value of magnitude <= y (f64, >= 0) to bf16 (RNE)."""
    _, exponent = torch.frexp(y)
    normal = torch.pow(2.0, (exponent - 9).to(torch.float64))
    return torch.where(y >= 2.0**-126, normal, torch.full_like(y, 2.0**-134))


def _representation(q: torch.Tensor, profile: NumericsProfile) -> qrep.QRepresentation:
    if profile.q_representation == "fp8_hi_lo":
        return qrep.fp8_hi_lo(q)
    return qrep.exact(q)


def _q_representation_error(q: torch.Tensor, rep: qrep.QRepresentation, profile: NumericsProfile) -> torch.Tensor:
    """Per-element a-priori |q - q_hat| bound (f64 [n_q, H, 576]) for the "float64" mode.

    fp8_hi_lo: with x = q 2^(127 - s), an element with |x| >= 2^-7 is represented exactly (bf16's
    8 significant bits split into 4 + 4 that hi and lo both hold); a smaller one is off by at most
    half lo's subnormal spacing, 2^-10 / 32 in x units, i.e. 2^(s - 142) (TOLERANCES.md).
    """
    err = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    if profile.q_representation == "fp8_hi_lo":
        assert rep.e8m0 is not None
        unit = torch.pow(2.0, (rep.e8m0 - 127).to(torch.float64)).repeat_interleave(SCALE_BLOCK, dim=-1)
        x = q[..., :LATENT_DIM].to(torch.float64).abs() / unit
        err[..., :LATENT_DIM] = torch.where(x < 2.0**-7, unit * 2.0**-15, 0.0)
    return err


def _check_chunk_preconditions(chunk: KeyChunk, profile: NumericsProfile, scale_model: str) -> None:
    """Raise PreconditionError where the profile's bound is not promised for these keys."""
    valid = chunk.valid.unsqueeze(-1)
    scales = chunk.scales
    if scale_model == "gfx950":
        if bool((valid & ~torch.isfinite(scales)).any()):
            raise PreconditionError("a consumed record's scale is NaN or infinite")
    elif profile.needs_pow2_scales:
        bits = scales.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        exponent = (bits >> 23) & 0xFF
        pow2 = ((bits & 0x7FFFFF) == 0) & (exponent > 0) & (exponent < 0xFF) & ((bits >> 31) == 0)
        if bool((valid & ~pow2).any()):
            raise PreconditionError("a consumed record's scale is not a positive normal power of two")
    elif bool((valid & ~(torch.isfinite(scales) & (scales > 0))).any()):
        raise PreconditionError("a consumed record's scale is not positive and finite")
    if scale_model == "stored" and profile.scale_cap is not None and bool((valid & (scales > profile.scale_cap)).any()):
        raise PreconditionError(f"a consumed record's scale exceeds {profile.scale_cap:g}")
    if bool(((chunk.codes & 0x7F) == 0x7F).any()):
        raise PreconditionError("a consumed record holds NaN codes")


@dataclass(frozen=True)
class _ChunkStats:
    """Mode-independent quantities of one chunk (keys, value statistics, counts)."""

    rows: torch.Tensor
    valid: torch.Tensor  # [R, 1, L]
    keys_t: torch.Tensor  # [R, 576, L]
    keys_abs_t: torch.Tensor  # [R, 576, L]
    values: torch.Tensor  # [R, L, 512]
    values_abs: torch.Tensor
    v_range: torch.Tensor  # [R, 1, 512]
    abs_v_sum: torch.Tensor
    abs_v_max: torch.Tensor
    abs_code_sum: torch.Tensor | None
    n_valid: torch.Tensor  # [R, 1, 1]
    n_tiles: torch.Tensor  # [R, 1, 1]


def _chunk_stats(chunk: KeyChunk, lengths: torch.Tensor, profile: NumericsProfile, code_table: torch.Tensor) -> _ChunkStats:
    keys = torch.cat((chunk.k_latent, chunk.rope), dim=-1)
    values = chunk.latent
    values_abs = values.abs()
    v_mask = chunk.valid.unsqueeze(-1)
    row_len = lengths[chunk.rows].to(torch.float64).view(-1, 1, 1)
    tile = profile.softmax_tile
    return _ChunkStats(
        rows=chunk.rows,
        valid=chunk.valid.unsqueeze(1),
        keys_t=keys.transpose(1, 2),
        keys_abs_t=keys.abs().transpose(1, 2),
        values=values,
        values_abs=values_abs,
        v_range=(values.masked_fill(~v_mask, float("-inf")).amax(dim=1) - values.masked_fill(~v_mask, float("inf")).amin(dim=1)).unsqueeze(1),
        abs_v_sum=values_abs.sum(dim=1).unsqueeze(1),
        abs_v_max=values_abs.amax(dim=1).unsqueeze(1),
        abs_code_sum=code_table[chunk.codes.to(torch.int64)].sum(dim=1).unsqueeze(1) if profile.p_format == "fp16_scaled" else None,
        n_valid=chunk.valid.sum(dim=1).to(torch.float64).view(-1, 1, 1),
        n_tiles=torch.ceil(row_len / tile) if tile else torch.ones_like(row_len),
    )


def _chunk_bound(
    stats: _ChunkStats, q_ref: torch.Tensor, q_err_weight: torch.Tensor, sigma: float, profile: NumericsProfile
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out_ref, out_bound, lse_ref, lse_bound, window) of one chunk for one comparison mode."""
    rows, valid = stats.rows, stats.valid
    z = torch.bmm(q_ref[rows], stats.keys_t) * sigma
    z = z.masked_fill(~valid, float("-inf"))
    score_err = torch.bmm(q_err_weight[rows], stats.keys_abs_t) * abs(sigma)
    z_fin = z.masked_fill(~valid, 0.0)
    z_abs_max = z_fin.abs().amax(dim=-1, keepdim=True)
    if float(z_abs_max.max()) > profile.score_limit:
        raise PreconditionError(f"|softmax_scale * q . K| exceeds the profile's limit {profile.score_limit:g}")
    z_max = z.amax(dim=-1, keepdim=True)
    z_min = z.masked_fill(~valid, float("inf")).amin(dim=-1, keepdim=True)

    # Softmax-stage log-weight errors (natural units), per key.
    n_valid, n_tiles = stats.n_valid, stats.n_tiles
    u = profile.arith_u
    shift_ln = profile.p_shift * LN2
    soft_err = (
        profile.score_roundings * u * z_fin.abs()
        + u * ((z_max - z_fin) + shift_ln)
        + (u * (z_abs_max + shift_ln) if profile.p_shift else 0.0)
        + profile.exp_rel_err
        + (n_tiles - 1) * (profile.exp_rel_err + u * (z_max - z_min))
    )
    key_err = ((score_err + soft_err) * (1 + 2.0**-16)).masked_fill(~valid, 0.0)
    e_max = key_err.amax(dim=-1)  # [R, H]

    probs, row_lse = chunk_softmax(z)
    ref_out = torch.bmm(probs, stats.values)
    p_abs_v = torch.bmm(probs, stats.values_abs)
    # Reweighting by factors within e^(+-E_i): |o' - o| <= e^Emax sum_i p_i (e^E_i - 1) |v_i - o|.
    tilt = probs * torch.expm1(key_err)
    tilt_abs_v = torch.bmm(tilt, stats.values_abs)
    tilt_mass = tilt.sum(dim=-1)
    v_range, abs_v_sum, abs_v_max = stats.v_range, stats.abs_v_sum, stats.abs_v_max

    if profile.softmax_tile:
        n_o = n_tiles * profile.pv_roundings_per_tile
        n_l = n_tiles * profile.l_roundings_per_tile + profile.l_final_roundings
    else:
        n_o = n_valid + 1
        n_l = n_valid + 1
    gamma_o = gamma(n_o, profile.pv_acc_u).view(-1, 1, 1)
    gamma_l = gamma(n_l, profile.l_acc_u).view(-1, 1, 1)
    p_max = 2.0**profile.p_shift
    exp_floor_out = n_valid.view(-1, 1, 1) * profile.exp_floor / p_max
    window_plain = 2 * e_max

    def out_bound_for(key_window: torch.Tensor, p_in_l: bool) -> torch.Tensor:
        growth = torch.exp(key_window).unsqueeze(-1)
        w4 = (key_window / 4).unsqueeze(-1)
        extra = (key_window - window_plain).unsqueeze(-1) / 2  # extra per-key error (P rounding in l)
        first_order = torch.exp(e_max.unsqueeze(-1) + extra) * (
            tilt_abs_v + tilt_mass.unsqueeze(-1) * ref_out.abs() + torch.expm1(extra) * (p_abs_v + ref_out.abs())
        )
        d_soft = torch.minimum(torch.tanh(w4) * v_range, first_order)
        # sum_i p'_i |v_id| over the kernel's weights p' <= p e^w, and never above max_i |v_id|
        weighted = torch.minimum(growth * p_abs_v, abs_v_max)
        d_p = torch.zeros_like(p_abs_v)
        if profile.p_format == "fp16_scaled":
            assert stats.abs_code_sum is not None
            # P * scale_v is itself rounded to f32 when scale_v is not a power of two.
            d_p = (profile.p_u + u) * weighted + profile.p_floor * growth * stats.abs_code_sum / p_max
        elif profile.p_format == "bf16":
            floor = profile.p_floor * growth * abs_v_sum / p_max
            d_p = floor if p_in_l else profile.p_u * weighted + floor
        magnitude = weighted * (1 + profile.p_u) + d_p
        d_acc = (gamma_o + 1.01 * gamma_l + 2 * u) * magnitude + exp_floor_out * abs_v_max
        d_pre = d_soft + d_p + d_acc
        return d_pre + half_ulp_bf16(ref_out.abs() + d_pre)

    if profile.p_format == "exact" or profile.p_rounded_in_l == "no":
        bound = out_bound_for(window_plain, p_in_l=False)
        lse_p = torch.zeros_like(e_max)
    elif profile.p_rounded_in_l == "yes":
        bound = out_bound_for(window_plain + 2 * profile.p_u, p_in_l=True)
        lse_p = torch.full_like(e_max, profile.p_u)
    else:
        bound = torch.maximum(
            out_bound_for(window_plain, p_in_l=False),
            out_bound_for(window_plain + 2 * profile.p_u, p_in_l=True),
        )
        lse_p = torch.full_like(e_max, profile.p_u)

    n_keys = n_valid.view(-1, 1)
    lse_arith = profile.lse_extra_u * (row_lse.abs() + e_max + LN2 * (profile.p_shift + torch.log2(n_keys) + 2))
    lse_b = tilt_mass + lse_p + 1.01 * gamma(n_l.view(-1, 1), profile.l_acc_u) + n_keys * profile.exp_floor / p_max + lse_arith
    return ref_out, bound, row_lse, lse_b, window_plain


def evaluate_modes(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    profile: NumericsProfile,
    modes: tuple[Mode, ...] = MODES,
    has_invalid: bool = False,
    key_budget: int = DEFAULT_KEY_BUDGET,
    scale_model: str = "stored",
) -> dict[Mode, Evaluation]:
    """Reference and the profile's a-priori bound in each of `modes`, sharing one gathering pass.

    PreconditionError where no bound is promised (index or position out of range, non-pow2 /
    over-cap / non-positive scales where the profile needs them, NaN codes, q not finite, scores
    beyond the profile's limit). `scale_model` "gfx950" judges against the gfx950 kernel's
    documented handling of non-pow2, over-cap and zero scales instead (oracle.rows.gather_chunk),
    so those are no longer preconditions."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown comparison mode {mode!r}; expected one of {MODES}")
    if not bool(torch.isfinite(q).all()):
        raise PreconditionError("q holds non-finite values")
    n_q, heads, _ = q.shape
    device = q.device
    rep = _representation(q, profile)
    # Per-element weight of |K| in the score error: accumulation over every product of the dot
    # (hi and lo are separate products) plus, in "float64" mode, the representation error of Q.
    accumulation = float(gamma(profile.qk_roundings, profile.qk_acc_u)) * rep.magnitude
    per_mode = {
        mode: (
            rep.q_hat if mode == "exact-steps" else q.to(torch.float64),
            accumulation if mode == "exact-steps" else accumulation + _q_representation_error(q, rep, profile),
        )
        for mode in modes
    }
    sigma = float(softmax_scale)
    results = {}
    for mode in modes:
        results[mode] = (
            torch.zeros(n_q, heads, LATENT_DIM, dtype=torch.float64, device=device),
            torch.zeros(n_q, heads, LATENT_DIM, dtype=torch.float64, device=device),
            torch.full((n_q, heads), float("-inf"), dtype=torch.float64, device=device),
            torch.zeros(n_q, heads, dtype=torch.float64, device=device),
            torch.zeros(n_q, heads, dtype=torch.float64, device=device),
        )
    _, lengths = row_bounds(indptr)
    code_table = e4m3_table(device, torch.float64).abs()

    for chunk in iter_chunks(indices, indptr, kv_cache, has_invalid=has_invalid, key_budget=key_budget, scale_model=scale_model):
        has_key = chunk.valid.any(dim=1)
        if not bool(has_key.any()):
            continue
        chunk = KeyChunk(*(getattr(chunk, f)[has_key] for f in KeyChunk.__dataclass_fields__))
        _check_chunk_preconditions(chunk, profile, scale_model)
        stats = _chunk_stats(chunk, lengths, profile, code_table)
        for mode, (q_ref, q_err_weight) in per_mode.items():
            for target, value in zip(results[mode], _chunk_bound(stats, q_ref, q_err_weight, sigma, profile), strict=True):
                target[chunk.rows] = value
    return {
        mode: Evaluation(out=r[0], out_bound=r[1], lse=r[2], lse_bound=r[3], window=r[4], mode=mode, profile=profile.name)
        for mode, r in results.items()
    }


def evaluate(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    indptr: torch.Tensor,
    softmax_scale: float,
    *,
    profile: NumericsProfile,
    mode: Mode = "exact-steps",
    has_invalid: bool = False,
    key_budget: int = DEFAULT_KEY_BUDGET,
    scale_model: str = "stored",
) -> Evaluation:
    """Reference (in `mode`) and the profile's a-priori bound (see `evaluate_modes`)."""
    return evaluate_modes(
        q, kv_cache, indices, indptr, softmax_scale,
        profile=profile, modes=(mode,), has_invalid=has_invalid, key_budget=key_budget, scale_model=scale_model,
    )[mode]
