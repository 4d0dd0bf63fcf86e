"""`python -m conformance probe` (conformance.tools.probe): each probe recovers the known arithmetic of
the emulated kernel and of the catalogue's correct variants, the measured profile reads back with
a comment per field, judges the kernel it was measured on as conforming, and the MMA model
analysis recovers a simulated matrix unit. Slow kernels run only the probes whose settings
they test (seconds each on this machine)."""

from __future__ import annotations

import tomllib

import pytest
import torch

from conformance.judging.harness import compare
from conformance.mutation.catalogue import CORRECT_VARIANTS
from conformance.tools.probe import mma
from conformance.tools.probe import probes as P
from conformance.tools.probe.build import ProbeSkipped
from conformance.tools.probe.profile import assemble, render, to_profile
from conformance.tools.probe.rounding import round_to
from conformance.tools.probe.run import probe_kernel
from kernel.registry import resolve
from oracle.bound import evaluate
from strategies.materialize import materialize
from strategies.recipe import Recipe


@pytest.fixture(scope="module")
def emulated_report():
    return probe_kernel(resolve("emulated"), name="emulated", device="cpu", quick=True, log=lambda s: None)


def test_round_to_matches_torch_casts() -> None:
    x = torch.randn(10000, dtype=torch.float64) * 2.0 ** torch.randint(-30, 30, (10000,)).double()
    x32 = x.to(torch.float32).to(torch.float64)  # f32 inputs: torch's f32 -> bf16 / f16 cast rounds once
    assert torch.equal(round_to(x32, "bf16"), x32.to(torch.float32).to(torch.bfloat16).to(torch.float64))
    small = x32.clamp(-60000, 60000)
    assert torch.equal(round_to(small, "fp16"), small.to(torch.float32).to(torch.float16).to(torch.float64))
    assert torch.equal(round_to(x, "f32"), x.to(torch.float32).to(torch.float64))
    rz = round_to(x32, "bf16", "rz")
    assert bool((rz.abs() <= x32.abs()).all()) and bool(((x32 - rz).abs() < 2.0**-7 * x32.abs()).all())


def test_emulated_settings_recovered(emulated_report) -> None:
    d = emulated_report.decided
    assert d["q_representation"] == "fp8_hi_lo"
    assert d["output_rounding"] == "nearest"
    assert d["p_format"] == {"format": "fp16_scaled", "rounding": "nearest", "rounded_in_l": "no"}
    assert d["p_shift"] == 8
    assert d["subnormals"] is None  # f16 P' hides the f32 pipeline: undecided, bounded as flush
    assert (d["qk_rounding"], d["qk_fraction_bits"]) == ("nearest", 31)  # exact MFMA sum, one RNE
    assert d["qk_block"] is None  # MFMA j interleaves the four 128-dim blocks: not contiguous
    assert (d["pv_rounding"], d["pv_fraction_bits"]) == ("nearest", 31)
    assert d["scale_cap"] == 128.0
    assert d["split"] == {"rows": "never"}
    assert d["lse"]["base"] == "e"


def test_profile_text_has_a_comment_per_field_and_reads_back(emulated_report) -> None:
    text = emulated_report.text
    data = tomllib.loads(text)
    profile = to_profile(text)
    assert profile.q_representation == "fp8_hi_lo" and profile.p_format == "fp16_scaled" and profile.p_shift == 8
    assert profile.qk.order == "sequential" and profile.qk.rounding == "nearest"
    assert profile.split.rows == "never" and profile.subnormals == "unknown" and profile.scale_cap == 128
    assert data["subnormals"] == "unknown"
    for line in text.splitlines():
        if "=" in line and not line.startswith("#") and not line.startswith(("name", "description")):
            assert "#" in line, f"field without a comment: {line}"


def test_probed_profile_judges_emulated_conforming(emulated_report) -> None:
    profile = emulated_report.profile()
    kernel = resolve("emulated")
    for seed in range(2):
        problem = materialize(Recipe(seed=seed, n_q=2, heads=4, row_lengths=(1, 130), cache_rows=256, return_lse=True), "cpu")
        out, lse = kernel(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, return_lse=True)
        ev = evaluate(problem.q, problem.kv_cache, problem.indices, problem.indptr, problem.softmax_scale, profile=profile)
        verdict = compare(problem, out, lse, ev)
        assert verdict.ok, verdict.message


#: probes -> known settings of each correct variant (conformance/mutation/independent.py)
KNOWN = {
    "float64_torch": {
        "q_representation": "exact",
        "qk": ("exact", 31, "f64"),
        "pv": ("exact", 31, "f64"),
        "subnormals": "preserve",
        "p_format": "f32",
    },
    "float32_torch": {
        "q_representation": "exact",
        "qk_rounding": "nearest",
        # its PV sums are the CPU BLAS's: sequential where it adds key by key, blocked (the probe
        # sees no single order: "unknown") where it picks AVX-512 / AMX kernels, as on some CPUs here
        "pv": {("nearest", 23, "sequential"), ("nearest", 23, "unknown")},
        "subnormals": "preserve",
        "p_format": "f32",
    },
    "gfx950_sequential_rtz": {"q_representation": "fp8_hi_lo", "qk": ("toward_zero", 23, "sequential"), "pv": ("toward_zero", 31, "fused")},
    "gfx950_sequential_l": {"q_representation": "fp8_hi_lo", "qk": ("nearest", 31, "fused"), "pv": ("nearest", 31, "fused")},
    "gfx950_reverse_tiles": {"q_representation": "fp8_hi_lo", "qk": ("nearest", 31, "fused")},
    "flashmla_like_split": {"q_representation": "exact", "p_format": "bf16", "split": {"rows": "above", "min_keys": 64}},
    # every row, one partition or more, goes through the f32 log2-lse merge: split "any"
    "flashmla_ftz_split": {"q_representation": "exact", "p_format": "bf16", "subnormals": "flush", "split": {"rows": "any"}},
}


def _accumulation(kind: str, decided: dict) -> tuple[str, int | None, str]:
    fields = {f.key: f.value for f in assemble(decided, name="x", description="y") if f.section == kind}
    return decided[f"{kind}_rounding"], decided[f"{kind}_fraction_bits"], "f64" if fields["format"] == "f64" else fields["order"]


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_correct_variant_settings_recovered(name: str) -> None:
    assert name in CORRECT_VARIANTS
    ctx = P.Context(kernel=CORRECT_VARIANTS[name].backend, device="cpu", heads=4, log=lambda s: None)
    want = KNOWN[name]
    for ev in [P.probe_q_representation(ctx), P.probe_output_rounding(ctx)]:
        ctx.decided[ev.probe] = ev.decision
    assert ctx.decided["q_representation"] == want["q_representation"]
    assert ctx.decided["output_rounding"] == "nearest"
    if "p_format" in want:
        ev = P.probe_p_format(ctx)
        ctx.decided["p_format"] = ev.decision
        assert ev.decision["format"] == want["p_format"], ev.lines()
    if "subnormals" in want:
        assert P.probe_subnormals(ctx).decision == want["subnormals"]
    if any(k.startswith("qk") for k in want):
        for ev in P.probe_qk_accumulation(ctx):
            ctx.decided[ev.probe] = ev.decision
        if "qk" in want:
            assert _accumulation("qk", ctx.decided) == want["qk"], ctx.decided
        else:
            assert ctx.decided["qk_rounding"] == want["qk_rounding"]
            fields = {f.key: f.value for f in assemble(ctx.decided, name="x", description="y") if f.section == "qk"}
            assert (fields["order"], fields["rounding"]) in {("sequential", "nearest"), ("unknown", "toward_zero")}
    if "pv" in want:
        ctx.decided["split"] = P.probe_split(ctx, lengths=(2, 64, 65, 128)).decision  # PV rows stay unsplit
        for ev in P.probe_pv_accumulation(ctx):
            ctx.decided[ev.probe] = ev.decision
        accepted = want["pv"] if isinstance(want["pv"], set) else {want["pv"]}
        assert _accumulation("pv", ctx.decided) in accepted, ctx.decided
    if "split" in want:
        ev = P.probe_split(ctx, lengths=(2, 64, 65, 128))
        assert ev.decision == want["split"], ev.lines()


def test_mapping_never_claims_more_than_observed() -> None:
    base = {"qk_rounding": "nearest", "qk_fraction_bits": 25, "qk_block": 16, "q_representation": "exact"}
    fields = {(f.section, f.key): f.value for f in assemble(base, name="x", description="y")}
    assert fields[("qk", "order")] == "fused" and fields[("qk", "guard_bits")] == 2 and fields[("qk", "terms_per_instruction")] == 16
    assert fields[("qk", "instructions")] >= 36
    odd = dict(base, qk_fraction_bits=24, qk_block=None)  # neither contiguous nor >= 26 bits: no claim
    fields = {(f.section, f.key): f.value for f in assemble(odd, name="x", description="y")}
    assert (fields[("qk", "order")], fields[("qk", "rounding")]) == ("unknown", "toward_zero")
    assert fields[("split", "rows")] == "unknown" and fields[(None, "subnormals")] == "unknown"
    text = render(assemble(odd, name="x", description="y"), ["h"])
    assert to_profile(text).split.rows == "unknown"


def test_mma_probes_recover_a_simulated_unit() -> None:
    models = [
        mma.HOPPER_MMASIM,
        mma.MmaModel("fused", 8, 24, "trunc", "rn"),
        mma.MmaModel("fused", 16, 24, "trunc", "rz"),
        mma.MmaModel("fused", 16, 25, "nearest", "rz"),
        mma.MmaModel("sequential", out_rounding="rn"),
        mma.MmaModel("sequential", out_rounding="rz"),
        mma.MmaModel("pairwise"),
    ]
    problems = mma.directed_problems(32)
    a = torch.tensor([p.a for p in problems], dtype=torch.float64)
    for truth in models:
        observed = mma.simulate(a, torch.ones(32, dtype=torch.float64), truth)
        result = mma.analyse(problems, observed, models)
        assert result["consistent"] == [truth.label], (truth.label, result["consistent"])


def test_pv_rows_stay_within_the_unsplit_length() -> None:
    assert P.pv_limits({"rows": "never"}) >= 4096
    assert P.pv_limits({"rows": "above", "min_keys": 64}) == 64
    assert P.pv_limits({"rows": "above", "min_keys": 100}) == 64
    assert P.pv_limits({"rows": "any"}) is None and P.pv_limits(None) is None
    ctx = P.Context(kernel=CORRECT_VARIANTS["flashmla_ftz_split"].backend, device="cpu", heads=1, log=lambda s: None)
    ctx.decided["split"] = {"rows": "any"}
    with pytest.raises(ProbeSkipped):
        P.probe_pv_accumulation(ctx)
