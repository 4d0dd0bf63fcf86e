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

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch

from kernel.bits import same_bits
from kernel.fp8 import e4m3_table
from kernel.record import LATENT_DIM, N_SCALE_BLOCKS, RECORD_BYTES, SCALE_BLOCK
from oracle import q_representation as qrep
from oracle import rows as oracle_rows
from oracle.accumulation import FORMAT_MAX, f64_scalar, gamma, gammas, unit_roundoff
from oracle.binary import finite, pow2
from oracle.profile_schema import ANY16_P, TOWARD_ZERO_CAST, NumericsProfile
from oracle.rows import DEFAULT_KEY_BUDGET, BoundChunk, PreconditionError, row_bounds

Mode = Literal["float64", "exact-steps"]
MODES: tuple[Mode, ...] = ("float64", "exact-steps")
LN2 = math.log(2.0)
# Key slots per batch of chunks (evaluate_modes' batch_budget) per device type. A call holds about
# 19.5 KB per slot at its peak at 16 heads (CPU max RSS, n_q 32 x 2048 keys in one batch), so a
# CUDA batch of 2^20 slots holds ~20 GB; on a CPU one chunk per batch keeps the working set small.
BOUND_BATCH_SLOTS = {"cpu": DEFAULT_KEY_BUDGET, "cuda": 1 << 20}
U64 = 2.0**-53


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


def half_ulp_bf16(y: torch.Tensor) -> torch.Tensor:
    """Largest error of rounding any value of magnitude <= y (f64, >= 0) to bf16 (RNE)."""
    _, exponent = torch.frexp(y)
    normal = pow2(exponent - 9)
    return torch.where(y >= 2.0**-126, normal, torch.full_like(y, 2.0**-134))


def _representation(q: torch.Tensor, profile: NumericsProfile) -> qrep.QRepresentation:
    if profile.q_representation == "fp8_hi_lo":
        return qrep.fp8_hi_lo(q)
    return qrep.exact(q)


def _q_representation_error(q: torch.Tensor, rep: qrep.QRepresentation, profile: NumericsProfile) -> torch.Tensor:
    """Per-element a-priori |q - q_hat| bound (f64 [n_q, H, 576]) for the "float64" mode (q bf16,
    or widened to f64: the same result).

    fp8_hi_lo: with x = q 2^(127 - s), an element with |x| >= 2^-7 is represented exactly (bf16's
    8 significant bits split into 4 + 4 that hi and lo both hold); a smaller one is off by at most
    half lo's subnormal spacing, 2^-10 / 32 in x units, i.e. 2^(s - 142) (TOLERANCES.md).
    """
    err = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    if profile.q_representation == "fp8_hi_lo":
        assert rep.e8m0 is not None
        lead = q.shape[:-1]
        unit = qrep.pow2_from_field(rep.e8m0 + (1023 - 127)).unsqueeze(-1)  # 2^(s - 127) per 128-value block
        x = q[..., :LATENT_DIM].to(torch.float64).abs().reshape(*lead, N_SCALE_BLOCKS, SCALE_BLOCK) / unit
        block_err = torch.where(x < 2.0**-7, unit * 2.0**-15, f64_scalar(0.0, q.device))
        err[..., :LATENT_DIM] = block_err.reshape(*lead, LATENT_DIM)
    return err


def _check_scale(sigma: float, profile: NumericsProfile) -> None:
    """PreconditionError where softmax_scale (or c_log2 = softmax_scale * log2 e) is not finite in
    the profile's score format."""
    limit = FORMAT_MAX[profile.score_format]
    if not math.isfinite(sigma) or abs(sigma) * math.log2(math.e) * (1 + 2.0**-20) >= limit:
        raise PreconditionError(
            f"softmax_scale {sigma:g}: softmax_scale * log2(e) is not finite in {profile.score_format} (largest finite {limit:.3g})"
        )


def _precondition_flags(chunk: BoundChunk, profile: NumericsProfile, scale_model: str) -> tuple[torch.Tensor, list[str]]:
    """(flags bool [R, k], messages): row r breaks check i (the profile's preconditions on the
    consumed keys, in the order _check_chunk_preconditions names them). No host read."""
    valid = chunk.valid.unsqueeze(-1)
    scales = chunk.scales
    n_rows = chunk.valid.shape[0]
    checks: list[tuple[torch.Tensor, str]] = []
    if scale_model == "gfx950":
        checks.append((valid & ~torch.isfinite(scales), "a consumed record's scale is NaN or infinite"))
    elif profile.needs_pow2_scales:
        # a positive normal power of two has its sign and mantissa bits clear and an exponent field in [1, 254]
        bits = scales.contiguous().view(torch.int32)
        not_pow2 = ((bits & ~0x7F800000) != 0) | (bits < 0x00800000) | (bits >= 0x7F800000)
        checks.append((valid & not_pow2, "a consumed record's scale is not a positive normal power of two"))
    else:
        checks.append((valid & ~(torch.isfinite(scales) & (scales > 0)), "a consumed record's scale is not positive and finite"))
    if scale_model == "stored" and profile.scale_cap is not None:
        checks.append((valid & (scales > profile.scale_cap), f"a consumed record's scale exceeds {profile.scale_cap:g}"))
    checks.append((((chunk.codes & 0x7F) == 0x7F), "a consumed record holds NaN codes"))
    flags = torch.stack([flag.reshape(n_rows, -1).any(dim=1) for flag, _ in checks], dim=1)
    return flags, [message for _, message in checks]


def _check_chunk_preconditions(chunk: BoundChunk, profile: NumericsProfile, scale_model: str) -> None:
    """Raise PreconditionError where the profile's bound is not promised for these keys (the
    first broken one in the order below; every check read back in one host sync)."""
    flags, messages = _precondition_flags(chunk, profile, scale_model)
    broken = flags.any(dim=0).tolist()
    for is_broken, message in zip(broken, messages, strict=True):
        if is_broken:
            raise PreconditionError(message)


def _segment_max(values: torch.Tensor, chunk: BoundChunk) -> torch.Tensor:
    """Per chunk of a batch (BoundChunk.segment_rows rows each, or BoundChunk.segment): the
    column maxima of the per-row values f64 [R, k] (all >= 0 or NaN; a chunk without rows
    gets 0), f64 [n_segments, k]. No host read."""
    rows, k = values.shape
    if chunk.segment is not None:  # rows were dropped: each row's chunk is given
        out = values.new_zeros(chunk.n_segments, k)
        return out.scatter_reduce_(0, chunk.segment.unsqueeze(1).expand(rows, k), values, "amax", include_self=True)
    pad = chunk.n_segments * chunk.segment_rows - rows
    if pad:
        values = torch.cat((values, values.new_zeros(pad, k)))
    return values.view(chunk.n_segments, chunk.segment_rows, k).amax(dim=1)


@dataclass
class _Deferred:
    """The bound's checks of one call, read back once at its end (raise_first).

    Per chunk of each batch, in the order evaluate_modes visits them: the precondition flags,
    then qk_max, n_max, v_max (_check_f32_range), then each mode's max |z| (the score limit),
    stacked into one f64 row per chunk; the first broken check of the first chunk that breaks
    one is raised, as when each chunk read its checks back in turn."""

    profile: NumericsProfile
    messages: list[str] | None = None
    parts: list[torch.Tensor] | None = None

    def add(self, chunk: BoundChunk, columns: list[torch.Tensor], messages: list[str]) -> None:
        """Record one batch's per-row columns (each [R], or [R, k] for the flags)."""
        self.messages = messages
        per_row = torch.cat([c.to(torch.float64).reshape(c.shape[0], -1) for c in columns], dim=1)
        self.parts = [*(self.parts or []), _segment_max(per_row, chunk)]

    def raise_first(self) -> None:
        """Raise the first broken check (one host read for the whole call)."""
        if not self.parts or self.messages is None:
            return
        self.raise_first_of(torch.cat(self.parts).tolist())

    def raise_first_of(self, rows: list[list[float]]) -> None:
        """raise_first on the host values `rows` of the stacked parts (read by the caller, e.g.
        with other calls' parts in one host read)."""
        if self.messages is None:
            return
        profile = self.profile
        k = len(self.messages)
        gamma_qk = _qk_growth(profile)
        for row in rows:
            for is_broken, message in zip(row[:k], self.messages, strict=True):
                if is_broken:
                    raise PreconditionError(message)
            _raise_f32_range(row[k], row[k + 1], row[k + 2], profile, gamma_qk)
            if any(z > profile.score_limit for z in row[k + 3 :]):
                raise PreconditionError(f"|softmax_scale * q . K| exceeds the profile's limit {profile.score_limit:g}")


@dataclass(frozen=True)
class _ModeScores:
    """The scores and reference softmax over one chunk of M queries (one per comparison mode),
    stacked on a leading mode axis: entry m is what query m alone gives, bit for bit (each
    product is its own bmm; every other step is elementwise or a reduction over the last axis)."""

    z: torch.Tensor  # [M, R, H, L] sigma q_ref . K, -inf at masked slots
    z_max: torch.Tensor  # [M, R, H, 1]
    log_p: torch.Tensor  # [M, R, H, L] ln p_i, -inf at masked slots
    probs: torch.Tensor  # [M, R, H, L]
    row_lse: torch.Tensor  # [M, R, H]
    ref_out: torch.Tensor  # [M, R, H, 512] the reference's out, sum_i p_i v_i
    p_abs_v: torch.Tensor | None = None  # [M, R, H, 512] sum_i p_i |v_i|: set by _chunk_stats once |V| is formed


def _stacked_bmm(lefts: Sequence[torch.Tensor], right: torch.Tensor) -> torch.Tensor:
    """[M, B, n, p]: torch.bmm(lefts[m], right) for each m (lefts [B, n, k], right [B, k, p]),
    each product written in place into its slice of one buffer (M = 1: the product itself, a
    fresh contiguous tensor like the buffer's first slice)."""
    n = len(lefts)
    if n == 1:
        return torch.bmm(lefts[0], right).unsqueeze(0)
    first = lefts[0]
    out = torch.empty(n, first.shape[0], first.shape[1], right.shape[2], dtype=first.dtype, device=first.device)
    for m in range(n):
        torch.bmm(lefts[m], right, out=out[m])
    return out


def _mode_scores(
    q_refs: tuple[torch.Tensor, ...], chunk: BoundChunk, keys_t: torch.Tensor, sigma: float, invalid: torch.Tensor | None
) -> _ModeScores:
    """The stacked scores of the queries `q_refs` (at least one); `invalid`: ~chunk.valid as
    [R, 1, L], None when every slot holds a key."""
    z = _stacked_bmm([q_ref[chunk.rows] for q_ref in q_refs], keys_t).mul_(sigma)
    if invalid is not None:
        z.masked_fill_(invalid, float("-inf"))
    peak = z.amax(dim=-1, keepdim=True)
    shifted = z - peak
    log_total = torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    log_p = shifted - log_total
    probs = torch.exp(log_p)
    return _ModeScores(
        z=z, z_max=peak, log_p=log_p, probs=probs, row_lse=(peak + log_total).squeeze(-1), ref_out=_stacked_bmm(probs, chunk.values)
    )


@dataclass(frozen=True)
class _ChunkStats:
    """Mode-independent quantities of one chunk (keys, value statistics, counts, QK accumulation error)."""

    rows: torch.Tensor
    valid: torch.Tensor  # [R, 1, L]
    all_valid: bool  # every slot holds a key: the masks below are skipped (masked_fill with an all-false mask is the identity)
    scores: tuple[_ModeScores, ...]  # the scores and reference softmax of the q_refs given: one stacked entry per group of modes
    keys_abs_t: torch.Tensor  # [R, 576, L]
    values_abs: torch.Tensor  # [R, L, 512]
    v_range: torch.Tensor  # [R, 1, 512]
    abs_v_sum: torch.Tensor
    abs_v_max: torch.Tensor
    abs_code_sum: torch.Tensor | None
    n_valid: torch.Tensor  # [R, 1, 1]
    row_len: torch.Tensor  # [R, 1, 1] the row's length, masked entries included
    n_tiles: torch.Tensor  # [R, 1, 1]
    tile_keys: torch.Tensor  # [R, 1, 1] keys per tile (the row's valid keys for a one-pass softmax)
    qk_err: torch.Tensor  # [R, H, L] |sigma| gamma_k(u) sum_d |q_hat_d| |K_d|: the QK accumulation error (natural units)
    ref_qk_err: torch.Tensor  # [R, H, L] the float64 reference's own score error, |sigma| gamma_(m+1)(2^-53) sum_d |q_d| |K_d|
    qk_flush: torch.Tensor | None  # [R, H, L] |sigma| x the score error of flushed subnormals (None: subnormals preserved)
    terms: _RowTerms  # the bound's per-row terms that no mode changes
    invalid: torch.Tensor | None = None  # [R, 1, L] ~valid (None: every slot holds a key)
    splits: bool | None = None  # some row of the chunk may be split (known on the host; None: read from the device)


@dataclass(frozen=True)
class _RowTerms:
    """The terms of one chunk's bound that depend on its rows only, not on a mode's scores
    (_row_terms), formed once per chunk and shared by every group of modes. Each is the value
    _chunk_bound's formula names, with its operations in that formula's order."""

    rescale_err: torch.Tensor  # [R, 1, 1] rescales (exp_rel_err + u), rescales = n_tiles - 1
    rescale_u: torch.Tensor  # [R, 1, 1] (rescales > 0) u
    acc_factor: torch.Tensor  # [R, 1, 1] gamma_o + 1.01 gamma_l + 2 u + gamma_ref (the o, l and reference sums)
    floor_v: torch.Tensor  # [R, 1, 512] n exp_floor / p_max x max |v|: exp's underflow floor in out units
    p_floor: torch.Tensor | None  # [R, 1, 512] the P floor term of d_p for the profile's p_format (None: exact P)
    flush_base: torch.Tensor | None  # [R, 1, 1] 4 + l_floor (2 n + n_tiles) (None: subnormals preserved)
    flush_out: torch.Tensor | float  # [R, 1, 1] flush_floor (flush_base + 2) of an unsplit row (0.0: none)
    lse_l: torch.Tensor  # [R, 1] 1.01 gamma_l
    lse_floor: torch.Tensor  # [R, 1] n exp_floor / p_max
    lse_log_n: torch.Tensor  # [R, 1] ln 2 (p_shift + log2 n + 2)
    lse_ref: torch.Tensor  # [R, 1] gamma_(n + 2)(2^-53)


#: |e4m3 code value| * 2^9 is an integer below 2^18 (multiples of the subnormal spacing 2^-9, at
#: most 448): a sum over L keys in int32 is exact while L * 448 * 2^9 < 2^31
_INT32_CODE_SUM_KEYS = (2**31 - 1) // (448 * 512)


_ABS_CODE_TABLES: dict[torch.device, torch.Tensor] = {}


def _abs_code_table(device: torch.device) -> torch.Tensor:
    """int32 [256]: |value| * 2^9 of each e4m3 code (0 for the NaN codes, which are preconditions).
    Cached per device (read only)."""
    table = _ABS_CODE_TABLES.get(device)
    if table is None:
        table = _ABS_CODE_TABLES[device] = (e4m3_table(device, torch.float64).abs().nan_to_num(0.0) * 512.0).to(torch.int32)
    return table


def _chunk_stats(
    chunk: BoundChunk,
    lengths: torch.Tensor,
    profile: NumericsProfile,
    code_table: torch.Tensor,
    rep: qrep.QRepresentation,
    sigma: float,
    q_refs: tuple[torch.Tensor, ...],
    checks: list[torch.Tensor] | None = None,
    groups: tuple[tuple[int, ...], ...] | None = None,
) -> _ChunkStats:
    """The chunk's mode-independent statistics, and the scores of each query in `q_refs` (one per
    mode), stacked per group of `groups` (indices into q_refs; default: all in one group).
    `code_table` is _abs_code_table; rep.terms is expected as f32 (see evaluate_modes).

    Consumes chunk.keys and chunk.values: once the scores, each mode's reference out and V's
    range are formed they are overwritten with |K| and |V| in place (the same values and layouts
    as keys.abs() and values.abs(), without two more [R, L, 576 or 512] tensors; values that are
    a view of keys, oracle.rows.BoundChunk, come out of keys' abs).
    `checks` given: the per-row maxima of the f32-range check are appended to it (_Deferred)
    instead of being read back here."""
    keys = chunk.keys
    values = chunk.values
    row_len = lengths[chunk.rows].to(torch.float64).view(-1, 1, 1)
    n_valid = chunk.valid.sum(dim=1, dtype=torch.float64).view(-1, 1, 1)  # integer counts, exact
    n_tiles, tile_keys = _tile_counts(profile, n_valid, row_len)
    keys_t = keys.transpose(1, 2)
    invalid = None if chunk.all_valid else ~chunk.valid.unsqueeze(1)
    if groups is None:
        groups = (tuple(range(len(q_refs))),) if q_refs else ()
    # groups whose queries are the same tensors (share_equal_queries) share one _ModeScores
    made: dict[tuple[int, ...], _ModeScores] = {}
    for group in groups:
        refs = tuple(q_refs[m] for m in group)
        key = tuple(map(id, refs))
        if key not in made:
            made[key] = _mode_scores(refs, chunk, keys_t, sigma, invalid)
    v_range = _value_range(values, chunk)  # before keys' abs: values may be a view of keys
    nonzero_keys = (keys != 0).to(torch.float32).transpose(1, 2)
    keys_abs_t = keys.abs_().transpose(1, 2)
    # QK accumulation (TOLERANCES.md section 1): k = qk.roundings(m, I) + product roundings per key,
    # m = the number of nonzero products of that (row, head, key)'s dot (zero terms add exactly)
    qk_mag = torch.bmm(rep.magnitude[chunk.rows], keys_abs_t)  # [R, H, L] sum_d |q_hat_d| |K_d|
    assert rep.terms is not None
    # m is a sum of at most 576 terms in {0, 1, 2} x {0, 1}: an integer <= 1152, exact in f32 (and
    # in TF32 inputs) in every summation order, so the f32 product gives the f64 product's bits
    nonzero = torch.bmm(rep.terms[chunk.rows], nonzero_keys).to(torch.float64)
    k_qk = profile.qk.roundings(nonzero, float(profile.qk_instructions))
    if profile.qk.product_roundings:  # else adding 0 would leave k (never -0) as it is
        k_qk = k_qk + profile.qk.product_roundings * (nonzero > 0)
    qk_err = abs(sigma) * gamma(k_qk, profile.qk.u) * qk_mag
    qk_flush = None
    if profile.flush_floor:
        # flushed subnormals (TOLERANCES.md section 13): a q or K element read as 0 errs by < F times
        # its partner, each product and each partial sum of the dot by < F
        q_l1 = rep.magnitude[chunk.rows].sum(dim=-1, keepdim=True)  # [R, H, 1]
        k_l1 = keys_abs_t.sum(dim=1, keepdim=True)  # [R, 1, L]
        qk_flush = abs(sigma) * profile.flush_floor * (q_l1 + k_l1 + 2 * nonzero + 2)
    values_abs = values if _shares_memory(values, keys) else values.abs_()
    abs_code_sum = None
    if profile.p_format in ("fp16_scaled", ANY16_P):
        # sum_i |code_i|: every partial sum is a multiple of 2^-9 below 2^53 2^-9, so the f64 sum
        # is exact in any order; summing the integers |code| 2^9 gives the same value
        width = chunk.valid.shape[1]
        scaled = code_table.index_select(0, chunk.code_index).view(*values.shape)
        total = scaled.sum(dim=1, dtype=torch.int32 if width <= _INT32_CODE_SUM_KEYS else torch.int64)
        abs_code_sum = (total.to(torch.float64) * 2.0**-9).unsqueeze(1)
    # sum_i p_i |v_i| once per distinct scores (groups that share scores share it)
    made = {key: replace(entry, p_abs_v=_stacked_bmm(entry.probs, values_abs)) for key, entry in made.items()}
    abs_v_sum = values_abs.sum(dim=1).unsqueeze(1)
    abs_v_max = values_abs.amax(dim=1).unsqueeze(1)
    stats = _ChunkStats(
        rows=chunk.rows,
        valid=chunk.valid.unsqueeze(1),
        all_valid=chunk.all_valid,
        scores=tuple(made[tuple(id(q_refs[m]) for m in group)] for group in groups),
        keys_abs_t=keys_abs_t,
        values_abs=values_abs,
        v_range=v_range,
        abs_v_sum=abs_v_sum,
        abs_v_max=abs_v_max,
        abs_code_sum=abs_code_sum,
        n_valid=n_valid,
        row_len=row_len,
        n_tiles=n_tiles,
        tile_keys=tile_keys,
        qk_err=qk_err,
        ref_qk_err=abs(sigma) * gamma(nonzero + 1, U64) * qk_mag,
        qk_flush=qk_flush,
        terms=_row_terms(profile, n_valid, n_tiles, tile_keys, abs_v_sum, abs_v_max, abs_code_sum),
        invalid=invalid,
        splits=chunk.kind if isinstance(chunk.kind, bool) else None,
    )
    if checks is None:
        _check_f32_range(stats, qk_mag, profile)
    else:
        checks.extend(_f32_range_rows(stats, qk_mag))
    return stats


def _row_terms(
    profile: NumericsProfile,
    n_valid: torch.Tensor,
    n_tiles: torch.Tensor,
    tile_keys: torch.Tensor,
    abs_v_sum: torch.Tensor,
    abs_v_max: torch.Tensor,
    abs_code_sum: torch.Tensor | None,
) -> _RowTerms:
    """The bound's per-row terms (_RowTerms) of a chunk with these statistics ([R, 1, 1] counts,
    [R, 1, 512] |V| sums and maxima): the o and l accumulations' rounding counts (_o_l_roundings),
    the floors and the lse's constant terms (TOLERANCES.md sections 3 to 5 and 13)."""
    u = profile.arith_u
    rescales = n_tiles - 1
    k_o, k_l = _o_l_roundings(profile, n_tiles, tile_keys)
    # gamma of the o and l accumulations, of the reference's sums of exp and of p v and its
    # division (2 n + 4), and of its lse (n + 2), in one pass
    g = gammas((k_o, k_l, 2 * n_valid + 4, n_valid + 2), (profile.pv.u, profile.l.u, U64, U64))
    gamma_o, gamma_l, gamma_ref, gamma_lse = g[0], g[1], g[2], g[3]  # views (unpacking would unbind)
    p_max = 2.0**profile.p_shift
    exp_floor_out = n_valid.view(-1, 1, 1) * profile.exp_floor_effective / p_max
    # floors are absolute errors of P' in P units, divided by l >= p_max (1 - 2^-20): the largest
    # key's own P; no reweighting factor enters (TOLERANCES.md section 4)
    l_floor = (1 + 2.0**-16) / p_max
    p_floor = None
    if profile.p_format == "fp16_scaled":
        assert abs_code_sum is not None
        p_floor = profile.p_floor * l_floor * abs_code_sum
    elif profile.p_format == "bf16":
        p_floor = profile.p_floor * l_floor * abs_v_sum
    elif profile.p_format in ("f32", "f64"):
        p_floor = profile.p_floor * abs_v_sum
    elif profile.p_format == ANY16_P:
        assert abs_code_sum is not None
        p_floor = profile.p_floor * l_floor * (abs_v_sum + abs_code_sum)
    # flushed f32 results of the o side (TOLERANCES.md section 13), absolute in out units: each V
    # element (weights summing to ~1), each P v product and partial sum of o and each rescale
    # (divided by l >= p_max), the normalisation and the output cast, and per merged partial its
    # stored output and its weighted term (2 per partial; an unsplit row is one partial)
    flush_base = None
    flush_out: torch.Tensor | float = 0.0
    if profile.flush_floor:
        flush_base = 4 + l_floor * (2 * n_valid + n_tiles)
        flush_out = profile.flush_floor * (flush_base + 2.0)
    n_keys = n_valid.view(-1, 1)
    return _RowTerms(
        rescale_err=rescales * (profile.exp_rel_err + u),
        rescale_u=(rescales > 0) * u,
        acc_factor=gamma_o + 1.01 * gamma_l + 2 * u + gamma_ref,
        floor_v=exp_floor_out * abs_v_max,
        p_floor=p_floor,
        flush_base=flush_base,
        flush_out=flush_out,
        lse_l=1.01 * gamma_l.view(-1, 1),
        lse_floor=exp_floor_out.view(-1, 1),
        lse_log_n=LN2 * (profile.p_shift + torch.log2(n_keys) + 2),
        lse_ref=gamma_lse.view(-1, 1),
    )


def _value_range(values: torch.Tensor, chunk: BoundChunk) -> torch.Tensor:
    """[R, 1, 512]: max - min of V over each row's valid slots."""
    if chunk.all_valid:
        return (values.amax(dim=1) - values.amin(dim=1)).unsqueeze(1)
    # the valid slots' max and min: masked slots hold +0, which -inf (+inf) replaces by an
    # addition (x + -0.0 is x for every x, -0 and NaN included), the two passes sharing one buffer
    v_mask = chunk.valid.unsqueeze(-1)
    device = values.device
    minus_zero = f64_scalar(-0.0, device)
    buffer = torch.add(values, torch.where(v_mask, minus_zero, f64_scalar(float("-inf"), device)))
    v_max = buffer.amax(dim=1)
    torch.add(values, torch.where(v_mask, minus_zero, f64_scalar(float("inf"), device)), out=buffer)
    return (v_max - buffer.amin(dim=1)).unsqueeze(1)


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a is a view into b's storage."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


#: exp arguments above this are treated as overflowing (e^690 ~ 1e299 < f64 max)
_EXP_CAP = 690.0


def _log_expm1(x: torch.Tensor) -> torch.Tensor:
    """ln(e^x - 1) for x >= 0 (f64), -inf at 0, without overflow for large x."""
    big = x > 30
    return torch.where(big, x + torch.log1p(-torch.exp(-x.clamp_min(30))), torch.log(torch.expm1(x.clamp_max(30))))


def _exp_or_inf(x: torch.Tensor) -> torch.Tensor:
    """e^x (f64), with inf (not an overflowing intermediate) above _EXP_CAP."""
    return torch.where(x > _EXP_CAP, f64_scalar(float("inf"), x.device), torch.exp(x.clamp_max(_EXP_CAP)))


def _bf16_spacing(y: torch.Tensor) -> torch.Tensor:
    """f64 2^(max(e, -125) - 8) for f64 y with frexp exponent e (y = m 2^e, m in [0.5, 1)): the
    bf16 spacing at |y|. e is read from the bits: the exponent field minus 1022 for every normal
    y; a subnormal y (e <= -1022 either way) clamps to -125 as frexp's does; for zero, inf and NaN
    (frexp's e 0, the field's -1022 or 1025) the spacing is any finite power of two, which leaves
    round_bf16 and truncate_bf16 of them unchanged. The power of two is always normal, so its bits
    are built directly: (max(field, 897) - 7) << 52, formed on the field in place (bits 52..62)."""
    field = y.view(torch.int64) & (0x7FF << 52)
    return (field.clamp_min((1022 - 125) << 52) - ((1022 - 1023 + 8) << 52)).view(torch.float64)


def round_bf16(y: torch.Tensor) -> torch.Tensor:
    """One round-to-nearest-even of f64 values to bf16 (8 significant bits, subnormal spacing
    2^-133), returned as f64. Exact: torch's own f64 -> bf16 cast rounds twice (through f32)."""
    spacing = _bf16_spacing(y)
    return torch.round(y / spacing) * spacing


def truncate_bf16(y: torch.Tensor) -> torch.Tensor:
    """f64 values rounded toward zero to bf16 (the spacing of round_bf16), returned as f64."""
    spacing = _bf16_spacing(y)
    return torch.trunc(y / spacing) * spacing


def round_f32(y: torch.Tensor) -> torch.Tensor:
    """One round-to-nearest-even of f64 values to f32, returned as f64."""
    return y.to(torch.float32).to(torch.float64)


def _broadcast_shape(a: torch.Size, b: torch.Size) -> tuple[int, ...]:
    """The shape that tensors of shapes `a` and `b` broadcast to (torch's rules); ValueError when
    they do not broadcast. Plain Python: torch.broadcast_shapes imports its symbolic-shape
    machinery on its first call (about 0.5 s, in a campaign's first example)."""
    n = max(len(a), len(b))
    shape = []
    for x, y in zip((1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b), strict=True):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
        shape.append(y if x == 1 else x)
    return tuple(shape)


def output_interval_bound(ref: torch.Tensor, d_pre: torch.Tensor, casts: tuple[str, ...]) -> torch.Tensor:
    """Largest |bf16 output - ref| of a kernel whose pre-rounding value lies in [ref - d_pre,
    ref + d_pre] and whose conversion to bf16 is one of `casts` ("direct": one RNE; "via_f32":
    RNE to f32, then to bf16). Every cast is monotone, so the output lies between the roundings of
    the interval's ends (TOLERANCES.md section 6)."""
    # the two ends [lo, hi] written into one buffer on a leading axis: every rounding is
    # elementwise, so each end gets its own bits, with one op per step for both
    shape = _broadcast_shape(ref.shape, d_pre.shape)
    ends = torch.empty(2, *shape, dtype=torch.result_type(ref, d_pre), device=ref.device)
    torch.sub(ref, d_pre, out=ends[0])
    torch.add(ref, d_pre, out=ends[1])
    rounded: list[torch.Tensor] = []
    for cast in casts:
        if cast == "direct":
            rounded.append(round_bf16(ends))
        elif cast == TOWARD_ZERO_CAST:  # truncation of the value, or of its f32 rounding (both monotone)
            rounded.append(truncate_bf16(ends))
            rounded.append(truncate_bf16(round_f32(ends)))
        else:
            rounded.append(round_bf16(round_f32(ends)))
    # For finite ends the roundings are finite or infinite, never NaN, and a zero keeps the sign
    # of the end in every cast, so the pairwise minimum (maximum) is the stacked amin (amax) bit
    # for bit; where d_pre is not finite the bound is replaced by inf below.
    low, high = rounded[0][0], rounded[0][1]
    for other in rounded[1:]:
        low, high = torch.minimum(low, other[0]), torch.maximum(high, other[1])
    bound = torch.maximum(ref - low, high - ref)
    return torch.where(finite(d_pre), bound, f64_scalar(float("inf"), bound.device))


def _tile_counts(profile: NumericsProfile, n_valid: torch.Tensor, row_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_tiles, keys per tile) [R, 1, 1]: tiles of the online softmax (one pass: a single tile)."""
    tile = profile.softmax_tile
    if tile is None:
        return torch.ones_like(row_len), n_valid.clamp_min(1)
    return torch.ceil(row_len / tile).clamp_min(1), torch.clamp(n_valid, 1, tile)


def _o_l_roundings(profile: NumericsProfile, n_tiles: torch.Tensor, tile_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Equivalent rounding counts (k_o, k_l) of the o and l accumulations over the whole row.

    Every tile adds its keys into the accumulator (pv / l models, a tile's keys spread over
    l_partials partial sums) and rescales it once (by alpha); a term of an early tile meets every
    later tile's roundings, so k = n_tiles * (per-tile roundings + rescale), plus the products'
    own roundings and the final combination of l's partial sums (TOLERANCES.md section 5)."""
    pv, lacc = profile.pv, profile.l
    pv_tile = pv.roundings(tile_keys, torch.ceil(tile_keys / pv.terms_per_instruction))
    k_o = n_tiles * (pv_tile + profile.pv_rescale_roundings)
    l_keys = torch.ceil(tile_keys / profile.l_partials)
    l_tile = lacc.roundings(l_keys, torch.ceil(l_keys / lacc.terms_per_instruction))
    k_l = n_tiles * (l_tile + 1) + profile.l_final_roundings
    # the products' roundings: adding 0 would leave a count (never -0) as it is
    if pv.product_roundings:
        k_o = k_o + pv.product_roundings
    if lacc.product_roundings:
        k_l = k_l + lacc.product_roundings
    return k_o, k_l


def _check_f32_range(stats: _ChunkStats, qk_mag: torch.Tensor, profile: NumericsProfile) -> None:
    """PreconditionError where the profile's score or PV arithmetic could overflow its format
    (every partial sum of q . K is at most (1 + gamma) sum_d |q_d| |K_d|; every partial sum of o
    at most n 2^p_shift max|v|)."""
    # the three maxima in one host sync (each exact in f64: n_valid is an integer count)
    qk_max, n_max, v_max = torch.stack((qk_mag.max(), stats.n_valid.max(), stats.abs_v_max.max())).tolist()
    _raise_f32_range(qk_max, n_max, v_max, profile)


def _f32_range_rows(stats: _ChunkStats, qk_mag: torch.Tensor) -> list[torch.Tensor]:
    """Per row [R]: the maxima _check_f32_range reads (sum_d |q_d| |K_d|, n_valid, max |v|)."""
    n_rows = qk_mag.shape[0]
    return [qk_mag.reshape(n_rows, -1).amax(dim=1), stats.n_valid.view(n_rows), stats.abs_v_max.reshape(n_rows, -1).amax(dim=1)]


@functools.lru_cache(maxsize=64)
def _qk_growth(profile: NumericsProfile) -> float:
    """gamma of the most roundings a partial sum of q . K may take (a profile constant, cached per profile)."""
    most = profile.qk.roundings(2.0 * LATENT_DIM + 64, float(profile.qk_instructions)) + profile.qk.product_roundings
    return float(gamma(most, profile.qk.u))


def _raise_f32_range(qk_max: float, n_max: float, v_max: float, profile: NumericsProfile, gamma_qk: float | None = None) -> None:
    """_check_f32_range's decision on the chunk's maxima (gamma_qk: _qk_growth(profile))."""
    limit = FORMAT_MAX[profile.score_format]
    if gamma_qk is None:
        gamma_qk = _qk_growth(profile)
    if qk_max * (1 + gamma_qk) >= limit:
        raise PreconditionError(
            f"a partial sum of q . K may overflow {profile.score_format} (sum_d |q_d| |K_d| = {qk_max:.3g}, largest finite {limit:.3g})"
        )
    growth = 2.0**profile.p_shift * n_max * v_max
    if growth * (1 + 2.0**-8) >= limit:
        raise PreconditionError(f"the PV accumulation may overflow {profile.score_format} (n * 2^p_shift * max|v| = {growth:.3g})")


@dataclass(frozen=True)
class _SplitTerms:
    """The error a split-KV merge may add to one chunk's rows (TOLERANCES.md section 13)."""

    partials: torch.Tensor  # [R, 1, 1] the most partitions a row may be split into (1: not split)
    key_err: torch.Tensor  # [M, R, H, L] per-key log-weight error of the merge (natural units)
    out_rel: torch.Tensor  # [M, R, H, 1] relative out error: merge weights not summing to 1, the f32 sum of the partials
    lse: torch.Tensor  # [M, R, H] lse error of the merge (natural units)


def _split_terms(
    stats: _ChunkStats, scores: _ModeScores, z_fin: torch.Tensor, z_abs_max: torch.Tensor, profile: NumericsProfile
) -> _SplitTerms | None:
    """The merge's error terms for rows the profile lets split, None where no row of the chunk may.

    A row split into k partitions P_1..P_k holds per partition o_i (normalised by its l_i) and
    lse_i = log_b(l_i) + m_i in `lse_format`; the merge forms G = log_b(sum_i b^(lse_i - max)) + max
    and out = sum_i b^(lse_i - G) o_i. In natural units a key j of partition i gets the log-weight
    error of its partition's weight: the roundings of lse_i and G (u_c |lse_i| and u_c |G|, both
    <= u_c L with L = max(|lse_row|, max |z|) + 1), of the differences lse_i - max and lse_i - G
    (u_c (lse_row - z_j) each, since lse_i >= z_j), two logs (ln b x log_abs_err each), two exps
    (exp_rel_err each) and the sum of k terms (gamma_(k+1)(u_c))."""
    split = profile.split
    if not split.may_split:
        return None
    n_valid = stats.n_valid
    cap = n_valid if split.max_partials is None else torch.clamp(n_valid, max=float(split.max_partials))
    splits = n_valid > 1
    if split.rows == "above":
        splits = splits & (stats.row_len > split.min_keys)
    if not (bool(splits.any()) if stats.splits is None else stats.splits):
        return None
    partials = torch.where(splits, cap, torch.ones_like(cap))  # [R, 1, 1]
    u_c = unit_roundoff(split.lse_format)
    ln_b = LN2 if split.lse_base == "2" else 1.0
    row_lse = scores.row_lse.unsqueeze(-1)  # [M, R, H, 1]
    magnitude = torch.maximum(row_lse.abs(), z_abs_max) + 1.0
    gamma_k = gamma(partials + 1, u_c)
    constant = 2 * u_c * magnitude + 2 * ln_b * split.log_abs_err + 2 * split.exp_rel_err + gamma_k  # [M, R, H, 1]
    key_err = constant + 2 * u_c * (row_lse - z_fin).clamp_min(0.0)
    active = splits.to(torch.float64)  # rows never split take no merge error
    key_err = key_err * active
    # sum_j p_j (e^(E_j) - 1): the merge weights' total deviates from 1 by at most this (weighted by the reference softmax)
    weight_dev = (scores.probs * torch.expm1(key_err.clamp_max(_EXP_CAP))).sum(dim=-1, keepdim=True)
    weight_dev = torch.where(torch.isfinite(weight_dev), weight_dev, torch.full_like(weight_dev, float("inf")))
    out_rel = (weight_dev + gamma_k + 2 * u_c) * active
    lse = ((constant + 2 * u_c * torch.log(partials)) * active).squeeze(-1)
    return _SplitTerms(partials=partials, key_err=key_err, out_rel=out_rel, lse=lse)


def _chunk_bound(
    stats: _ChunkStats,
    scores: _ModeScores,
    q_rep_errs: tuple[torch.Tensor | None, ...],
    sigma: float,
    profile: NumericsProfile,
    checks: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out_ref, out_bound, lse_ref, lse_bound, window) of one chunk in every comparison mode of
    `scores` (an entry of stats.scores) at once, each stacked on a leading mode axis
    ([M, R, H, 512] and [M, R, H]): entry m is the bound of mode m alone, bit for bit.
    q_rep_errs[m] is mode m's representation error of Q (None: the reference holds Q's
    representation exactly).

    All bound arithmetic is finite for finite inputs: probabilities enter in the log domain, and
    every exponential that could overflow is replaced by +inf only where a min() discards it.
    `checks` given: each mode's per-row max |z| is appended to it, mode by mode (_Deferred),
    instead of being checked against the profile's score limit here."""
    rows, invalid, terms = stats.rows, stats.invalid, stats.terms
    assert len(q_rep_errs) == scores.z.shape[0]
    z = scores.z
    # shared by the modes ([R, H, L]) unless some mode adds Q's representation error
    score_err = stats.qk_err
    if any(e is not None for e in q_rep_errs):
        score_err = torch.stack(
            [stats.qk_err if e is None else stats.qk_err + torch.bmm(e[rows], stats.keys_abs_t) * abs(sigma) for e in q_rep_errs]
        )
    z_fin = z if invalid is None else z.masked_fill(invalid, 0.0)
    z_abs = z_fin.abs()
    z_abs_max = z_abs.amax(dim=-1, keepdim=True)
    if checks is not None:
        per_row = z_abs_max.reshape(z_abs_max.shape[0], z_abs_max.shape[1], -1).amax(dim=2)
        checks.extend(per_row[m] for m in range(per_row.shape[0]))
    elif float(z_abs_max.max()) > profile.score_limit:
        raise PreconditionError(f"|softmax_scale * q . K| exceeds the profile's limit {profile.score_limit:g}")
    z_max = scores.z_max
    z_min = (z if invalid is None else z.masked_fill(invalid, float("inf"))).amin(dim=-1, keepdim=True)
    z_gap = z_max - z_fin

    # Softmax-stage log-weight errors (natural units), per key (TOLERANCES.md section 2).
    u = profile.arith_u
    shift_ln = profile.p_shift * LN2
    soft_err = (
        profile.score_roundings * u * z_abs
        + u * (z_gap + shift_ln)
        + (u * (z_abs_max + shift_ln) if profile.p_shift else 0.0)
        + profile.exp_rel_err
        # each rescale: alpha = exp(m_old - m_new), one exp and one subtraction; the subtracted
        # differences telescope to at most z_max - z_min over the row
        + terms.rescale_err
        + terms.rescale_u * (z_max - z_min)
    )
    # The reference is itself computed in float64 (oracle.reference: bmm, exp(z - z_max), sum,
    # divide, bmm): its own error enters like a kernel's (TOLERANCES.md section 6, "the reference").
    ref_err = stats.ref_qk_err + U64 * (2 * z_abs + z_gap) + 4 * U64
    if stats.qk_flush is not None:
        # the scaled score and the exp argument, each flushed below F (log2 units)
        soft_err = soft_err + stats.qk_flush + 3 * LN2 * profile.flush_floor
    log_p, row_lse, ref_out = scores.log_p, scores.row_lse, scores.ref_out  # ln p_i: -inf at masked slots
    split = _split_terms(stats, scores, z_fin, z_abs_max, profile)
    # ref_err holds 4 u64 > 0, so the sum is positive or NaN: no split term to add is no addition
    # (x + 0.0 is x for every such x)
    key_err = score_err + soft_err + ref_err
    if split is not None:
        key_err = key_err + split.key_err
    key_err = key_err * (1 + 2.0**-16)
    if invalid is not None:
        key_err.masked_fill_(invalid, 0.0)
    e_max = key_err.amax(dim=-1)  # [M, R, H]

    ref_abs = ref_out.abs()
    p_abs_v = scores.p_abs_v
    assert p_abs_v is not None  # _chunk_stats sets it on every entry of stats.scores
    # Reweighting by factors within e^(+-E_i): |o' - o| <= e^Emax sum_i p_i (e^E_i - 1) |v_i - o|,
    # with p_i (e^E_i - 1) formed in the log domain (never 0 * inf).
    log_tilt = log_p + _log_expm1(key_err)
    tilt_overflow = (log_tilt > _EXP_CAP).any(dim=-1)  # [M, R, H]
    tilt = torch.exp(log_tilt.clamp_max(_EXP_CAP))
    tilt_abs_v = _stacked_bmm(tilt, stats.values_abs)
    tilt_mass = torch.where(tilt_overflow, f64_scalar(float("inf"), e_max.device), tilt.sum(dim=-1))
    v_range, abs_v_max = stats.v_range, stats.abs_v_max

    window_plain = 2 * e_max
    p_u = profile.p_u
    # flushed f32 results of the o side (TOLERANCES.md section 13): see _row_terms
    flush_out = terms.flush_out
    if split is not None and terms.flush_base is not None:
        flush_out = profile.flush_floor * (terms.flush_base + 2 * split.partials.view(-1, 1, 1))

    tilt_term = tilt_abs_v + tilt_mass.unsqueeze(-1) * ref_abs

    def out_bound_for(key_window: torch.Tensor, p_in_l: bool) -> torch.Tensor:
        w4 = (key_window / 4).unsqueeze(-1)
        if key_window is window_plain:
            # no extra per-key error: extra = (w - w) / 2 is +0 for a finite window, so e_max + extra
            # is e_max (> 0) and expm1(extra) (p_abs_v + ref_abs) (finite) adds +0 to the nonnegative
            # tilt term; an inf or NaN window makes both forms NaN or inf, which become inf below
            first_order = _exp_or_inf(e_max.unsqueeze(-1)) * tilt_term
        else:
            extra = (key_window - window_plain).unsqueeze(-1) / 2  # extra per-key error (P rounding in l)
            first_order = _exp_or_inf(e_max.unsqueeze(-1) + extra) * (tilt_term + torch.expm1(extra) * (p_abs_v + ref_abs))
        first_order = first_order.nan_to_num_(nan=float("inf"), posinf=float("inf"), neginf=float("-inf"))  # NaN -> inf
        d_soft = torch.minimum(torch.tanh(w4) * v_range, first_order)
        # sum_i p'_i |v_id| over the kernel's weights p' <= p e^w, and never above max_i |v_id|
        weighted = torch.minimum(_exp_or_inf(key_window.unsqueeze(-1)) * p_abs_v, abs_v_max)
        weighted = torch.where(torch.isnan(weighted), abs_v_max.expand_as(weighted), weighted)
        floor = terms.p_floor  # the P floor of the profile's p_format (_row_terms)
        if profile.p_format == "fp16_scaled":
            # P * scale_v is itself rounded to f32 when scale_v is not a power of two.
            d_p = (p_u + u) * weighted + floor
        elif profile.p_format == "bf16":
            d_p = floor if p_in_l else p_u * weighted + floor
        elif profile.p_format in ("f32", "f64"):
            d_p = p_u * weighted + floor
        elif profile.p_format == ANY16_P:
            # some 16-bit P' (of P, or of P * scale_v rounded to f32 first): bf16's relative
            # rounding, and f16's floor on P v (P itself rounded) or on P' code (P * scale_v
            # rounded); as for bf16, a reweighting when l sums the rounded P (TOLERANCES.md section 14)
            d_p = u * weighted + floor if p_in_l else (p_u + u) * weighted + floor
        else:
            d_p = torch.zeros_like(p_abs_v)
        magnitude = weighted * (1 + p_u) + d_p
        d_acc = terms.acc_factor * magnitude + terms.floor_v
        if split is not None:
            d_acc = d_acc + split.out_rel * magnitude
        d_pre = d_soft + d_p + d_acc + flush_out
        return output_interval_bound(ref_out, d_pre, profile.out_casts)

    lse_p: float | torch.Tensor = 0.0
    if profile.p_format == "exact" or profile.p_rounded_in_l == "no":
        bound = out_bound_for(window_plain, p_in_l=False)
    elif profile.p_rounded_in_l == "yes":
        bound = out_bound_for(window_plain + 2 * p_u, p_in_l=True)
        lse_p = torch.full_like(e_max, p_u)
    else:
        bound = torch.maximum(
            out_bound_for(window_plain, p_in_l=False),
            out_bound_for(window_plain + 2 * p_u, p_in_l=True),
        )
        lse_p = torch.full_like(e_max, p_u)

    lse_abs = row_lse.abs()
    lse_arith = profile.lse_extra_u * (lse_abs + e_max + terms.lse_log_n)
    # |ln sum_i p_i e^eta_i| <= min(E_max, sum_i p_i (e^E_i - 1))  (TOLERANCES.md section 3)
    reweight_lse = torch.minimum(e_max, tilt_mass)
    lse_ref = terms.lse_ref + U64 * lse_abs  # the reference's sum, log and addition
    # reweight_lse is +0 or more (or NaN), never -0: a zero lse_p adds nothing (x + 0.0 is x)
    lse_b = reweight_lse if isinstance(lse_p, float) else reweight_lse + lse_p
    lse_b = lse_b + terms.lse_l + terms.lse_floor + lse_arith + lse_ref
    if split is not None:
        lse_b = lse_b + split.lse
    return ref_out, bound, row_lse, lse_b, window_plain


def mode_groups(n_modes: int, device: torch.device) -> tuple[tuple[int, ...], ...]:
    """How evaluate_modes groups the comparison modes (indices 0..n_modes-1, consecutive) into
    stacked passes of the scores and bound: on a GPU all in one pass (the same arithmetic on a
    leading mode axis: about one mode's kernel launches for both), on a CPU one mode per pass
    (the stacked tensors outgrow the cache: 256-268 ms stacked against 232-241 ms one mode per
    pass at 16 rows x 512 keys x 16 heads, one thread, interleaved runs). Every grouping gives the
    same bits (test_bound_batches)."""
    if device.type == "cpu":
        return tuple((m,) for m in range(n_modes))
    return (tuple(range(n_modes)),) if n_modes else ()


def share_equal_queries(q_refs: tuple[torch.Tensor, ...], groups: tuple[tuple[int, ...], ...]) -> tuple[torch.Tensor, ...]:
    """`q_refs` (one reference query per mode) with each query replaced by an earlier one of the
    same shape and bits, where the modes run in more than one pass (mode_groups: on a CPU). Groups
    whose queries are then the same tensors share one computation of their scores, reference out
    and sum_i p_i |v_i| (_chunk_stats): the same operations on the same bits give the
    same bits. Most gfx950 calls have such a pair: Q's hi + lo representation holds every bf16 q
    whose elements are not far below their block's largest. Bits are compared as integers (-0 and
    +0 differ). One pass (a GPU): `q_refs` as given, nothing compared (no host read)."""
    if len(groups) < 2:
        return q_refs
    kept: list[torch.Tensor] = []
    for ref in q_refs:
        same = next((k for k in kept if k is ref or same_bits(k, ref)), ref)
        kept.append(same)
    return tuple(kept)


def _bound_chunk(
    chunk: BoundChunk,
    flags: torch.Tensor,
    messages: list[str],
    lengths: torch.Tensor,
    profile: NumericsProfile,
    code_table: torch.Tensor,
    stats_rep: qrep.QRepresentation,
    sigma: float,
    q_refs: tuple[torch.Tensor, ...],
    q_rep_errs: tuple[torch.Tensor | None, ...],
    groups: tuple[tuple[int, ...], ...],
    results: tuple[torch.Tensor, ...],
    deferred: _Deferred,
) -> None:
    """One gathered chunk's reference and bound in every mode, written into `results` (out,
    out_bound, lse, lse_bound, window, each stacked on the mode axis) at the chunk's rows; its
    precondition `flags` (with `messages`) and range checks handed to `deferred`."""
    checks: list[torch.Tensor] = [flags]
    stats = _chunk_stats(chunk, lengths, profile, code_table, stats_rep, sigma, q_refs, checks, groups)
    for group, scores in zip(groups, stats.scores, strict=True):
        stacked = _chunk_bound(stats, scores, tuple(q_rep_errs[m] for m in group), sigma, profile, checks)
        for target, value in zip(results, stacked, strict=True):
            target[group[0] : group[-1] + 1, chunk.rows] = value
    deferred.add(chunk, checks, messages)


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
    batch_budget: int | None = None,
) -> dict[Mode, Evaluation]:
    """Reference and the profile's a-priori bound in each of `modes`, sharing one gathering pass.

    PreconditionError where no bound is promised (index or position out of range, non-pow2 /
    over-cap / non-positive scales where the profile needs them, NaN codes, q not finite, scores
    beyond the profile's limit). `scale_model` "gfx950" judges against the gfx950 kernel's
    documented handling of non-pow2, over-cap and zero scales instead (oracle.rows.gather_chunk),
    so those are no longer preconditions.

    key_budget fixes the chunks (oracle.rows.chunk_plan: each row is padded to its chunk's
    longest row, so it is part of the result's definition, bit for bit); batch_budget (key
    slots, default BOUND_BATCH_SLOTS of the device type) only says how many chunks of one width
    run as one batch (oracle.rows.chunk_plan_batches): a fixed number of batched operations per
    batch, and the host reads a fixed number of times per call (the row plan, the checks once at
    the end, and one per batch: its first chunk's preconditions, before its arithmetic),
    whatever the number of chunks; under has_invalid once more per batch (which rows have a
    valid key: the others are dropped), and profiles that may split rows once per chunk (which
    rows may split is then known only there)."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown comparison mode {mode!r}; expected one of {MODES}")
    # one host read for the call's checks before the first batch: q finite, the index stream
    # (oracle.rows.check_stream) and the row plan; raised in that order, the scale in between
    q_finite = finite(q).all()
    sigma = float(softmax_scale)
    n_q, heads, _ = q.shape
    device = q.device
    q64 = q.to(torch.float64)  # exact: the representation and the "float64" reference share it
    rep = _representation(q64, profile)
    # per mode: the reference's query and, in "float64" mode, the representation error of Q
    per_mode = {mode: (rep.q_hat, None) if mode == "exact-steps" else (q64, _q_representation_error(q64, rep, profile)) for mode in modes}
    # (out, out_bound, lse, lse_bound, window), each stacked on a mode axis in per_mode's order;
    # rows without a valid key keep the defaults: out 0, lse -inf, bounds 0
    n_modes = len(per_mode)
    q_rep_errs = tuple(q_rep_err for _, q_rep_err in per_mode.values())
    groups = mode_groups(n_modes, device)
    q_refs = share_equal_queries(tuple(q_ref for q_ref, _ in per_mode.values()), groups)
    results = (
        torch.zeros(n_modes, n_q, heads, LATENT_DIM, dtype=torch.float64, device=device),
        torch.zeros(n_modes, n_q, heads, LATENT_DIM, dtype=torch.float64, device=device),
        torch.full((n_modes, n_q, heads), float("-inf"), dtype=torch.float64, device=device),
        torch.zeros(n_modes, n_q, heads, dtype=torch.float64, device=device),
        torch.zeros(n_modes, n_q, heads, dtype=torch.float64, device=device),
    )
    starts, lengths = bounds = row_bounds(indptr)
    code_table = _abs_code_table(device)
    assert rep.terms is not None
    stats_rep = qrep.QRepresentation(q_hat=rep.q_hat, magnitude=rep.magnitude, e8m0=rep.e8m0, terms=rep.terms.to(torch.float32))
    batch = batch_budget if batch_budget is not None else BOUND_BATCH_SLOTS.get(device.type, BOUND_BATCH_SLOTS["cpu"])
    kind = None
    if profile.split.may_split:
        if has_invalid:
            batch = 0  # no merging: each chunk reads which of its rows may split
        else:
            kind = _split_kind(profile)
    deferred = _Deferred(profile)

    plans, flags = oracle_rows.checked_plan(
        indices,
        indptr,
        kv_cache,
        has_invalid=has_invalid,
        key_budget=key_budget,
        batch_budget=batch,
        kind=kind,
        extra=~q_finite,
        bounds=bounds,
    )
    if flags[2]:
        raise PreconditionError("q holds non-finite values")
    _check_scale(sigma, profile)
    oracle_rows.raise_stream(indices, indptr, kv_cache.numel() // RECORD_BYTES, has_invalid=has_invalid, flags=flags[:2])

    # Each batch's records are gathered and decoded once (oracle.rows.BoundChunk); its statistics
    # are shared by every mode.
    for plan in plans:
        chunk = oracle_rows.gather_bound_batch(plan, starts, lengths, indices, kv_cache, has_invalid=has_invalid, scale_model=scale_model)
        if chunk is None:  # no row of the batch has a valid key
            continue
        flags, messages = _precondition_flags(chunk, profile, scale_model)
        # the batch's first chunk read back before its arithmetic (one host read per batch): a
        # call that breaks a precondition there (most do, being one chunk) stops here, after
        # any earlier batch's checks; a later chunk's are raised at the end, in order
        flags = flags.to(torch.float64)  # as _Deferred.add stacks it
        first = _segment_max(flags, chunk)[0].tolist()
        if any(first):
            deferred.raise_first()
            raise PreconditionError(messages[first.index(max(first))])
        _bound_chunk(chunk, flags, messages, lengths, profile, code_table, stats_rep, sigma, q_refs, q_rep_errs, groups, results, deferred)
    deferred.raise_first()
    out, out_bound, lse, lse_bound, window = results
    return {
        mode: Evaluation(
            out=out[m], out_bound=out_bound[m], lse=lse[m], lse_bound=lse_bound[m], window=window[m], mode=mode, profile=profile.name
        )
        for m, mode in enumerate(per_mode)
    }


def _split_kind(profile: NumericsProfile) -> Callable[[list[int]], object]:
    """Whether some row of a chunk may be split, from its rows' lengths (without has_invalid a
    row's valid keys are its length): the host's value of _split_terms' test."""
    split = profile.split

    def kind(lengths: list[int]) -> bool:
        return any(n > 1 and (split.rows != "above" or n > split.min_keys) for n in lengths)

    return kind


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
        q,
        kv_cache,
        indices,
        indptr,
        softmax_scale,
        profile=profile,
        modes=(mode,),
        has_invalid=has_invalid,
        key_budget=key_budget,
        scale_model=scale_model,
    )[mode]
