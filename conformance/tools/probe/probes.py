"""The directed probes: each builds calls through the contract so that one unknown of the pipeline
decides the output bits, runs the kernel, and judges the result against float64 predictions
under every candidate model.

Conventions shared by the accumulation probes (`qk_*`, `pv_*`): a "cancellation triple" is a
large term +256, a small term and -256, placed at chosen positions (dims of the q.K dot, or keys
of the P.V sum). Whatever rounds between the +256 and the -256 shows in the difference:

- a rounding of 256 + 0.75 ulp (ulp(256) = 2^-15 in f32) to f32 leaves +1 ulp (to nearest),
  0 (toward zero) or, for the negated triple, -1 ulp (down);
- the three terms summed exactly before any rounding (one fused instruction with enough
  fraction bits, or float64 arithmetic) leave exactly 0.75 ulp.

QK probes read the difference D through the softmax: key A has K = 0 (score 0) and V = 0, key B
carries the triple; softmax_scale = 2^15 makes sigma D one unit per f32 ulp of 256, and
out[dim 0] = 256 w / (1 + w) with w = e^(sigma D), so D = ln(w) / sigma. PV probes read it
directly: every key has score 0 (q = 0), so out = (sum of P V) / (number of keys).

`Evidence` records each probe's problem, candidates, observation, decision and margin.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from conformance.tools.probe.build import HEAD_DIM, Call, Key, ProbeSkipped, run_call
from conformance.tools.probe.rounding import round_to

ULP256 = 2.0**-15  # f32 ulp of 256
SMALL_CODE = 3 * 2.0**-9  # e4m3 value; with q = 2^-8 the product is 0.75 ulp of 256
LN2 = math.log(2.0)


@dataclass
class Evidence:
    """One probe's record: what it decides, the problem, each candidate's predicted value and its
    distance to the observation, what matched, and the decision (None: undecided)."""

    probe: str
    unknown: str
    problem: str
    candidates: dict[str, str] = field(default_factory=dict)
    observed: str = ""
    matched: list[str] = field(default_factory=list)
    decision: object = None
    margin: str = ""
    seconds: float = 0.0

    def lines(self) -> list[str]:
        out = [f"[{self.probe}] {self.unknown}", f"  problem:   {self.problem}"]
        for name, pred in self.candidates.items():
            out.append(f"  candidate: {name}: {pred}")
        out.append(f"  observed:  {self.observed}")
        out.append(f"  matched:   {', '.join(self.matched) if self.matched else 'none'}" + (f" ({self.margin})" if self.margin else ""))
        out.append(f"  decision:  {self.decision if self.decision is not None else 'undecided (conservative value kept)'}")
        return out


@dataclass
class Context:
    """What a probe needs: the kernel, its device, a head count it takes, the decisions so far."""

    kernel: Callable
    device: str
    heads: int = 16
    decided: dict[str, object] = field(default_factory=dict)
    log: Callable[[str], None] = print

    def run(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        return run_call(self.kernel, call, self.device)


def _q(entries: dict[int, float]) -> torch.Tensor:
    q = torch.zeros(HEAD_DIM, dtype=torch.float64)
    for d, v in entries.items():
        q[d] = v
    return q


def _classify(value: float, candidates: dict[str, float], tol: float) -> tuple[str | None, float]:
    """The candidate nearest `value` when within `tol`, and the distance."""
    name, dist = min(((n, abs(value - c)) for n, c in candidates.items()), key=lambda t: t[1])
    return (name if dist <= tol else None), dist


# ------------------------------------------------------------------------------------ Q representation


def probe_q_representation(ctx: Context) -> Evidence:
    """q = (1, 2^-24) in latent block 0 against K = (0, 57344): kept exactly in bf16, lost by
    gfx950's hi + lo fp8 split (the tiny element falls below both parts). softmax_scale 2^8 makes
    the product a score of 0.875."""
    ev = Evidence("q_representation", "how Q enters QK (bf16 as stored, or fp8 hi + lo)", "")
    call = Call(heads=1, softmax_scale=256.0)
    a = call.key(Key())
    b = call.key(Key().set_k(1, 448.0, 128.0))
    call.row([a, b], _q({0: 1.0, 1: 2.0**-24}))
    out, _ = ctx.run(call)
    score = 256.0 * 2.0**-24 * 57344.0
    preds = {"exact": 57344.0 * math.exp(score) / (1 + math.exp(score)), "fp8_hi_lo": 57344.0 / 2}
    ev.problem = "1 row, keys A (K=0) and B (K[1]=57344), q[0]=1, q[1]=2^-24, softmax_scale=2^8; out[1]"
    ev.candidates = {k: f"out[1] = {v:.6g}" for k, v in preds.items()}
    obs = float(out[0, 0, 1])
    ev.observed = f"out[1] = {obs:.6g}"
    name, dist = _classify(obs, preds, 0.01 * 57344.0)
    ev.matched = [name] if name else []
    ev.margin = f"off by {dist:.3g}"
    ev.decision = name
    return ev


# ------------------------------------------------------------------------------------ output cast


def probe_output_rounding(ctx: Context) -> Evidence:
    """Two keys of equal score (q = 0): out = (V_A + V_B) / 2 exactly, V_A in +-[1, 1.75] and
    V_B = m 2^-9 (m = 1..7): out lies m/4 of a bf16 ulp (2^-8 on [0.5, 1)) above a bf16 value, ties
    included: nearest-even, toward-zero and ties-away casts differ."""
    ev = Evidence("output_rounding", "the bf16 conversion of out (nearest even / toward zero / ties away)", "")
    call = Call(heads=1, softmax_scale=1.0)
    d = torch.arange(512)
    base = (1.0 + (d % 4).double() * 0.25) * torch.where(d % 2 == 0, 1.0, -1.0)
    m = (1 + d % 7).double()
    ka, kb = Key(), Key()
    ka.codes = base.clone()
    kb.codes = torch.sign(base) * m * 2.0**-9
    call.row([call.key(ka), call.key(kb)], _q({}))
    out, _ = ctx.run(call)
    exact = (ka.latent() + kb.latent()) / 2
    obs = out[0, 0]
    for mode in ("rn", "rz", "ra"):
        pred = round_to(exact, "bf16", mode)
        bad = int((pred != obs).sum())
        ev.candidates[mode] = f"{bad} of 512 outputs differ"
        if bad == 0:
            ev.matched.append(mode)
    ev.problem = "1 row, 2 keys of score 0, out = (V_A + V_B) / 2 exactly, at m/4 of a bf16 ulp (m = 1..7)"
    ev.observed = f"{int((obs == round_to(exact, 'bf16', 'rn')).sum())} of 512 equal to nearest-even"
    ev.decision = {"rn": "nearest", "rz": "toward_zero", "ra": "ties_away"}.get(ev.matched[0]) if len(ev.matched) == 1 else None
    return ev


# ------------------------------------------------------------------------------------ P before PV

P_CANDIDATES: tuple[tuple[str, str, str], ...] = (
    ("exact", "rn", "no"),
    ("bf16", "rn", "no"),
    ("bf16", "rn", "yes"),
    ("bf16", "rz", "no"),
    ("bf16", "rz", "yes"),
    ("fp16", "rn", "no"),
    ("fp16", "rn", "yes"),
    ("fp16", "rz", "no"),
    ("fp16", "rz", "yes"),
)


def probe_p_format(ctx: Context, rows: int = 8) -> Evidence:
    """Key A (score 0, V = 0) and key B (score c_h t_r in (-1, 0), exact from one rope product,
    softmax_scale ln 2 so exp2's argument is the score; 512 random V values): out = P'_B v / l with
    l = P_A + P_B (or + P'_B). Each candidate (format, rounding, l from the rounded P?) predicts every
    output; elements whose prediction changes within exp2's error (2^-20) or an f32 normalisation
    error (2^-20) are left out for that candidate."""
    ev = Evidence("p_format", "P before PV: format, rounding, and whether l sums the rounded P", "")
    heads = ctx.heads
    rows = max(rows, -(-64 // heads))  # at least 64 (row, head) positions of P_B
    gen = torch.Generator().manual_seed(20)
    call = Call(heads=heads, softmax_scale=LN2)
    a = call.key(Key())
    c = (0.5 + torch.arange(heads, dtype=torch.float64) / (2 * heads)).to(torch.bfloat16).double()
    v_all, t_all = [], []
    for r in range(rows):
        kb = Key()
        codes = (1 + torch.randint(0, 7, (512,), generator=gen)).double() * 2.0 ** torch.randint(-3, 3, (512,), generator=gen).double()
        kb.codes = codes * torch.where(torch.rand(512, generator=gen) < 0.5, -1.0, 1.0)
        t = -float(torch.tensor(0.05 + 0.9 * (r + 0.37) / rows).to(torch.bfloat16))
        kb.rope[0] = t
        q = torch.zeros(heads, HEAD_DIM, dtype=torch.float64)
        q[:, 512] = c
        call.row([a, call.key(kb)], q)
        v_all.append(kb.latent())
        t_all.append(t)
    out, _ = ctx.run(call)
    v = torch.stack(v_all)[:, None, :]  # [R, 1, 512]
    p_b = torch.pow(2.0, c[None, :] * torch.tensor(t_all, dtype=torch.float64)[:, None])[..., None]  # [R, H, 1]
    cast = {"nearest": "rn", "toward_zero": "rz", "ties_away": "ra"}.get(str(ctx.decided.get("output_rounding")), "rn")
    delta = 2.0**-20
    results = {}
    for fmt, rnd, in_l in P_CANDIDATES:
        preds = []
        for pb in (p_b * (1 - delta), p_b * (1 + delta)):
            pr = pb if fmt == "exact" else round_to(pb, fmt, rnd)
            l = 1 + (pr if in_l == "yes" else pb)
            y = pr * v / l
            preds += [round_to(y * (1 - delta), "bf16", cast), round_to(y * (1 + delta), "bf16", cast)]
        certain = torch.stack([(p == preds[0]) for p in preds[1:]]).all(dim=0)
        bad = int(((preds[0] != out) & certain).sum())
        n_certain = int(certain.sum())
        label = "exact (f32 or wider)" if fmt == "exact" else f"{fmt} {rnd}, l from {'rounded' if in_l == 'yes' else 'f32'} P"
        results[(fmt, rnd, in_l)] = bad
        ev.candidates[label] = f"{bad} mismatches in {n_certain} decidable outputs"
        if bad == 0 and n_certain > 100:
            ev.matched.append(label)
    ev.problem = f"{rows} rows x {heads} heads, keys A (score 0) and B (score in (-1, 0)), softmax_scale ln 2, 512 values each"
    ok = [k for k, bad in results.items() if bad == 0]
    ev.observed = f"{len(ok)} candidate(s) reproduce every decidable output"
    fmts = {k[0] for k in ok}
    if len(fmts) == 1:
        fmt = fmts.pop()
        rnds = {k[1] for k in ok}
        in_ls = {k[2] for k in ok}
        ev.decision = {
            "format": {"exact": "f32", "bf16": "bf16", "fp16": "fp16_scaled"}[fmt],
            "rounding": "nearest" if rnds == {"rn"} else "toward_zero",
            "rounded_in_l": "no" if fmt == "exact" else ("unknown" if len(in_ls) > 1 else in_ls.pop()),
        }
    return ev


def probe_p_shift(ctx: Context) -> Evidence:
    """For fp16 P' only: key B at score -(24 + k) (log2 units), V = 448: P' = fp16(2^(s - 24 - k))
    is nonzero exactly when k <= s, s = the shift of P (gfx950: P = exp2(x - m + 8))."""
    ev = Evidence("p_shift", "log2 of the largest P (P = exp2(x - m + p_shift)); visible through fp16's underflow", "")
    call = Call(heads=1, softmax_scale=LN2)
    a = call.key(Key())
    for k in range(11):
        kb = Key()
        kb.codes[:] = 448.0
        kb.rope[0] = -float(24 + k)
        call.row([a, call.key(kb)], _q({512: 1.0}))
    out, _ = ctx.run(call)
    nonzero = [int(x) for x in (out[:, 0, 0] != 0).tolist()]
    ev.problem = "11 rows, key B at score -(24 + k), k = 0..10, softmax_scale ln 2; is out nonzero?"
    ev.candidates = {f"p_shift = {s}": f"nonzero for k <= {s}" for s in (0, 4, 8)}
    ev.observed = "nonzero for k in " + str([k for k, nz in enumerate(nonzero) if nz])
    last = max([k for k, nz in enumerate(nonzero) if nz], default=-1)
    consistent = all(nonzero[k] == (k <= last) for k in range(11))
    if consistent and 0 <= last <= 8:
        ev.matched = [f"p_shift = {last}"]
        ev.decision = last
    return ev


# ------------------------------------------------------------------------------------ subnormals


def probe_subnormals(ctx: Context) -> Evidence:
    """(1) one key (P = 1) whose V values are subnormal in f32 and bf16 (scale 2^-126, codes below 1)
    beside normal ones: out = V (preserve) or 0 where V is subnormal (flush); (2) key B at score
    -129 (log2 units): P_B = 2^-129 (subnormal) times V = 57344 gives a normal out of about
    2^-113 (preserve) or exactly 0 (flush)."""
    ev = Evidence("subnormals", "subnormal results in the f32 / bf16 pipeline: preserved or flushed", "")
    call = Call(heads=1, softmax_scale=LN2)
    kv = Key()
    kv.scales[:] = 2.0**-126
    kv.codes[:8] = torch.tensor([2.0**-7, 2.0**-6, 3 * 2.0**-7, 0.5, 0.75, 1.0, 1.5, 448.0], dtype=torch.float64)
    call.row([call.key(kv)], _q({}))
    a = call.key(Key())
    kb = Key()
    kb.codes[:] = 448.0
    kb.scales[:] = 128.0
    kb.rope[0] = -129.0
    call.row([a, call.key(kb)], _q({512: 1.0}))
    out, _ = ctx.run(call)
    v = kv.latent()[:8]
    sub = v.abs() < 2.0**-126
    pred_keep = round_to(v, "bf16", "rn")
    pred_flush = torch.where(sub, 0.0, pred_keep)
    obs1 = out[0, 0, :8]
    keep1 = bool((obs1 == pred_keep).all())
    flush1 = bool((obs1 == pred_flush).all())
    p_pred = 2.0**-129 * 57344.0
    obs2 = float(out[1, 0, 0])
    keep2 = abs(obs2 - p_pred) <= 0.02 * p_pred
    flush2 = obs2 == 0.0
    ev.problem = "row 1: one key, V = {2^-133, 2^-132, 3*2^-133, 2^-127, 0.75*2^-126} (subnormal) and normal values; row 2: P = 2^-129"
    ev.candidates = {
        "preserve": f"row 1 out = V exactly; row 2 out = {p_pred:.4g}",
        "flush": f"row 1 out = 0 on the {int(sub.sum())} subnormal V; row 2 out = 0",
    }
    ev.observed = f"row 1 {'= V' if keep1 else ('flushed' if flush1 else str(obs1.tolist()))}; row 2 out = {obs2:.4g}"
    fp16_p = ctx.decided.get("p_format", {}) if isinstance(ctx.decided.get("p_format"), dict) else {}
    if fp16_p.get("format") == "fp16_scaled":
        ev.observed += " (P' = fp16(P * scale): f16 underflow hides the f32 pipeline, probe inconclusive)"
        return ev
    if keep1 and keep2:
        ev.matched, ev.decision = ["preserve"], "preserve"
    elif (flush1 or keep1) and (flush2 or keep2) and (flush1 or flush2):
        ev.matched, ev.decision = ["flush"], "flush"
    return ev


# ------------------------------------------------------------------------------------ QK accumulation


def _qk_triple(
    call: Call, sign: float, small_dim: int, far_dim: int, q_scale: float = 1.0, small: tuple[float, float] | None = None
) -> int:
    """Key B of a QK cancellation triple: K[0] = sign 256, K[small_dim] = sign 3*2^-9 (product with
    q = 2^-8: 0.75 ulp), K[far_dim] = -sign 256 (dims >= 512 are rope); returns the row's id."""
    a = call.key(Key())
    kb = Key().set_k(0, sign * 256.0)
    q_small, k_small = small if small is not None else (2.0**-8, SMALL_CODE)
    kb.set_k(small_dim, sign * k_small)
    kb.set_k(far_dim, -sign * 256.0)
    q = _q({0: q_scale, small_dim: q_small * q_scale, far_dim: q_scale})
    return call.row([a, call.key(kb)], q, tag=(sign, small_dim, far_dim))


def _qk_diff_ulps(out: torch.Tensor, row: int, head: int, sigma: float) -> float:
    """D / ulp(256) from |out[row, head, 0]| = 256 w / (1 + w), w = e^(sigma D)."""
    o = abs(float(out[row, head, 0]))
    if o <= 0 or o >= 256:
        return float("inf") if o >= 256 else float("-inf")
    return math.log(o / (256.0 - o)) / sigma / ULP256


QK_PLACEMENTS = ((1, 575), (3, 544), (1, 300), (2, 511), (5, 130))
QK_MEMBERS = (2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 256, 257, 383, 384, 511, 512, 513, 527, 528, 543, 544)
FRAC_J = tuple(range(20, 32))


def _rounding_class(pos: float, neg: float) -> str:
    near = {"+1": 1.0, "0": 0.0, "0.75": 0.75, "-1": -1.0, "-0.75": -0.75}
    p, _ = _classify(pos, near, 0.12)
    n, _ = _classify(neg, near, 0.12)
    table = {("+1", "-1"): "nearest", ("0", "0"): "toward_zero", ("0", "-1"): "down", ("+1", "0"): "up", ("0.75", "-0.75"): "exact"}
    return table.get((p, n), f"unclear ({pos:+.3f}, {neg:+.3f})")


def probe_qk_accumulation(ctx: Context) -> list[Evidence]:
    """Three QK probes in one call each: rounding (the triple at 5 placements, both signs), the
    fraction bits kept below the largest term (256, 256 * 2^-j, -256 in dims 0, 1, 2 for j = 20..31,
    K's block scale chosen so that a surviving term always weighs e against 1) and instruction
    membership (dims 0, 1 and p summed before a rounding?)."""
    sigma = 2.0**15
    rnd = Evidence("qk_rounding", "QK accumulator rounding (nearest / toward zero / none in f32)", "")
    call = Call(heads=1, softmax_scale=sigma)
    for small_dim, far_dim in QK_PLACEMENTS:
        for sign in (1.0, -1.0):
            _qk_triple(call, sign, small_dim, far_dim)
    out, _ = ctx.run(call)
    classes = []
    for i, (small_dim, far_dim) in enumerate(QK_PLACEMENTS):
        pos = _qk_diff_ulps(out, 2 * i, 0, sigma)
        neg = _qk_diff_ulps(out, 2 * i + 1, 0, sigma)
        classes.append(_rounding_class(pos, neg))
        rnd.observed += f"dims (0, {small_dim}, {far_dim}): {pos:+.3f} / {neg:+.3f} ulp; "
    rnd.problem = "q.K = 256 + 0.75 ulp - 256 (and negated) at 5 placements of the small and the cancelling term"
    rnd.candidates = {
        "nearest": "+1 / -1 ulp",
        "toward_zero": "0 / 0",
        "down": "0 / -1",
        "exact (one fused sum, or f64)": "+0.75 / -0.75",
    }
    rounded = {c for c in classes if c != "exact"}
    if not rounded and classes:
        rnd.matched, rnd.decision = ["exact"], "exact"
    elif len(rounded) == 1 and next(iter(rounded)) in ("nearest", "toward_zero"):
        rnd.decision = next(iter(rounded))
        rnd.matched = [rnd.decision]
    rnd.margin = "per placement: " + ", ".join(classes)

    frac = Evidence("qk_fraction_bits", "QK: bits kept below the largest term before the sum rounds (F)", "")
    sigma_f = 2.0**23
    call = Call(heads=1, softmax_scale=sigma_f)
    for j in FRAC_J:
        # K's block-0 scale 2^(j - 31) makes the surviving small product 2^-23 on every row
        a = call.key(Key())
        kb = Key().set_k(0, 256.0, 2.0 ** (j - 31)).set_k(1, 2.0 ** (22 - j)).set_k(2, -256.0)
        call.row([a, call.key(kb)], _q({0: 1.0, 1: 2.0**-14, 2: 1.0}), tag=j)
    out, _ = ctx.run(call)
    survived = {}
    for r, j in enumerate(FRAC_J):
        big = 256.0 * 2.0 ** (j - 31)
        o = float(out[r, 0, 0])
        survived[j] = abs(o - big * math.e / (1 + math.e)) < abs(o - big / 2)
    kept = [j for j in FRAC_J if survived[j]]
    f_obs = max(kept) if kept else None
    monotone = f_obs is not None and all(survived[j] == (j <= f_obs) for j in FRAC_J)
    frac.problem = "q.K = 256 s + 256 s 2^-j - 256 s (dims 0, 1, 2; s = 2^(j-31)), j = 20..31; softmax_scale 2^23"
    frac.candidates = {
        "F bits": "the small term survives for j <= F",
        "sequential f32": "F = 23",
        "fused, MMA-Sim Hopper": "F = 25",
        "f64": "F >= 31",
    }
    frac.observed = f"survives for j in {kept}"
    if monotone:
        frac.matched, frac.decision = [f"F = {f_obs}{'+' if f_obs == FRAC_J[-1] else ''}"], f_obs

    mem = Evidence("qk_instruction", "QK: which dims are summed with dims 0 and 1 before a rounding (instruction block)", "")
    call = Call(heads=1, softmax_scale=sigma)
    for p in QK_MEMBERS:
        _qk_triple(call, 1.0, 1, p)
    out, _ = ctx.run(call)
    members = []
    for i, p in enumerate(QK_MEMBERS):
        d = _qk_diff_ulps(out, i, 0, sigma)
        if abs(d - 0.75) < 0.12:
            members.append(p)
    mem.problem = f"q.K = 256 + 0.75 ulp (dims 0, 1) - 256 at dim p, p in {list(QK_MEMBERS)}"
    mem.candidates = {"contiguous blocks of B": "members = {p < B}", "sequential": "no member", "other": "any other set"}
    mem.observed = f"members: {members}"
    block = _contiguous_block(members, QK_MEMBERS, 576)
    mem.decision = block
    mem.matched = [f"contiguous B = {block}" if block and block > 1 else ("sequential (no member)" if block == 1 else "non-contiguous")]
    ctx.decided.update(qk_rounding=rnd.decision, qk_fraction_bits=frac.decision, qk_block=block)
    return [rnd, frac, mem]


def _contiguous_block(members: Sequence[int], sample: Sequence[int], length: int) -> int | None:
    """B when members are exactly the sampled positions below B (B a power of two, 1 when none);
    None for a non-contiguous pattern."""
    if not members:
        return 1
    top = max(members)
    b = 1
    while b <= top:
        b *= 2
    expect = [p for p in sample if p < b]
    if sorted(members) == expect and all(p >= b for p in sample if p not in members):
        return min(b, length)
    return None


# ------------------------------------------------------------------------------------ PV accumulation


def _pv_row(call: Call, zero: int, sign: float, positions: dict[int, tuple[float, float]], length: int) -> int:
    """A row of keys of score 0 (q = 0), `length` rounded up to a power of two (so a kernel that
    normalises P first multiplies every V by the exact 1 / n): key i has V[0] = code * scale from
    `positions`, the others the shared zero record."""
    length = 1 << max(0, (length - 1).bit_length())
    ids = [zero] * length
    for pos, (code, scale) in positions.items():
        k = Key()
        k.codes[0] = sign * code
        k.scales[:] = scale
        ids[pos] = call.key(k)
    return call.row(ids, _q({}))


PV_PLACEMENTS = ((1, 299), (3, 200), (1, 130), (2, 64))
PV_MEMBERS = (2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256)


def pv_limits(split: object) -> int | None:
    """The longest PV probe row that stays in one pass, from the split probe's decision: rows the
    kernel splits go through its lse merge, whose f32 roundings would hide the accumulator's. None:
    no row is safe (every row merged), so the PV probes do not run."""
    if not isinstance(split, dict):
        return None  # the split probe did not decide: no row is known to stay in one pass
    if split.get("rows") == "never":
        return 1 << 20
    if split.get("rows") == "above" and split.get("min_keys", 0) >= 16:
        return 1 << (int(split["min_keys"]).bit_length() - 1)  # a power of two, at most min_keys
    return None


def probe_pv_accumulation(ctx: Context) -> list[Evidence]:
    """The triple over keys of equal score: V = +256 (key 0), 0.75 ulp (key b: code 3*2^-9,
    scale 2^-8), -256 (key p); out[0] = (sum) / n exactly once the sum is known. Rounding (4
    placements, both signs), fraction bits (256 + 2^(8-j) - 256 over keys 0, 1, 2) and membership.
    Rows stay within the length the split probe found unsplit (`pv_limits`)."""
    limit = pv_limits(ctx.decided.get("split"))
    if limit is None:
        raise ProbeSkipped("every row goes through the kernel's lse merge: the PV accumulator's rounding is not observable")
    placements = [(b, p) for b, p in PV_PLACEMENTS if p < limit] or [(1, limit - 1), (3, limit // 2 + 1)]
    member_sample = [p for p in PV_MEMBERS if p < limit]
    rnd = Evidence("pv_rounding", "PV accumulator rounding (nearest / toward zero / none in f32)", "")
    call = Call(heads=1, softmax_scale=1.0)
    zero = call.key(Key())
    lengths = []
    for b, p in placements:
        for sign in (1.0, -1.0):
            _pv_row(call, zero, sign, {0: (256.0, 1.0), b: (SMALL_CODE, 2.0**-8), p: (-256.0, 1.0)}, p + 1)
            lengths.append(1 << p.bit_length())
    out, _ = ctx.run(call)
    classes = []
    for i, (b, p) in enumerate(placements):
        pos = float(out[2 * i, 0, 0]) * lengths[2 * i] / ULP256
        neg = float(out[2 * i + 1, 0, 0]) * lengths[2 * i + 1] / ULP256
        classes.append(_rounding_class(pos, neg))
        rnd.observed += f"keys (0, {b}, {p}): {pos:+.3f} / {neg:+.3f} ulp; "
    rnd.problem = f"sum over keys of P V = 256 + 0.75 ulp - 256 (and negated), scores equal, placements {placements}"
    rnd.candidates = {"nearest": "+1 / -1 ulp", "toward_zero": "0 / 0", "down": "0 / -1", "exact": "+0.75 / -0.75"}
    rounded = {c for c in classes if c != "exact"}
    if not rounded and classes:
        rnd.matched, rnd.decision = ["exact"], "exact"
    elif len(rounded) == 1 and next(iter(rounded)) in ("nearest", "toward_zero"):
        rnd.decision = next(iter(rounded))
        rnd.matched = [rnd.decision]
    rnd.margin = "per placement: " + ", ".join(classes)

    frac = Evidence("pv_fraction_bits", "PV: bits kept below the largest term before the sum rounds (F)", "")
    call = Call(heads=1, softmax_scale=1.0)
    zero = call.key(Key())
    for j in FRAC_J:
        _pv_row(call, zero, 1.0, {0: (256.0, 1.0), 1: (1.0, 2.0 ** (8 - j)), 2: (-256.0, 1.0)}, 3)
    out, _ = ctx.run(call)
    kept = [j for r, j in enumerate(FRAC_J) if abs(float(out[r, 0, 0]) * 4 - 2.0 ** (8 - j)) <= 2.0 ** (8 - j) * 0.01]
    f_obs = max(kept) if kept else None
    monotone = f_obs is not None and kept == [j for j in FRAC_J if j <= f_obs]
    frac.problem = "sum over keys 0, 1, 2 (of 4) of V = 256 + 2^(8-j) - 256, j = 20..31 (scores equal)"
    frac.candidates = {"F bits": "the small term survives for j <= F", "sequential f32": "F = 23", "f64": "F >= 31"}
    frac.observed = f"survives for j in {kept}"
    if monotone:
        frac.matched, frac.decision = [f"F = {f_obs}"], f_obs

    mem = Evidence("pv_instruction", "PV: which keys are summed with keys 0 and 1 before a rounding (instruction block)", "")
    call = Call(heads=1, softmax_scale=1.0)
    zero = call.key(Key())
    for p in member_sample:
        _pv_row(call, zero, 1.0, {0: (256.0, 1.0), 1: (SMALL_CODE, 2.0**-8), p: (-256.0, 1.0)}, p + 1)
    out, _ = ctx.run(call)
    members = [p for i, p in enumerate(member_sample) if abs(float(out[i, 0, 0]) * (1 << p.bit_length()) / ULP256 - 0.75) < 0.12]
    mem.problem = f"sum over keys of V = 256 (key 0) + 0.75 ulp (key 1) - 256 (key p), p in {member_sample}"
    mem.candidates = {"contiguous blocks of B keys": "members = {p < B}", "sequential": "no member", "other": "any other set"}
    mem.observed = f"members: {members}"
    block = _contiguous_block(members, member_sample, 1 << 20)
    if block is not None and block >= limit:
        block = None  # the whole sampled row shares one instruction: its size is not known
    mem.decision = block
    mem.matched = [f"contiguous B = {block}" if block and block > 1 else ("sequential (no member)" if block == 1 else "non-contiguous")]
    ctx.decided.update(pv_rounding=rnd.decision, pv_fraction_bits=frac.decision, pv_block=block)
    return [rnd, frac, mem]


# ------------------------------------------------------------------------------------ row splitting

SPLIT_LENGTHS = (2, 16, 64, 65, 96, 128, 129, 192, 256, 1024)
SPLIT_LENGTHS_LONG = (4096, 8192)


def probe_split(ctx: Context, lengths: Sequence[int] = SPLIT_LENGTHS) -> Evidence:
    """Rows of n copies of one key (duplicates: equal scores, so out = V exactly in any unsplit
    order, V being bf16-exact and the sums' relative error below 2^-9) at |lse| about 4.6e5 to
    8.9e5 (head h: q[0] = 8 + h / 2 against K[0] = 57344): a merge of two or more partitions
    through f32 lse values carries up to 2^-4 of absolute error per lse there, which moves out off
    V by a few percent (partitions of equal size merge exactly: lengths like 65 and 96 give
    unequal ones). A single partition merges exactly. Each length runs alone (one row: the
    schedulers split most), then all together (short rows padded to the batch's longest)."""
    ev = Evidence("split", "does the kernel split a row into partials merged through lse (the lse-magnitude effect)", "")
    heads = min(ctx.heads, 8)
    key = Key()
    key.codes[0] = 448.0
    gen = torch.Generator().manual_seed(19)
    key.codes[1:] = (1 + torch.randint(0, 7, (511,), generator=gen)).double() * torch.where(torch.rand(511, generator=gen) < 0.5, -1.0, 1.0)
    key.scales[:] = 128.0
    q = torch.zeros(heads, HEAD_DIM, dtype=torch.float64)
    q[:, 0] = 8.0 + torch.arange(heads, dtype=torch.float64) / 2
    v = round_to(key.latent(), "bf16", "rn")
    deviating, clean, skipped = [], [], []
    worst = 0.0
    for n in lengths:
        call = Call(heads=heads, softmax_scale=1.0)
        k = call.key(key)
        call.row([k] * n, q, tag=n)
        try:
            out, _ = ctx.run(call)
        except ProbeSkipped as why:
            skipped.append((n, str(why)))
            continue
        rel = float(((out[0] - v).abs() / v.abs().clamp_min(1e-30)).max())
        worst = max(worst, rel)
        (deviating if rel > 0 else clean).append(n)
        ctx.log(f"  split: {n} keys alone: max relative deviation from V {rel:.3g}")
    call = Call(heads=heads, softmax_scale=1.0)
    k = call.key(key)
    batch = [n for n in lengths if n not in [s for s, _ in skipped]]
    total = 0
    for n in batch:
        if total + n > 8192:
            break
        call.row([k] * n, q, tag=n)
        total += n
    batched_dev = []
    try:
        out, _ = ctx.run(call)
        for i, n in enumerate(call.tags):
            if bool((out[i] != v).any()):
                batched_dev.append(n)
    except ProbeSkipped as why:
        skipped.append(("batch", str(why)))
    ev.problem = f"rows of n duplicates of one key at |lse| ~ 4.6e5..8.9e5, n in {list(lengths)}, alone and batched"
    ev.candidates = {
        "never split": "out = V exactly at every length",
        "split (merge in f32)": "out off V by up to a few percent at some length",
    }
    ev.observed = f"deviating alone at n = {deviating}, batched at n = {batched_dev}; exact at n = {clean}; worst relative {worst:.3g}"
    if skipped:
        ev.observed += f"; skipped {[s for s, _ in skipped]}"
    seen = sorted(set(deviating) | set(batched_dev))
    if not seen:
        ev.matched, ev.decision = ["never split"], {"rows": "never"}
    else:
        ev.matched = ["split (merge in f32)"]
        shortest = min(seen)
        below = [n for n in clean if n < shortest]
        # "above N" says rows of more than N keys *may* split: a clean length above the shortest
        # split one (equal partitions can merge exactly) does not contradict it
        if below:
            ev.decision = {"rows": "above", "min_keys": max(below)}
        else:
            ev.decision = {"rows": "any"}
    ev.margin = f"largest deviation {worst:.3g} (a bf16 ulp is 2^-8 = 3.9e-3 relative)"
    return ev


# ------------------------------------------------------------------------------------ lse, scale cap


def probe_lse(ctx: Context) -> Evidence:
    """One key per row (l = P exactly): lse must be the score z in natural log; candidates: base e,
    base 2 (z log2 e), a missing shift (z + 8 ln 2). Also the relative error at |z| up to 1e4."""
    ev = Evidence("lse", "lse base and precision", "")
    call = Call(heads=1, softmax_scale=1.0)
    zs = []
    for a, b in ((0.5, 1.0), (3.0, 1.0), (-7.0, 1.0), (100.0, 1.0), (96.0, 104.0), (-120.0, 80.0)):
        k = Key()
        k.rope[0] = b
        call.row([call.key(k)], _q({512: a}))
        zs.append(a * b)
    _, lse = ctx.run(call)
    z = torch.tensor(zs, dtype=torch.float64)
    obs = lse[:, 0]
    cands = {"e": z, "2": z / LN2, "e, shift missing": z + 8 * LN2}
    for name, pred in cands.items():
        rel = float(((obs - pred).abs() / (pred.abs() + 1)).max())
        ev.candidates[f"base {name}"] = f"max |lse - pred| / (|pred| + 1) = {rel:.3g}"
        if rel < 2.0**-16:
            ev.matched.append(name)
    err = float(((obs - z).abs() / z.abs()).max())
    ev.problem = f"one key per row, scores {zs}"
    ev.observed = f"lse = {[round(float(x), 6) for x in obs]}"
    ev.decision = {"base": ev.matched[0] if ev.matched else None, "max_rel_err": err}
    ev.margin = f"relative error against base e: {err:.3g}"
    return ev


def probe_scale_cap(ctx: Context) -> Evidence:
    """One key (P = 1), V[0] = 1 x scale for scale = 2^6 .. 2^16: out = scale, or the cap."""
    ev = Evidence("scale_cap", "the largest KV scale the PV product honours", "")
    call = Call(heads=1, softmax_scale=1.0)
    scales = (2.0**6, 2.0**7, 2.0**8, 2.0**10, 2.0**16)
    for s in scales:
        k = Key()
        k.codes[0] = 1.0
        k.scales[:] = s
        call.row([call.key(k)], _q({}))
    out, _ = ctx.run(call)
    honoured = [s for i, s in enumerate(scales) if float(out[i, 0, 0]) == s]
    ev.problem = f"one key, V[0] = scale, scale in {[int(s) for s in scales]}"
    ev.candidates = {"no cap": "out = scale", "cap C": "out = min(scale, C)"}
    ev.observed = f"out[0] = {[float(out[i, 0, 0]) for i in range(len(scales))]}"
    if len(honoured) == len(scales):
        ev.matched, ev.decision = ["no cap"], "none"
    else:
        first_bad = next(i for i, s in enumerate(scales) if s not in honoured)
        if first_bad > 0 and all(s in honoured for s in scales[:first_bad]):
            cap = scales[first_bad - 1]
            if all(float(out[i, 0, 0]) == cap for i in range(first_bad, len(scales))):
                ev.matched, ev.decision = [f"cap {int(cap)}"], cap
    return ev
