"""The emulated kernel's fused PV kernel (kernel/emulated/pv.py: P', the PV products and
the running-state updates of a group of tiles) against the torch path (group_pv_terms, then
emulated_state.advance), bit for bit: under Triton's CPU interpreter on its probe at every
BLOCK_D and through run_emulated (kernel on against emulated.pv=off and the per-tile loop);
without Triton, the probe's own properties and the fallback when the kernel raises."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from kernel import fastpath
from kernel.bits import bit_view
from kernel.emulated import gfx950 as emulated
from kernel.emulated import pv as emulated_pv
from kernel.emulated import state as emulated_state
from strategies.materialize import materialize
from strategies.recipe import Recipe

ROOT = Path(__file__).resolve().parents[3]
CPU = torch.device("cpu")

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


INTERPRETED = """
import os
import warnings
import torch
from kernel import fastpath
from kernel.emulated import gfx950 as emulated, pv as emulated_pv, state as emulated_state
from strategies.materialize import materialize
from strategies.recipe import Recipe

warnings.filterwarnings("error", message="emulated: ")  # a fallback warning fails the run
warnings.filterwarnings("error", message="fast path ")  # so does a failing self-check
cpu = torch.device("cpu")
assert not emulated_state.triton_reason(cpu)
assert emulated_pv.self_check(cpu, emulated.group_pv_terms, emulated.lane_sums, "dot"), "PV kernel probe (tl.dot)"
assert emulated_pv.self_check(cpu, emulated.group_pv_terms, emulated.lane_sums, "sum"), "PV kernel probe (tl.sum)"
assert fastpath.choose(emulated_pv.FAST_PATH, cpu) == "dot"
launches = []
fused = emulated_pv.advance_triton
emulated_pv.advance_triton = lambda *a, **k: (launches.append(a[0].shape[0]), fused(*a, **k))
emulated.TILE_GROUP_SLOTS["cpu"] = 1 << 19
recipes = [
    Recipe(seed=3, n_q=3, heads=2, row_lengths=(300, 40, 129), cache_rows=256, latent="above_cap"),
    Recipe(seed=4, n_q=4, heads=16, row_lengths=(260, 0, 90, -2), cache_rows=300, invalid_pattern="scattered",
           invalid_permille=300, has_invalid=True),
    Recipe(seed=5, n_q=2, heads=1, row_lengths=(129, 1), cache_rows=64, latent="tiny_blocks", q="large"),
]
bits = lambda t: t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])
for recipe in recipes:
    p = materialize(recipe, "cpu")
    args = p.args
    kw = dict(has_invalid=p.has_invalid, return_lse=True)
    before = len(launches)
    out, lse = emulated.run_emulated(*args, batch_tiles=True, **kw)
    assert len(launches) > before, "the PV kernel ran"
    ran = len(launches)
    os.environ[fastpath.SETTING] = "emulated.qk=off,emulated.pv=off"
    ref = emulated.run_emulated(*args, batch_tiles=True, **kw)
    loop = emulated.run_emulated(*args, batch_tiles=False, **kw)
    assert len(launches) == ran, "emulated.pv=off switches the kernel off"
    os.environ[fastpath.SETTING] = "emulated.qk=off,emulated.pv=triton"
    for a, b in ((out, ref[0]), (lse, ref[1]), (out, loop[0]), (lse, loop[1])):
        assert torch.equal(bits(a), bits(b)), recipe
print("interpreted PV kernel: same bits", len(launches))
"""


@needs_triton
def test_interpreted_pv_kernel_matches_torch() -> None:
    """The fused kernel under Triton's interpreter (a fresh process: Triton reads TRITON_INTERPRET
    when it is first imported): its probe for both variants at every launch config, and run_emulated through it against
    the torch path (emulated.pv=off) and the per-tile loop, on ragged, has_invalid, 16-head
    and 1-head problems. The QK kernel is left out (emulated.qk=off: its own tests)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", fastpath.SETTING: "emulated.qk=off,emulated.pv=triton"}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "same bits" in done.stdout, (done.stdout[-2000:], done.stderr[-3000:])


@pytest.mark.parametrize("shape", emulated_pv.PROBE_SHAPES)
def test_probe_sums_are_exact(shape: tuple[int, int, int]) -> None:
    """Every 32-key sum of the probe is exact in f64: any summation order gives its bits."""
    _, _, p, records, masked, _ = emulated_pv.probe_inputs(CPU, *shape)
    assert emulated_pv.probe_sums_exact(p, records, masked)


def test_exactness_check_sees_a_rounded_sum() -> None:
    """A group whose products span beyond f64's 53 bits is reported inexact."""
    _, _, p, records, masked, _ = emulated_pv.probe_inputs(CPU, 1, 1, 1)
    masked[:] = False
    p[0, 0, 0, :] = 0.0
    p[0, 0, 0, 0] = 200.0  # P' 200 * 64 (scale 2^6) = 12800
    p[0, 0, 0, 1] = 2.0**-30  # P' 2^-24 (f16 subnormal): key 1 of the same MFMA
    records[0, :2, 512:528] = torch.tensor([64.0] * 4, dtype=torch.float32).view(torch.uint8)
    records[0, 0, :512] = 0x7E  # 448
    records[0, 1, :512] = 0x01  # 2^-9
    assert not emulated_pv.probe_sums_exact(p, records, masked)


def test_probe_covers_its_classes() -> None:
    """The probe's reference reaches NaN, infinite and zero states, keeps rows past their count,
    and turns row 0 head 0's -0 into +0 by its zero sums (as the BLAS does)."""
    for shape in emulated_pv.PROBE_SHAPES:
        buffer, alpha, p, records, masked, counts = emulated_pv.probe_inputs(CPU, *shape)
        after = buffer.clone()
        emulated_pv.advance_torch(after, alpha, p, records, masked, counts, emulated.group_pv_terms, emulated.lane_sums)
        o = after[..., :512]
        assert bool(torch.isnan(o).any()) and bool(torch.isfinite(o).any())
        assert bool(torch.signbit(buffer[0, 0, :64]).all())
        kept = ~torch.isnan(after[0, 0, :64])
        assert bool(kept.any()) and not bool(torch.signbit(after[0, 0, :64][kept]).any())
        assert bool((o == 0).any())
        for r, c in enumerate(counts):
            if c == 0:
                assert torch.equal(bit_view(after[r]), bit_view(buffer[r]))
    _, _, p, records, masked, _ = emulated_pv.probe_inputs(CPU, 3, 2, 16)
    bits = records[..., 512:528].contiguous().view(torch.int32).clamp(1, emulated_pv.SCALE_CAP_BITS)
    scale = torch.where(masked.unsqueeze(-1), 0, bits).view(torch.float32)  # [R, key, b]
    p16 = (p.reshape(6, 16, 128, 1) * scale.unsqueeze(1)).to(torch.float16)
    tiny = (p16 > 0) & (p16 < 2.0**-14)
    assert bool(torch.isinf(p16).any()) and bool((p16 == 0).any()) and bool(tiny.any()) and bool(torch.isnan(p16).any())


def test_reference_is_the_batched_torch_path() -> None:
    """advance_torch equals group_pv_terms then emulated_state.advance_torch on records whose
    masked keys' bytes were zeroed (as _run_chunk_batched does without the decode kernel)."""
    buffer, alpha, p, records, masked, counts = emulated_pv.probe_inputs(CPU, 5, 3, 3)
    a = buffer.clone()
    emulated_pv.advance_torch(a, alpha, p, records, masked, counts, emulated.group_pv_terms, emulated.lane_sums)
    zeroed = records.clone()
    zeroed[masked] = 0
    terms = emulated.group_pv_terms(p.reshape(15, 3, 128), zeroed, masked)
    b = buffer.clone()
    emulated_state.advance_torch(b, alpha, p, terms, counts, emulated.lane_sums)
    assert torch.equal(bit_view(a), bit_view(b))


def test_off_on_a_cpu_and_by_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fastpath.SETTING, raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert fastpath.choose(emulated_pv.FAST_PATH, CPU) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(fastpath.SETTING, "emulated.pv=off")
    assert fastpath.choose(emulated_pv.FAST_PATH, CPU) is None


def test_a_failing_kernel_falls_back_to_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel raises before its launch, run_emulated warns and gives the torch path's bits."""
    recipe = Recipe(seed=7, n_q=3, heads=4, row_lengths=(300, 5, 140), cache_rows=200)
    p = materialize(recipe, "cpu")
    args = p.args
    expected = emulated.run_emulated(*args, return_lse=True, batch_tiles=True)
    calls = []

    def broken(*a: object, **k: object) -> None:
        calls.append(1)
        raise ValueError("no such layout")

    choose = fastpath.choose
    monkeypatch.setattr(fastpath, "choose", lambda name, device: "dot" if name == emulated_pv.FAST_PATH else choose(name, device))
    monkeypatch.setattr(emulated_pv, "advance_triton", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = emulated.run_emulated(*args, return_lse=True, batch_tiles=True)
    assert calls and any("PV kernel failed" in str(w.message) for w in caught)
    assert torch.equal(bit_view(got[0]), bit_view(expected[0])) and torch.equal(bit_view(got[1]), bit_view(expected[1]))


def test_default_is_the_cuda_kernel_where_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset setting: the CUDA variant where emulated_pv_cuda.supported and its self-check passes,
    else torch (silently); emulated.pv=off or emulated.state=off: torch; emulated.pv=triton: only
    the Triton variants; advance launches the variant chosen."""
    from kernel.emulated import pv_cuda as emulated_pv_cuda

    monkeypatch.delenv(fastpath.SETTING, raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    fastpath.forget()
    assert fastpath.choose(emulated_pv.FAST_PATH, CPU) is None  # no CUDA here
    tried: list[str] = []
    monkeypatch.setattr(emulated_pv_cuda, "supported", lambda device: True)
    monkeypatch.setattr(emulated_pv, "self_check", lambda device, pv_terms, lane_sums, variant: tried.append(variant) or True)
    assert fastpath.choose(emulated_pv.FAST_PATH, CPU) == "cuda"
    launched: list[str] = []
    monkeypatch.setattr(emulated_pv_cuda, "advance_cuda", lambda *a: launched.append("cuda"))
    monkeypatch.setattr(emulated_pv, "advance_triton", lambda *a, **k: launched.append("triton"))
    buffer, alpha, p, records, masked, counts = emulated_pv.probe_inputs(CPU, 2, 1, 1)
    counts_dev = torch.tensor(counts, dtype=torch.int32)
    assert emulated_pv.advance(buffer, alpha, p, records, masked, counts_dev) and launched == ["cuda"]
    monkeypatch.setenv(fastpath.SETTING, "emulated.pv=off")
    assert fastpath.choose(emulated_pv.FAST_PATH, CPU) is None
    monkeypatch.setenv(fastpath.SETTING, "emulated.pv=triton")
    assert fastpath.choose(emulated_pv.FAST_PATH, CPU) is None  # not eligible: no interpreter
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if not emulated_state.triton_reason(CPU):
        assert fastpath.choose(emulated_pv.FAST_PATH, CPU) == "dot"
        assert emulated_pv.advance(buffer, alpha, p, records, masked, counts_dev) and launched == ["cuda", "triton"]
    monkeypatch.setenv(fastpath.SETTING, "emulated.state=off")
    assert fastpath.choose(emulated_pv.FAST_PATH, CPU) is None
    assert tried[0] == "cuda" and set(tried) <= {"cuda", *emulated_pv.TRITON_VARIANTS}
    fastpath.forget()


def test_cuda_variant_refuses_layouts_it_does_not_take() -> None:
    """advance_cuda raises ValueError before any build or launch on shapes, dtypes or layouts it
    does not take (a CPU tensor of a valid layout reaches the loader, which refuses the CPU)."""
    from kernel import cuda_binary
    from kernel.emulated import pv_cuda as emulated_pv_cuda

    buffer, alpha, p, records, masked, counts = emulated_pv.probe_inputs(CPU, 2, 1, 3)
    counts_dev = torch.tensor(counts, dtype=torch.int32)
    with pytest.raises(ValueError, match="heads"):
        emulated_pv_cuda.advance_cuda(buffer, alpha, p[:, :, :2], records, masked, counts_dev)
    with pytest.raises(ValueError, match="f32"):
        emulated_pv_cuda.advance_cuda(buffer, alpha, p.double(), records, masked, counts_dev)
    with pytest.raises(ValueError, match="int32"):
        emulated_pv_cuda.advance_cuda(buffer, alpha, p, records, masked, counts_dev.long())
    with pytest.raises(ValueError, match="records"):
        emulated_pv_cuda.advance_cuda(buffer, alpha, p, records[:1], masked, counts_dev)
    with pytest.raises(ValueError, match="contiguous"):
        emulated_pv_cuda.advance_cuda(buffer, alpha, p, records, masked.t().contiguous().t(), counts_dev)
    with pytest.raises(cuda_binary.CudaBuildError):
        emulated_pv_cuda.advance_cuda(buffer, alpha, p, records, masked, counts_dev)
