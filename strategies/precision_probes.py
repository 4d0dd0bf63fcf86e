"""Directed precision probes: small problems built so that one rounding step decides the verdict.

Random recipes hide a rounding-mode defect under the other error terms (the QK accumulation
budget, the bf16 output rounding, errors of both signs that cancel over keys). A probe makes those
terms negligible and puts one step where a rounding coarser than the profile declares, or in the
wrong direction, leaves the bound. Each probe's docstring names the step it isolates and why the
other terms of the bound (oracle.bound, TOLERANCES.md) are negligible on it; `tests/strategies/test_precision_probes.py`
checks those claims (exact scores, P's position in its fp16 interval, the terms' shares of the
bound). Most probes use softmax_scale = ln 2, so c_log2 = f32(ln 2 log2 e) = 1 and the exp2
argument is the score itself, and put the scores in the rope dims (bf16 x bf16 products, exact in
f32; with at most two nonzero products per dot, and a sum exactly representable in f32, every
summation order and rounding gives the exact score).

- `p_rounding_probe`: three keys; q has three nonzero rope values (so the QK budget counts 2
  products), softmax_scale = ln 2 (c_log2 = 1): key A has score 0 (P = 2^8) and zero latent, key B
  has score -(1 - 1.40625 c_h 2^-10), so P_B = 128 + 0.1219 c_h: 0.73 to 0.97 of an fp16 ulp above
  128 (c_h in [0.75, 1)). Round to nearest gives 128.125, toward zero 128: up to a 2^-10 relative
  error where the bound allows 2^-11; the heads' different l and key B's 512 latent values make
  some outputs cross a bf16 midpoint; a third key C of zero latent and score -t (t in [0, 1] per
  row and head) spreads l over [384, 512).
- `p_rounding_many_keys_probe`: the same P position on many equal-score keys with random positive
  values: every P' errs the same way, and the out elements (sums over keys) sample the bf16 grid.
- `equal_scores_probe`: thousands of equal terms in l.
- `growing_max_probe`: scores increasing along the row, so the online softmax rescales o and l at
  every tile.
- `rope_scores_probe`: scores from the rope dims only.
- `q_lo_probe`: Q blocks whose lo part needs both mantissa bits a bf16 residual can have.

`PROBES` lists them for the suite property (conformance/suite/test_precision_probes.py): name ->
`Probe` (a builder taking seed, heads and a size, and the sizes to draw). Probes return
`strategies.materialize.Problem`s on the CPU (`to_device` moves one); their recipe field is a
placeholder naming the shape and seed: a probe is not a recipe and is not replayed from the
corpus.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernel.record import encode_records
from strategies.materialize import Problem
from strategies.recipe import Recipe

LN2 = math.log(2.0)


def _problem(
    seed: int, q: torch.Tensor, records: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor, softmax_scale: float = LN2
) -> Problem:
    """A Problem over `records` with every row's keys valid, lse requested, no out=."""
    lengths = tuple(int(x) for x in (indptr[1:] - indptr[:-1]))
    return Problem(
        recipe=Recipe(seed=seed, n_q=q.shape[0], heads=q.shape[1], row_lengths=lengths, cache_rows=records.shape[0]),
        q=q,
        kv_cache=records,
        indices=indices.to(torch.int32),
        indptr=indptr.to(torch.int32),
        softmax_scale=softmax_scale,
        has_invalid=False,
        return_lse=True,
        out=None,
        referenced_rows=torch.unique(indices.to(torch.int64)),
        poison_rows=torch.zeros(0, dtype=torch.int64),
    )


def to_device(problem: Problem, device: torch.device | str) -> Problem:
    """The probe with its tensors on `device` (bit-identical: built on the CPU and moved)."""
    return dataclasses.replace(
        problem,
        q=problem.q.to(device),
        kv_cache=problem.kv_cache.to(device),
        indices=problem.indices.to(device),
        indptr=problem.indptr.to(device),
    )


def _signs(n: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    return torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)


def p_rounding_probe(seed: int = 0, heads: int = 16, n_q: int = 16) -> Problem:
    """The three-key P' rounding probe (module docstring); `seed` draws key B's latent values.

    Isolates P' = fp16(P * scale_v): each of the n_q x heads (row, head) pairs gets its own c in
    [0.75, 1), P_B 0.73 to 0.97 of an fp16 ulp above 128, so a correct rounding errs by at most
    0.27 ulp and any rounding with an error above half an ulp (toward zero, a narrower format)
    errs by more than the bound's 2^-11. The scores are exact in every order (two rope products
    of bf16 values whose sum fits f32), so the QK term is 12 roundings of 2^-24 on |s| <= 1; the
    softmax-stage terms are ~2^-20; the exp2 argument 7 + 0.00137 c is rounded at 2^-21 and exp2
    errs by 2^-23, which moves P_B by 3e-5 of an fp16 ulp: no correct kernel crosses a rounding
    boundary. out = P'_B v_B / l, so out's relative error is P'_B's; the outputs' mantissas
    spread over the (row, head) pairs, so some cross bf16 midpoints."""
    gen = torch.Generator().manual_seed(seed)
    latent = torch.zeros(3, 512)
    latent[1] = (1 + torch.rand(512, generator=gen)) * torch.where(torch.rand(512, generator=gen) < 0.5, -1.0, 1.0)
    rope = torch.zeros(3, 64, dtype=torch.bfloat16)
    rope[1, 0] = -1.0
    rope[1, 1] = 1.40625
    rope[2, 2] = -1.0  # key C: zero latent, score -t (t per (row, head)): spreads l over [384, 512)
    records = encode_records(latent, rope, "pow2")
    q = torch.zeros(n_q, heads, 576, dtype=torch.bfloat16)
    q[:, :, 512] = 1.0
    # (row, head) k: P_B = 128 + 0.1219 c_k, c_k = 0.75 + k / (4 n_q heads): bf16 values in [0.75, 1)
    c = 0.75 + torch.arange(n_q * heads, dtype=torch.float64).view(n_q, heads) / (4 * n_q * heads)
    q[:, :, 513] = (2.0**-10 * c).to(torch.bfloat16)
    q[:, :, 514] = torch.rand(n_q, heads, generator=gen).to(torch.bfloat16)
    return _problem(seed, q, records, torch.tensor([0, 1, 2] * n_q), torch.arange(0, 3 * n_q + 1, 3))


def p_rounding_many_keys_probe(n_keys: int, seed: int = 0, heads: int = 16, n_q: int = 1) -> Problem:
    """Many equal scores whose P' all sit high in their fp16 rounding interval.

    Key A (score 0, zero latent, P = 2^8) fixes the running max; the n_keys - 1 keys B share key
    B's rope of `p_rounding_probe` (score -(1 - 1.40625 c 2^-10), P_B 0.73 to 0.97 of an fp16 ulp
    above 128, c in [0.75, 1) per (row, head)) and have random positive latent values in [1, 2)
    (scale 2^-7, codes 128..240). So every P'_B rounds the same way: a rounding mode erring by
    more than half an ulp (toward zero) gives a one-signed bias of up to 2^-10 of out, where
    random scores would spread P over its interval and the errors would partly cancel. Positive
    values keep |out| = sum p |v|, the quantity the bound's P term scales with (no cancellation
    in out), and each out element sums different codes, so the 512 x heads x n_q elements sample
    the bf16 rounding grid. Other terms, as in `p_rounding_probe`: QK 12 roundings of |s| <= 1,
    the softmax stage ~2^-20, the PV accumulation (at most 2 tiles of 272 roundings of 2^-24)
    3% of the P term; key A's zero values give v_range <= 2, times tanh(w/4) ~ 1e-6."""
    if n_keys < 2:
        raise ValueError("n_keys must be at least 2 (key A and one key B)")
    gen = torch.Generator().manual_seed(seed)
    latent = 1 + torch.rand(n_keys, 512, generator=gen)
    latent[0] = 0.0
    rope = torch.zeros(n_keys, 64, dtype=torch.bfloat16)
    rope[1:, 0] = -1.0
    rope[1:, 1] = 1.40625
    records = encode_records(latent, rope, "pow2")
    q = torch.zeros(n_q, heads, 576, dtype=torch.bfloat16)
    q[:, :, 512] = 1.0
    k = torch.arange(n_q * heads, dtype=torch.float64).view(n_q, heads)
    c = 0.75 + (k + torch.rand(n_q, heads, generator=gen, dtype=torch.float64)) / (4 * n_q * heads)
    q[:, :, 513] = (2.0**-10 * c).to(torch.bfloat16)
    indices = torch.arange(n_keys).repeat(n_q)
    return _problem(seed, q, records, indices, torch.arange(0, n_keys * n_q + 1, n_keys))


def equal_scores_probe(n_keys: int, seed: int = 0, heads: int = 1) -> Problem:
    """Thousands of equal terms in l: one key of score 0 and n_keys - 1 keys of equal score
    -(1 + h/16) 2^-7 for head h (q = (1 + h/16) e_rope0, softmax_scale = ln 2): l sums n_keys
    equal P = 2^(8 - (1 + h/16) 2^-7), about 254.6, a long mantissa, so every addition rounds once
    l is large, while the QK budget counts one exact product (score error <= 2 roundings of
    2^-24 on |s| <= 2^-6) and every key's softmax-stage error is ~2^-20: l's accumulation
    model (its partial sums, their order and rounding) alone decides the lse verdict. The
    latent values are random normal (out is judged as everywhere); 256 distinct records."""
    gen = torch.Generator().manual_seed(seed)
    rows = min(n_keys, 256)
    latent = torch.randn(rows, 512, generator=gen)
    rope = torch.zeros(rows, 64, dtype=torch.bfloat16)
    rope[1:, 0] = -(2.0**-7)
    records = encode_records(latent, rope, "pow2")
    indices = torch.cat((torch.zeros(1, dtype=torch.int64), torch.randint(1, rows, (n_keys - 1,), generator=gen, dtype=torch.int64)))
    q = torch.zeros(1, heads, 576, dtype=torch.bfloat16)
    q[0, :, 512] = (1 + torch.arange(heads) / 16).to(torch.bfloat16)
    return _problem(seed, q, records, indices, torch.tensor([0, n_keys]))


def _split_bf16(target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, c) bf16 values (as f64) with a + 2^-8 b + 2^-16 c == target, for targets on the
    2^-16 grid of magnitude <= 4 (a takes the top 8 bits, b the next 8, c the rest)."""
    a = target.to(torch.bfloat16).double()
    b = ((target - a) * 2.0**8).to(torch.bfloat16).double()
    c = ((target - a - b * 2.0**-8) * 2.0**16).to(torch.bfloat16).double()
    assert bool((a + b * 2.0**-8 + c * 2.0**-16 == target).all())
    return a, b, c


def growing_max_probe(n_keys: int, seed: int = 0, heads: int = 4) -> Problem:
    """Scores increasing along the row: every tile's max exceeds the running max, so the online
    softmax rescales o and l (alpha = exp2(m_old - m_new)) at every tile boundary.

    Key j has rope (a_j, b_j, c_j) with a_j + 2^-8 b_j + 2^-16 c_j = t_j, t_j = 4 (j / (n_keys - 1)
    - 1) on the 2^-16 grid; head h has q rope (1, 2^-8, 2^-16) (1 + h/8), so its scores (log2
    units, c_log2 = 1) rise from -4 (1 + h/8) to 0. Each product is exact in f32 and every partial
    sum is a multiple of 2^-19 below 16 in magnitude, so the scores are exact in every order and
    rounding. Every tile keeps a weight >= 2^-11.5 of the last one, so a rescale error reaches l
    and o, and most m_old - m_new (about 0.5 (1 + h/8) per 128 keys, on the 2^-19 grid) are not
    f16 or bf16 values. The bound's rescale terms are (n_tiles - 1)(exp_rel_err + u) + u (z_max -
    z_min), a few 2^-20, and that is what a correct kernel's alpha must meet: an alpha or exp2
    evaluated in a 16-bit format errs by 2^-9 to 2^-12 per rescale, on weights that do not decay.
    QK's budget (3 products) is ~2^-20 of |s|. Latent values are random normal, so the tiles'
    values differ and a reweighting between tiles moves out as well as lse."""
    if n_keys < 2:
        raise ValueError("n_keys must be at least 2")
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(n_keys, 512, generator=gen)
    t = torch.round(4.0 * (torch.arange(n_keys, dtype=torch.float64) / (n_keys - 1) - 1.0) * 2.0**16) * 2.0**-16
    rope = torch.zeros(n_keys, 64, dtype=torch.bfloat16)
    for dim, part in enumerate(_split_bf16(t)):
        rope[:, dim] = part.to(torch.bfloat16)
    records = encode_records(latent, rope, "pow2")
    q = torch.zeros(1, heads, 576, dtype=torch.bfloat16)
    scale = 1 + torch.arange(heads, dtype=torch.float64) / 8
    for dim in range(3):
        q[0, :, 512 + dim] = (scale * 2.0 ** (-8 * dim)).to(torch.bfloat16)
    return _problem(seed, q, records, torch.arange(n_keys), torch.tensor([0, n_keys]))


def rope_scores_probe(n_keys: int, seed: int = 0, heads: int = 4) -> Problem:
    """Scores from the rope dims only: q's latent is zero, so the score of every key is the bf16
    x bf16 rope dot (64 products, exact in f32) and the Q representation and the fp8 MFMA terms
    are zero (a zero product adds exactly in every order; the bound counts nonzero products).
    q and K rope values are random normal bf16 (8 significant bits each), softmax_scale 0.25:
    scores of a few units with a spread, so any error on the rope products (a narrower format
    for q or K rope, a dropped dim) moves the softmax by far more than the QK budget of 136
    roundings of 2^-24 on sum |q||K|, which is the only score term left; latent values
    are random normal (V)."""
    gen = torch.Generator().manual_seed(seed)
    latent = torch.randn(n_keys, 512, generator=gen)
    rope = torch.randn(n_keys, 64, generator=gen).to(torch.bfloat16)
    records = encode_records(latent, rope, "pow2")
    q = torch.zeros(1, heads, 576, dtype=torch.bfloat16)
    q[0, :, 512:] = torch.randn(heads, 64, generator=gen).to(torch.bfloat16)
    return _problem(seed, q, records, torch.arange(n_keys), torch.tensor([0, n_keys]), softmax_scale=0.25)


def q_lo_probe(n_keys: int, seed: int = 0, heads: int = 4) -> Problem:
    """Q blocks whose lo part needs both mantissa bits a bf16 residual can have.

    Every latent q element is +-2^e (1 + m/8 + 7/128), m in 0..7, e such that x = q 2^(127 - s)
    lies in [8, 256) (the block's max in [128, 256)): hi = +-2^e (1 + m/8) (the residual 7/128
    rounds down) and lo = 32 (x - hi) = +-7 2^(e' - 2), significand 1.11b, exactly an e4m3 normal,
    so the gfx950 representation hi + lo / 32 is exact (TOLERANCES.md section 1: |x| >= 2^-7) and
    a lo part with fewer mantissa bits errs by 2^-7 of the element, with the element's sign (1.11b
    rounds away from zero). The keys' latent values share q's sign per dim (one sign pattern for
    every head; magnitudes random), so q . K = sum |q||K| and such errors add up coherently, to
    ~2^-7.5 of the score, against the QK budget of 2216 roundings of 2^-24 (~2^-13) of it. Rope
    is zero; softmax_scale = 8 / sum_d max_h |q_d| 1.5 gives scores of about 1 to 3 (natural
    units), and the keys' magnitudes differ, so the scores spread."""
    gen = torch.Generator().manual_seed(seed)
    sign = _signs((512,), gen)
    m = torch.randint(0, 8, (heads, 512), generator=gen).double()
    e = torch.randint(-5, 0, (heads, 512), generator=gen).double()  # x in [8, 256) for the block max at e = -1
    e[:, ::128] = -1.0  # each block's max: |q| in [2^-1, 2^0): x in [128, 256)
    qv = sign * torch.exp2(e) * (1 + m / 8 + 7 / 128)
    q = torch.zeros(1, heads, 576, dtype=torch.bfloat16)
    q[0, :, :512] = qv.to(torch.bfloat16)
    mag = 0.5 + torch.rand(n_keys, 512, generator=gen)
    latent = sign * mag
    records = encode_records(latent, torch.zeros(n_keys, 64, dtype=torch.bfloat16), "pow2")
    total = float((qv.abs().max(dim=0).values * 1.5).sum())
    return _problem(seed, q, records, torch.arange(n_keys), torch.tensor([0, n_keys]), softmax_scale=8.0 / total)


@dataclass(frozen=True)
class Probe:
    """A probe for the suite property: build(seed, heads, size) -> Problem; sizes: the values of
    `size` the property draws (keys per row, or rows for `p_rounding`)."""

    name: str
    build: Callable[[int, int, int], Problem]
    sizes: tuple[int, ...]


PROBES: dict[str, Probe] = {
    p.name: p
    for p in (
        Probe("p_rounding", lambda seed, heads, size: p_rounding_probe(seed, heads=heads, n_q=size), (16, 8, 4)),
        Probe("p_rounding_many_keys", lambda seed, heads, size: p_rounding_many_keys_probe(size, seed, heads=heads), (64, 16, 200)),
        Probe("growing_max", lambda seed, heads, size: growing_max_probe(size, seed, heads=heads), (640, 300, 1024)),
        Probe("equal_scores", lambda seed, heads, size: equal_scores_probe(size, seed, heads=heads), (2048, 1024, 4096)),
        Probe("rope_scores", lambda seed, heads, size: rope_scores_probe(size, seed, heads=heads), (64, 1, 256)),
        Probe("q_lo", lambda seed, heads, size: q_lo_probe(size, seed, heads=heads), (64, 1, 256)),
    )
}
