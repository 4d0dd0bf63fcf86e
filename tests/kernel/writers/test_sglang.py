"""The sglang engine writer (kernel.writers.sglang) and its registration as writer "sglang".

Its bytes: the records sglang's quantiser wrote on the H200 (tests/kernel/writers/data/sglang_writer_h200.pt,
32 of 4096 activation-like rows: heavy tails, an outlier channel,
all-zero first tiles, rows scaled by 2^-20 and 2^10) decode to their input within the format's
rounding, and the check sees each kind of broken byte. Without CUDA the writer is absent from
every draw, with its reason in the campaign coverage, and a stored sglang recipe is refused with
that reason. The wiring (materialize, the strategies, the coverage mirror, the judging routes) is
exercised on the CPU through a torch stand-in for sglang's kernel with its arithmetic
(scale = amax / 448, codes = e4m3(clamp(x * (1 / scale), +-448)), NaN clamped to 448).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from conformance.records.corpus import corpus_files, recipe_hash
from conformance.records.coverage import Coverage, features, reachable, violating_space
from kernel.fp8 import encode_e4m3
from kernel.record import ENGINE_WRITERS, PRECONDITION_WRITERS, ROPE_OFFSET, SCALE_OFFSET, WRITERS, encode_records
from kernel.writers import sglang as writer
from strategies.hypothesis_recipes import differential_writers, recipes, violating_recipes
from strategies.materialize import materialize
from strategies.recipe import Recipe, RecipeError

FIXTURE = Path(__file__).resolve().parent / "data" / "sglang_writer_h200.pt"


@pytest.fixture(autouse=True)
def _own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CONFORMANCE_PENDING_DIR", str(tmp_path / "pending"))


@pytest.fixture(scope="module")
def h200() -> dict[str, Any]:
    return torch.load(FIXTURE)


def test_h200_records_decode_to_their_input(h200: dict[str, Any]) -> None:
    assert writer.rounding_failures(h200["sglang"], h200["latent"], h200["rope"]) == []
    scales = h200["sglang"][:, SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)
    zero_tiles = h200["latent"].view(-1, 4, 128).abs().amax(-1) == 0
    assert int(zero_tiles.sum()) == 4 and bool((scales[zero_tiles] == 0).all())  # the zero tiles: scale 0
    assert bool((h200["sglang"][zero_tiles.nonzero()[:, 0], :128] == 0x7E).all())  # ... every code 448
    mantissa = (scales.view(torch.int32) & 0x7FFFFF) != 0
    assert int(mantissa.sum()) >= 120  # of 128 scales, 4 zero: (almost) none a power of two
    # the project's writers: raw stores the same format (passes), pow2 another scale rule (fails)
    assert writer.rounding_failures(encode_records(h200["latent"], h200["rope"], "raw"), h200["latent"], h200["rope"]) == []
    pow2 = writer.rounding_failures(encode_records(h200["latent"], h200["rope"], "pow2"), h200["latent"], h200["rope"])
    assert len(pow2) == 1 and pow2[0].endswith("scales outside the format's rounding")


def _broken(records: torch.Tensor, kind: str) -> torch.Tensor:
    broken = records.clone()
    if kind == "codes":
        broken[0, 10] ^= 1  # one e4m3 step: off the nearest code
    elif kind == "scales":
        scale = broken[8, SCALE_OFFSET:ROPE_OFFSET].clone().view(torch.float32)
        scale[1] *= 1 + 2.0**-20  # 8 ulp
        broken[8, SCALE_OFFSET:ROPE_OFFSET] = scale.view(torch.uint8)
    elif kind == "zero-tile values":
        broken[4, 3] = 0x7F  # a NaN code in an all-zero tile
    else:
        broken[9, ROPE_OFFSET + 1] ^= 1
    return broken


@pytest.mark.parametrize("kind", ["codes", "scales", "zero-tile values", "rope records"])
def test_the_check_sees_each_broken_part(h200: dict[str, Any], kind: str) -> None:
    got = writer.rounding_failures(_broken(h200["sglang"], kind), h200["latent"], h200["rope"])
    assert got == [f"1 {kind} outside the format's rounding"]


def test_the_check_refuses_mismatched_shapes(h200: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="do not match"):
        writer.rounding_failures(h200["sglang"][:3], h200["latent"], h200["rope"])


# ---------------------------------------------------------------------------------------------
# This machine: no CUDA


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA: the writer may run here")
def test_absent_without_cuda_with_its_reason() -> None:
    reason = writer.unavailable_reason()
    assert not writer.available() and "needs a CUDA device" in reason and "TRITON_INTERPRET=1" in reason
    assert differential_writers(needs_pow2_scales=False) == PRECONDITION_WRITERS
    assert "sglang_writer" not in violating_space(allow_out_of_range=True).violations  # type: ignore[operator]
    cov = Coverage(reachable(violating_space(allow_out_of_range=True)))
    assert "sglang" not in cov.reachable["writer"]
    assert f"  not drawn here: {reason}" in cov.summary_lines() and reason.startswith("sglang writer: ")
    assert cov.to_json()["writer"]["absent"] == {"sglang": reason}
    recipe = Recipe(seed=1, n_q=1, heads=1, row_lengths=(3,), cache_rows=8, writer="sglang")
    with pytest.raises(RecipeError, match="writer 'sglang' cannot write this cache here: sglang writer: needs a CUDA device"):
        materialize(recipe)


def test_old_corpus_json_and_hashes_are_unchanged() -> None:
    """ "sglang" is a new value of an existing field: no stored recipe changes JSON or hash, none uses it."""
    assert WRITERS[:3] == ("pow2", "pow2-floor", "raw") and ENGINE_WRITERS == ("sglang",)
    for path in corpus_files():
        raw = json.loads(path.read_text(encoding="utf-8"))["recipe"]
        recipe = Recipe.from_json_dict(raw)
        assert recipe.writer != "sglang"
        assert recipe_hash(recipe) == recipe_hash(Recipe.from_json_dict(json.loads(recipe.to_json())))
        assert {k: v for k, v in recipe.to_json_dict().items() if k in raw} == {k: raw[k] for k in raw if k in recipe.to_json_dict()}


# ---------------------------------------------------------------------------------------------
# The wiring, through a stand-in for sglang's kernel on the CPU


class StandIn(ModuleType):
    """quantize_k_cache_separate with sglang's arithmetic in torch (f32), checking the call's layout."""

    def __init__(self, *, off_by_one: bool = False) -> None:
        super().__init__("stand_in_quant_k_cache")
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        self.off_by_one = off_by_one

    def quantize_k_cache_separate(self, k_nope: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert k_nope.dtype == k_rope.dtype == torch.bfloat16 and k_nope.shape[1:] == (1, 512) and k_rope.shape[1:] == (1, 64)
        self.calls.append((tuple(k_nope.shape), tuple(k_rope.shape)))
        n = k_nope.shape[0]
        x = k_nope.reshape(n, 4, 128).float()
        scale = x.abs().amax(-1, keepdim=True) / 448.0
        y = torch.nan_to_num((x * (1.0 / scale)).clamp(-448.0, 448.0), nan=448.0)
        codes = encode_e4m3(y.reshape(n, 512), saturate=True)
        if self.off_by_one:
            codes[:, 0] ^= 1
        nope = torch.cat([codes, scale.reshape(n, 4).contiguous().view(torch.uint8)], dim=1)
        return nope.view(n, 1, 528), k_rope.reshape(n, 64).contiguous().view(torch.uint8).view(n, 1, 128)


@pytest.fixture()
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    module = StandIn()
    monkeypatch.setattr(writer, "_probe", lambda: (module, ""))
    monkeypatch.setattr(writer, "WRITE_DEVICE", "cpu")
    return module


def test_the_stand_in_writes_the_h200_bytes(h200: dict[str, Any], stand_in: StandIn) -> None:
    """The stand-in is sglang's arithmetic: it matches the H200's records where the H200's division
    rounded as IEEE does (the scales of equal value), so the wiring tests below test real bytes' shapes."""
    got = writer.write_records(h200["latent"], h200["rope"])
    same_scales = (got[:, SCALE_OFFSET:ROPE_OFFSET] == h200["sglang"][:, SCALE_OFFSET:ROPE_OFFSET]).view(-1, 4, 4).all(-1)
    codes_equal = (got[:, :512] == h200["sglang"][:, :512]).view(-1, 4, 128).all(-1)
    assert int(same_scales.sum()) >= 40 and bool(codes_equal[same_scales].all())
    assert torch.equal(got[:, ROPE_OFFSET:], h200["sglang"][:, ROPE_OFFSET:])


def test_materialize_writes_the_engine_records_at_the_referenced_rows(stand_in: StandIn) -> None:
    recipe = Recipe(seed=3, n_q=2, heads=2, row_lengths=(5, 9), cache_rows=40, writer="sglang", latent="zero_blocks")
    problem = materialize(recipe)
    rows = problem.referenced_rows
    assert stand_in.calls == [((rows.numel(), 1, 512), (rows.numel(), 1, 64))]
    base = materialize(Recipe(**{**recipe.__dict__, "writer": "raw"}))
    assert torch.equal(problem.indices, base.indices) and torch.equal(problem.q.nan_to_num(), base.q.nan_to_num())
    kv, raw = problem.kv_cache[rows], base.kv_cache[rows]
    assert torch.equal(kv[:, ROPE_OFFSET:], raw[:, ROPE_OFFSET:])
    scales = kv[:, SCALE_OFFSET:ROPE_OFFSET].contiguous().view(torch.float32)
    assert bool((scales == 0).any())  # zero_blocks: the engine's scale 0 (raw stores 2^-126)


def test_records_outside_the_rounding_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "_probe", lambda: (StandIn(off_by_one=True), ""))
    monkeypatch.setattr(writer, "WRITE_DEVICE", "cpu")
    latent = torch.linspace(-2, 3, 512).to(torch.bfloat16).repeat(3, 1)
    with pytest.raises(writer.SglangWriterError, match="codes outside the format's rounding"):
        writer.write_records(latent, torch.zeros(3, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="stores bf16 activations"):
        writer.write_records(latent.float() + 2.0**-20, torch.zeros(3, 64, dtype=torch.bfloat16))


SETTINGS = settings(database=None, max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def test_where_it_runs_the_strategies_draw_it(stand_in: StandIn) -> None:
    """Drawn by violating_recipes (kind sglang_writer, for every profile) and by recipes for a
    profile without needs_pow2_scales (never with zero_blocks latent); the coverage mirror agrees."""
    assert differential_writers(needs_pow2_scales=True) == PRECONDITION_WRITERS
    assert differential_writers(needs_pow2_scales=False) == (*PRECONDITION_WRITERS, "sglang")
    space = violating_space(allow_out_of_range=False)
    assert space.violations is not None and space.violations[-1] == "sglang_writer"
    assert "sglang" in reachable(space)["writer"] and "sglang_writer" in reachable(space)["corruption"]
    bad_recipes = violating_recipes(allow_out_of_range=False, max_total_keys=64)
    good_recipes = recipes(max_n_q=4, max_total_keys=64, writers=differential_writers(False))

    @SETTINGS
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        bad, good = data.draw(bad_recipes), data.draw(good_recipes)
        assert bad.writer != "sglang" or features(bad)["corruption"] == {"sglang_writer"}
        assert good.writer != "sglang" or good.latent != "zero_blocks"

    draw()
    search = settings(database=None, max_examples=2000, suppress_health_check=list(HealthCheck), deadline=None)
    assert find(bad_recipes, lambda r: r.writer == "sglang", settings=search).corruptions == ()
    assert find(good_recipes, lambda r: r.writer == "sglang", settings=search).latent != "zero_blocks"


@pytest.mark.parametrize("latent", ["normal", "heavy", "max57344", "zero_blocks"])
def test_judged_by_the_violation_route_under_a_pow2_profile(stand_in: StandIn, latent: str) -> None:
    from conformance.judging.checks import violation_run
    from conformance.judging.target import build_target

    target = build_target("emulated", device="cpu")
    assert target.profile.needs_pow2_scales
    recipe = Recipe(seed=5, n_q=2, heads=3, row_lengths=(7, 130), cache_rows=300, writer="sglang", latent=latent)
    observed = violation_run(target, recipe)
    assert "scale_not_pow2" in observed["kinds"] and observed["behaviour"] == "returned"
    assert ("scale_nonpositive_or_nonfinite" in observed["kinds"]) == (latent == "zero_blocks")


def test_judged_by_the_differential_verdict_under_a_profile_without_pow2(stand_in: StandIn) -> None:
    from conformance.judging.checks import differential
    from conformance.judging.target import build_target

    target = build_target("conformance.mutation.independent:float32_torch", device="cpu")
    assert not target.profile.needs_pow2_scales
    recipe = Recipe(seed=6, n_q=3, heads=2, row_lengths=(1, 40, 300), cache_rows=500, writer="sglang", latent="heavy")
    verdicts = differential(target, recipe, use_target=False)
    assert verdicts and all(v.ok for v in verdicts)
