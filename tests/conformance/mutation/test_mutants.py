"""The broken-kernel catalogue (conformance.mutation.catalogue): each mutant is caught, and is minimal.

For every mutant:
- a kill case: a problem on which the unbroken emulated kernel passes the gfx950 oracle (bound in
  "exact-steps" mode, or an exact check) and the mutant fails it;
- a spare case: a problem outside its bug class on which the mutant agrees bit for bit with the
  emulated kernel (so the mutant is the minimal change it claims).
Every kernel call gets freshly materialized tensors (a preallocated out is filled by the call).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from conformance.judging.harness import call_kernel
from conformance.mutation import catalogue as mutants
from kernel.backend import Backend
from kernel.emulated import gfx950 as emulated
from kernel.record import RECORD_BYTES, ROPE_OFFSET, SCALE_OFFSET, encode_records
from kernel.registry import resolve
from oracle.bound import evaluate
from oracle.profiles import GFX950
from strategies.materialize import Problem, materialize
from strategies.recipe import ROWS_BEYOND_4GIB, Recipe
from tests.recipes import tiny

EMULATED = emulated.emulated_backend()
BASE: dict[str, object] = {"seed": 3, "n_q": 3, "heads": 2, "row_lengths": (150, 90, 260), "cache_rows": 2000}
SHORT_ROWS = (128, 77, 0)  # at most one tile per row


@functools.cache
def recipe(**changes: object) -> Callable[[], Problem]:
    """A builder materialising BASE with `changes` (one builder per set of changes, so results
    of the emulated kernel are shared between cases through the caches below)."""
    fields = {**BASE, **changes}
    if "row_lengths" in changes:
        fields["n_q"] = len(fields["row_lengths"])  # type: ignore[arg-type]
    built = Recipe(**fields)  # type: ignore[arg-type]
    return lambda: materialize(built)


def edited(build: Callable[[], Problem], edit: Callable[[Problem], Problem | None]) -> Callable[[], Problem]:
    """A builder applying `edit` (in place, or returning a new Problem) to what `build` makes."""

    def make() -> Problem:
        problem = build()
        return edit(problem) or problem

    return make


# ---------------------------------------------------------------------------------------------
# Judging: the gfx950 oracle and exact checks.


def failures(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None, *, check_out: bool = True) -> list[str]:
    """What the oracle finds wrong with (out, lse) on `problem` (empty list: conformant).

    Rows with no valid key must give out exactly 0 and lse exactly -inf; elsewhere out and lse
    must be finite and within the gfx950 a-priori bound of the exact-steps reference."""
    ev = evaluate(
        problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=GFX950, has_invalid=problem.has_invalid
    )
    found: list[str] = []
    empty = torch.isneginf(ev.lse)  # [n_q, H]
    out64 = out.to(torch.float64)
    if check_out:
        if bool((out64[empty] != 0).any()) or bool(torch.isnan(out64[empty]).any()):
            found.append("empty row: out is not exactly 0")
        full = ~empty
        if not bool(torch.isfinite(out64[full]).all()):
            found.append("non-finite out where the reference is finite")
        excess = (out64 - ev.out).abs() > ev.out_bound
        if bool((excess | ~torch.isfinite(out64))[full].any()):
            found.append("out outside the bound")
    if lse is not None:
        lse64 = lse.to(torch.float64)
        if not bool(torch.isneginf(lse64[empty]).all()):
            found.append("empty row: lse is not -inf")
        full = ~empty
        bad = ~torch.isfinite(lse64) | ((lse64 - ev.lse).abs() > ev.lse_bound)
        if bool(bad[full].any()):
            found.append("lse outside the bound")
    return found


def nonfinite_out(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None) -> list[str]:
    """Exact check under scale > 2^7 (no bound is promised there): out must stay finite."""
    return [] if bool(torch.isfinite(out).all()) else ["non-finite out under a scale above 2^7"]


def floor_scales(problem: Problem) -> Problem:
    """The problem with every record scale's mantissa dropped (its pow2 floor)."""
    kv = problem.kv_cache.clone()
    bits = kv[..., SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.int32) & 0x7F800000
    kv[..., SCALE_OFFSET:ROPE_OFFSET] = bits.view(torch.uint8).reshape(*kv.shape[:-1], 16)
    return dataclasses.replace(problem, kv_cache=kv)


def mantissa_dropped_lse(problem: Problem, out: torch.Tensor, lse: torch.Tensor | None) -> list[str]:
    """The emulated kernel's documented behaviour on non-pow2 scales: QK uses each scale's
    exponent only, so its lse is the lse of the cache with the mantissas dropped (V keeps the full
    scale, so only lse is judged)."""
    return failures(floor_scales(problem), out, lse, check_out=False)


Judge = Callable[[Problem, torch.Tensor, "torch.Tensor | None"], list[str]]


# ---------------------------------------------------------------------------------------------
# Hand-built problems.


def _with_q(transform: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Problem], None]:
    def edit(problem: Problem) -> None:
        problem.q.copy_(transform(problem.q.to(torch.float32)).to(torch.bfloat16))

    return edit


def _pow2_q(q: torch.Tensor) -> torch.Tensor:
    """q rounded to signed powers of two in [2^-3, 2]: exact in Q's fp8 hi part (lo = 0)."""
    exponent = torch.log2(q.abs().clamp_min(2.0**-3)).round().clamp(-3, 1)
    return torch.sign(q) * torch.exp2(exponent)


def _only_first_valid(row: int) -> Callable[[Problem], None]:
    """Row `row` keeps its first entry; the rest become -1 (its last valid position is 0)."""

    def edit(problem: Problem) -> None:
        begin, end = int(problem.indptr[row]), int(problem.indptr[row + 1])
        problem.indices[begin + 1 : end] = -1

    return edit


def _periodic_stream(problem: Problem) -> None:
    """Every row's slice (and the one after the last) holds the first row's entries."""
    length = int(problem.indptr[1] - problem.indptr[0])
    problem.indices = problem.indices[:length].repeat(problem.q.shape[0] + 1).contiguous()


def p_rounding_problem() -> Problem:
    """One row, one head, two keys whose P' needs f16 precision and whose V cancel.

    q . K is set through the rope only: key A scores 0 (P = 2^8), key B scores -1 with
    softmax_scale * log2(e) = 8 - log2(250.5), so P_B = 250.5 (exact in f16, a tie in bf16). V_A =
    +1 and V_B = -1 in every dim: out = (P_A - P_B) / (P_A + P_B) is small, so a 2^-9 relative
    error of P_B' is several times the f16 rounding the bound allows."""
    base = materialize(tiny(seed=0))
    latent = torch.stack((torch.ones(512), -torch.ones(512)))
    rope = torch.zeros(2, 64, dtype=torch.bfloat16)
    rope[1, 0] = -1.0
    kv = torch.zeros(4, RECORD_BYTES, dtype=torch.uint8)
    kv[1:3] = encode_records(latent, rope, "pow2")
    q = torch.zeros(1, 1, 576, dtype=torch.bfloat16)
    q[0, 0, 512] = 1.0
    scale = (8.0 - math.log2(250.5)) / math.log2(math.e)
    return dataclasses.replace(base, q=q, kv_cache=kv, indices=torch.tensor([1, 2], dtype=torch.int32), softmax_scale=scale)


# ---------------------------------------------------------------------------------------------
# The cases: name -> (kill builder, judge) and name -> spare builder.

KILL: dict[str, tuple[Callable[[], Problem], Judge]] = {
    "offset32": (
        recipe(row_lengths=(40, 70), heads=1, cache_rows=ROWS_BEYOND_4GIB + 4096, index_pattern="beyond_4gib"),
        failures,
    ),
    "row_begin_off_by_one": (recipe(), failures),
    "invalid_unmasked": (recipe(has_invalid=True, invalid_pattern="scattered", invalid_permille=200, poison=True), failures),
    "tail_unmasked": (recipe(), failures),
    "last_valid_off_by_one": (edited(recipe(has_invalid=True), _only_first_valid(1)), failures),
    "masked_v_not_zeroed": (recipe(poison=True), failures),
    "tile_stride_off_by_one": (recipe(), failures),
    "head_stride_ignored": (recipe(q_pad=(0, 32)), failures),
    "out_row_stride_ignored": (recipe(out_pad=(16, 0)), failures),
    "q_lo_dropped": (recipe(), failures),
    "q_lo_e8m0_wraps": (recipe(q="tiny_blocks"), failures),
    "qk_scale_mantissa": (recipe(writer="raw"), mantissa_dropped_lse),
    "rope_ignored": (recipe(rope="large"), failures),
    "l_not_rescaled": (recipe(), failures),
    "exp2_without_log2e": (recipe(), failures),
    "scale_cap_missing": (recipe(latent="above_cap"), nonfinite_out),
    "p_bf16": (p_rounding_problem, failures),
    "o_not_rescaled": (recipe(), failures),
    "empty_row_nan_out": (recipe(row_lengths=(150, 0, -4, 90)), failures),
    "empty_row_lse_zero": (recipe(row_lengths=(150, 0, -4, 90)), failures),
    "lse_base2": (recipe(), failures),
    "lse_shift_missing": (recipe(), failures),
    "paged_cache_as_rows": (recipe(cache_shape=(125, 16)), failures),
    "empty_cache_early_return": (recipe(row_lengths=(0, 0, 0), cache_rows=0), failures),
    "uniform_rows_from_stream_length": (recipe(row_lengths=(100, 100, 100), stream_tail=300), failures),
    "scale_magnitude": (recipe(softmax_scale="negative"), failures),
    "q_extent_from_row_stride": (recipe(q_layout="heads"), failures),
    "out_extent_from_row_stride": (recipe(out_layout="heads", out_pad=(0, 0)), failures),
    "stream_gathered_whole": (recipe(stream_tail=100, unconsumed="garbage"), failures),
    "one_row_cache_as_empty": (recipe(cache_rows=1), failures),
}
# mutants whose bug is a read the contract forbids: on a device a fault, here an IndexError (the
# suite reports a valid call that raises as a class-1 contract violation)
FAULTS: dict[str, type[Exception]] = {"stream_gathered_whole": IndexError}

SPARE: dict[str, Callable[[], Problem]] = {
    "offset32": recipe(),  # a cache under 4 GiB
    "row_begin_off_by_one": edited(recipe(row_lengths=(100, 100, 100)), _periodic_stream),
    "invalid_unmasked": recipe(has_invalid=True, poison=True),  # no negative entry
    "tail_unmasked": recipe(row_lengths=(128, 0, 256)),
    "last_valid_off_by_one": recipe(has_invalid=True, invalid_pattern="scattered", invalid_permille=100),
    "masked_v_not_zeroed": recipe(),  # row 0 finite
    "tile_stride_off_by_one": recipe(row_lengths=SHORT_ROWS),
    "head_stride_ignored": recipe(q_pad=(48, 0)),
    "out_row_stride_ignored": recipe(out_pad=(0, 8)),  # row stride = H * head stride
    "q_lo_dropped": edited(recipe(), _with_q(_pow2_q)),
    "q_lo_e8m0_wraps": recipe(),
    "qk_scale_mantissa": recipe(writer="pow2-floor"),
    "rope_ignored": recipe(rope="zero"),
    "l_not_rescaled": recipe(row_lengths=SHORT_ROWS),
    "exp2_without_log2e": edited(recipe(), _with_q(torch.zeros_like)),  # all scores 0
    "scale_cap_missing": recipe(latent="max57344"),
    "p_bf16": edited(recipe(), _with_q(torch.zeros_like)),  # every P' = 2^8 * pow2 scale
    "o_not_rescaled": recipe(row_lengths=SHORT_ROWS),
    "empty_row_nan_out": recipe(),
    "empty_row_lse_zero": recipe(),
    "lse_base2": recipe(return_lse=False),
    "lse_shift_missing": recipe(return_lse=False),
    "paged_cache_as_rows": recipe(),  # a [rows, 656] cache
    "empty_cache_early_return": recipe(),  # a cache with rows
    "uniform_rows_from_stream_length": recipe(row_lengths=(100, 100, 100)),  # the stream ends where the rows end
    "scale_magnitude": recipe(),  # softmax_scale > 0
    "q_extent_from_row_stride": recipe(q_pad=(48, 5)),  # row-major, padded
    "out_extent_from_row_stride": recipe(out_pad=(16, 8)),  # row-major, padded
    "stream_gathered_whole": recipe(stream_tail=100),  # unconsumed entries are rows
    "one_row_cache_as_empty": recipe(cache_rows=2),
}

NAMES = list(mutants.CATALOGUE)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """These shapes are small: intra-op threads only cost time (a lot on a loaded 2-core runner)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _bits(t: torch.Tensor | None) -> torch.Tensor | None:
    if t is None:
        return None
    return t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


# ---------------------------------------------------------------------------------------------
# Catalogue shape.


def test_catalogue_shape() -> None:
    assert len(mutants.CATALOGUE) >= 16
    assert set(KILL) == set(mutants.CATALOGUE) == set(SPARE), "every mutant needs a kill and a spare case"
    for name, mutant in mutants.CATALOGUE.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert mutant.name == name
        assert getattr(mutants, name) is mutant.backend
        assert isinstance(mutant.backend, Backend)
        assert mutant.backend.profile == "gfx950"
        assert mutant.bug_class in mutants.BUG_CLASSES
        assert mutant.description and "\n" not in mutant.description
        assert mutant.spec == f"conformance.mutation.catalogue:{name}"
        assert resolve(mutant.spec) is mutant.backend
    assert mutants.get_mutant(NAMES[0]) is mutants.CATALOGUE[NAMES[0]]
    with pytest.raises(KeyError, match="unknown mutant"):
        mutants.get_mutant("no_such_mutant")


def test_docs_cover_every_mutant() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "reference" / "mutants.md").read_text()
    for name in mutants.CATALOGUE:
        assert f"`{name}`" in text, name


def test_knob_defaults_reproduce_the_stages() -> None:
    """The parametrised stage copies, at their defaults, are the emulated stages bit for bit."""
    stages = dataclasses.replace(
        emulated.DEFAULT_STAGES,
        load_slots=mutants._load_slots,
        qk_scores=mutants._qk_scores,
        online_softmax=mutants._online_softmax,
        pv_accumulate=mutants._pv_accumulate,
        finalize=mutants._finalize,
    )
    copy = emulated.emulated_backend(stages, name="copy")
    build = recipe(
        row_lengths=(300, 0, 77, 129), has_invalid=True, invalid_pattern="scattered", invalid_permille=150, poison=True, rope="large"
    )
    want, want_lse = call_kernel(build(), EMULATED)
    got, got_lse = call_kernel(build(), copy)
    assert torch.equal(_bits(got), _bits(want))
    assert torch.equal(_bits(got_lse), _bits(want_lse))


# ---------------------------------------------------------------------------------------------
# Kill and spare, per mutant.


@functools.cache
def emulated_result(build: Callable[[], Problem]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The emulated kernel's (out, lse) on a fresh problem from `build` (cached per builder)."""
    return call_kernel(build(), EMULATED)


@functools.cache
def emulated_failures(build: Callable[[], Problem], judge: Judge) -> tuple[str, ...]:
    """What `judge` finds wrong with the emulated kernel on `build`'s problem (cached)."""
    problem = build()
    return tuple(judge(problem, *call_kernel(problem, EMULATED)))


@pytest.mark.parametrize("name", NAMES)
def test_mutant_is_killed(name: str) -> None:
    build, judge = KILL[name]
    mutant = mutants.CATALOGUE[name].backend
    assert emulated_failures(build, judge) == (), "the unbroken emulated kernel must pass the kill case"
    problem = build()
    if name in FAULTS:
        with pytest.raises(FAULTS[name]):
            call_kernel(problem, mutant)
        return
    try:
        out, lse = call_kernel(problem, mutant)
    except Exception as err:  # noqa: BLE001 (a crash would count as caught, but only the FAULTS mutants should crash)
        pytest.fail(f"mutant {name} raised {err!r} instead of returning a wrong result")
    assert judge(problem, out, lse) != [], f"mutant {name} survived its kill case"


@pytest.mark.parametrize("name", NAMES)
def test_mutant_is_minimal(name: str) -> None:
    build = SPARE[name]
    want, want_lse = emulated_result(build)
    got, got_lse = call_kernel(build(), mutants.CATALOGUE[name].backend)
    assert bool(torch.isfinite(want).all()) and bool((want != 0).any()), "the spare case must not be degenerate"
    assert torch.equal(_bits(got), _bits(want)), f"mutant {name} changes out outside its bug class"
    if want_lse is None:
        assert got_lse is None
    else:
        assert torch.equal(_bits(got_lse), _bits(want_lse)), f"mutant {name} changes lse outside its bug class"


# ---------------------------------------------------------------------------------------------
# Facts the kill cases rely on.


def test_offset32_case_references_rows_beyond_4gib() -> None:
    problem = KILL["offset32"][0]()
    assert problem.kv_cache.numel() > 2**32
    assert int(problem.referenced_rows.min()) * RECORD_BYTES >= 2**32


def test_raw_scales_lse_is_the_mantissa_dropped_lse() -> None:
    """The documented behaviour the qk_scale_mantissa kill relies on: on non-pow2 scales the
    emulated kernel's lse equals its lse on the cache with the mantissas dropped, bit for bit."""
    problem = KILL["qk_scale_mantissa"][0]()
    _, raw_lse = call_kernel(problem, EMULATED)
    _, floored_lse = call_kernel(floor_scales(KILL["qk_scale_mantissa"][0]()), EMULATED)
    assert torch.equal(_bits(raw_lse), _bits(floored_lse))
    _, mutant_lse = call_kernel(KILL["qk_scale_mantissa"][0](), mutants.qk_scale_mantissa)
    assert not torch.equal(_bits(mutant_lse), _bits(floored_lse))


def test_p_rounding_case_needs_f16() -> None:
    """P_B = 250.5 in the hand-built p_bf16 case: exact in f16, not in bf16."""
    problem = p_rounding_problem()
    c_log2 = torch.tensor(problem.softmax_scale * math.log2(math.e), dtype=torch.float32)
    p_b = emulated.exp2_f32(-c_log2 + 8.0)
    assert abs(float(p_b) - 250.5) < 1e-4
    assert float(p_b.to(torch.float16)) == 250.5
    assert float(p_b.to(torch.bfloat16)) != 250.5
