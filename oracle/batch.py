"""The reference and a-priori bound of several calls in one pass, each call's values bit for bit
those of oracle.bound.evaluate_modes on that call alone.

`evaluate_many(calls, profile=...)` returns, per call, what evaluate_modes returns for it (a dict
of Evaluation by mode) or the PreconditionError it raises. What is shared between the calls is
only what gives every element the same bits whatever else is computed beside it:
- Q's representation and its representation error (oracle.q_representation: elementwise and per
  128-value block, exact maxima), the float64 widening of Q, the result buffers and the q-finite
  check run once over every call's heads flattened and concatenated;
- the row plans (lengths, the stream's precondition flags, q finite) are read back in one host
  read for all calls, and the deferred checks of every call in one more (evaluate_modes reads
  the first, the last and one per batch, per call);
- each call keeps its own chunks and batches (oracle.rows.chunk_plan_batches: a row's padded
  width, the head count and the rows of every batched matrix product are part of its bits: on a
  CPU, torch's f64 bmm gives other bits for the same row when the matrices have more heads or the
  batch has more rows, and a sum over a row padded to another width rounds otherwise), so the
  per-batch arithmetic runs per call, exactly as alone.
A call whose plan or checks break a precondition is evaluated alone by evaluate_modes (which
raises its PreconditionError, message for message). Every call is on one device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernel.host_copy import to_device
from kernel.record import LATENT_DIM, RECORD_BYTES
from oracle import binary
from oracle import q_representation as qrep
from oracle import rows as oracle_rows
from oracle.bound import (
    BOUND_BATCH_SLOTS,
    MODES,
    Evaluation,
    Mode,
    _abs_code_table,
    _bound_chunk,
    _check_scale,
    _Deferred,
    _precondition_flags,
    _q_representation_error,
    _representation,
    _split_kind,
    evaluate_modes,
    mode_groups,
    share_equal_queries,
)
from oracle.profile_schema import NumericsProfile
from oracle.rows import DEFAULT_KEY_BUDGET, PreconditionError, row_bounds

HEAD_DIM = 576


@dataclass(frozen=True)
class Call:
    """One kernel call's inputs as evaluate_modes takes them (q bf16 [n_q, H, 576], the cache,
    the CSR stream, softmax_scale, has_invalid)."""

    q: torch.Tensor
    kv_cache: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    softmax_scale: float
    has_invalid: bool = False


Outcome = dict[Mode, Evaluation] | PreconditionError


def evaluate_many(
    calls: Sequence[Call],
    *,
    profile: NumericsProfile,
    modes: tuple[Mode, ...] = MODES,
    key_budget: int = DEFAULT_KEY_BUDGET,
    scale_model: str = "stored",
    batch_budget: int | None = None,
) -> list[Outcome]:
    """Per call, evaluate_modes(call, ...) or the PreconditionError it raises (module docstring).
    ValueError for an unknown mode or calls on more than one device."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown comparison mode {mode!r}; expected one of {MODES}")
    if not calls:
        return []
    device = calls[0].q.device
    if any(c.q.device != device for c in calls):
        raise ValueError(f"evaluate_many needs every call on one device, got {sorted({str(c.q.device) for c in calls})}")
    shapes = [(int(c.q.shape[0]), int(c.q.shape[1])) for c in calls]
    sizes = [n * h for n, h in shapes]
    offsets = [sum(sizes[:i]) for i in range(len(calls))]
    total = sum(sizes)

    # every call's heads as rows of one [N, 576] tensor: the representation, its error and the
    # widening are elementwise or per 128-value block, so each element gets its bits as alone
    q_all = torch.cat([c.q.reshape(-1, HEAD_DIM) for c in calls]) if len(calls) > 1 else calls[0].q.reshape(-1, HEAD_DIM)
    q64 = q_all.to(torch.float64)  # exact: the representation and the "float64" reference share it
    rep = _representation(q64, profile)
    per_mode = {mode: (rep.q_hat, None) if mode == "exact-steps" else (q64, _q_representation_error(q64, rep, profile)) for mode in modes}
    n_modes = len(per_mode)
    assert rep.terms is not None
    terms32 = rep.terms.to(torch.float32)
    finite = binary.finite(q_all).all(dim=-1)
    results = (
        torch.zeros(n_modes, total, LATENT_DIM, dtype=torch.float64, device=device),
        torch.zeros(n_modes, total, LATENT_DIM, dtype=torch.float64, device=device),
        torch.full((n_modes, total), float("-inf"), dtype=torch.float64, device=device),
        torch.zeros(n_modes, total, dtype=torch.float64, device=device),
        torch.zeros(n_modes, total, dtype=torch.float64, device=device),
    )

    # the plans: every call's lengths and stream flags, and the heads' finiteness, in one host read
    bounds = [row_bounds(c.indptr) for c in calls]
    flags = [
        oracle_rows.stream_flags(c.indices, c.indptr, c.kv_cache.numel() // RECORD_BYTES, has_invalid=c.has_invalid, bounds=b)
        for c, b in zip(calls, bounds, strict=True)
    ]
    parts = [t.to(torch.int64) for b, f in zip(bounds, flags, strict=True) for t in (b[1], f)] + [finite.to(torch.int64)]
    host = torch.cat(parts).tolist()
    lengths_host: list[list[int]] = []
    flags_host: list[list[bool]] = []
    at = 0
    for b in bounds:
        n = b[1].numel()
        lengths_host.append(host[at : at + n])
        flags_host.append([bool(x) for x in host[at + n : at + n + 2]])
        at += n + 2
    finite_host = host[at:]

    orders = [sorted(range(len(lengths)), key=lambda i, lengths=lengths: -lengths[i]) for lengths in lengths_host]
    order_all = to_device([i for order in orders for i in order], dtype=torch.int64, device=device)
    order_views = order_all.split([len(order) for order in orders])

    code_table = _abs_code_table(device)
    groups = mode_groups(n_modes, device)
    outcomes: list[Outcome | None] = [None] * len(calls)
    deferred: list[_Deferred | None] = [None] * len(calls)
    for i, call in enumerate(calls):
        n, heads = shapes[i]
        lo, hi = offsets[i], offsets[i] + sizes[i]
        q_finite = all(finite_host[lo:hi])
        stream_ok = not any(flags_host[i])
        try:
            _check_scale(float(call.softmax_scale), profile)
        except PreconditionError:
            stream_ok = False
        if not (q_finite and stream_ok):
            outcomes[i] = _alone(call, profile, modes, key_budget, scale_model, batch_budget)
            continue
        deferred[i] = _call_batches(
            call,
            profile,
            scale_model=scale_model,
            key_budget=key_budget,
            batch_budget=batch_budget,
            order=order_views[i],
            sorted_len=[lengths_host[i][j] for j in orders[i]],
            bounds=bounds[i],
            q_refs=share_equal_queries(tuple(q_ref[lo:hi].view(n, heads, HEAD_DIM) for q_ref, _ in per_mode.values()), groups),
            q_rep_errs=tuple(None if err is None else err[lo:hi].view(n, heads, HEAD_DIM) for _, err in per_mode.values()),
            stats_rep=qrep.QRepresentation(
                q_hat=rep.q_hat[lo:hi].view(n, heads, HEAD_DIM),
                magnitude=rep.magnitude[lo:hi].view(n, heads, HEAD_DIM),
                e8m0=None,
                terms=terms32[lo:hi].view(n, heads, HEAD_DIM),
            ),
            results=tuple(
                r[:, lo:hi].view(n_modes, n, heads, LATENT_DIM) if r.dim() == 3 else r[:, lo:hi].view(n_modes, n, heads) for r in results
            ),
            code_table=code_table,
            groups=groups,
        )

    # every call's deferred checks in one host read
    pending = [(i, d) for i, d in enumerate(deferred) if d is not None and d.parts]
    if pending:
        counts = [sum(p.shape[0] for p in d.parts or []) for _, d in pending]
        rows = torch.cat([torch.cat(d.parts or []) for _, d in pending]).tolist()
        at = 0
        for (i, d), count in zip(pending, counts, strict=True):
            try:
                d.raise_first_of(rows[at : at + count])
            except PreconditionError:
                outcomes[i] = _alone(calls[i], profile, modes, key_budget, scale_model, batch_budget)
            at += count
    out, out_bound, lse, lse_bound, window = results
    for i in range(len(calls)):
        if outcomes[i] is not None:
            continue
        n, heads = shapes[i]
        lo, hi = offsets[i], offsets[i] + sizes[i]
        outcomes[i] = {
            mode: Evaluation(
                out=out[m, lo:hi].view(n, heads, LATENT_DIM),
                out_bound=out_bound[m, lo:hi].view(n, heads, LATENT_DIM),
                lse=lse[m, lo:hi].view(n, heads),
                lse_bound=lse_bound[m, lo:hi].view(n, heads),
                window=window[m, lo:hi].view(n, heads),
                mode=mode,
                profile=profile.name,
            )
            for m, mode in enumerate(per_mode)
        }
    return [o for o in outcomes if o is not None]


def _alone(
    call: Call, profile: NumericsProfile, modes: tuple[Mode, ...], key_budget: int, scale_model: str, batch_budget: int | None
) -> Outcome:
    """evaluate_modes on the call alone, or the PreconditionError it raises."""
    try:
        return evaluate_modes(
            call.q,
            call.kv_cache,
            call.indices,
            call.indptr,
            call.softmax_scale,
            profile=profile,
            modes=modes,
            has_invalid=call.has_invalid,
            key_budget=key_budget,
            scale_model=scale_model,
            batch_budget=batch_budget,
        )
    except PreconditionError as err:
        return err


def _call_batches(
    call: Call,
    profile: NumericsProfile,
    *,
    scale_model: str,
    key_budget: int,
    batch_budget: int | None,
    order: torch.Tensor,
    sorted_len: list[int],
    bounds: tuple[torch.Tensor, torch.Tensor],
    q_refs: tuple[torch.Tensor, ...],
    q_rep_errs: tuple[torch.Tensor | None, ...],
    stats_rep: qrep.QRepresentation,
    results: tuple[torch.Tensor, ...],
    code_table: torch.Tensor,
    groups: tuple[tuple[int, ...], ...],
) -> _Deferred:
    """One call's batches, as evaluate_modes computes them, into `results` (views of the call's
    rows); its checks deferred (returned), none read back here."""
    device = call.q.device
    batch = batch_budget if batch_budget is not None else BOUND_BATCH_SLOTS.get(device.type, BOUND_BATCH_SLOTS["cpu"])
    kind = None
    if profile.split.may_split:
        if call.has_invalid:
            batch = 0
        else:
            kind = _split_kind(profile)
    plans = oracle_rows._batches(order, sorted_len, key_budget, batch, kind)
    starts, lengths = bounds
    sigma = float(call.softmax_scale)
    deferred = _Deferred(profile)
    for plan in plans:
        chunk = oracle_rows.gather_bound_batch(
            plan, starts, lengths, call.indices, call.kv_cache, has_invalid=call.has_invalid, scale_model=scale_model
        )
        if chunk is None:
            continue
        flags, messages = _precondition_flags(chunk, profile, scale_model)
        _bound_chunk(chunk, flags, messages, lengths, profile, code_table, stats_rep, sigma, q_refs, q_rep_errs, groups, results, deferred)
    return deferred
