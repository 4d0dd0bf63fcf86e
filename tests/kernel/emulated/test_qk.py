"""emulated_qk's fused QK scores kernel under Triton's CPU interpreter: both variants reproduce
the torch path (emulated.group_scores_torch) bit for bit on the probe, run_emulated through the
kernel gives the per-tile loop's bits, and the probe's comparison rejects a reference that
differs in one score by one ulp or in the rounding order."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

INTERPRETED = """
import torch
from kernel import fastpath
from kernel.emulated import gfx950 as emulated, qk as emulated_qk
from strategies.materialize import materialize
from strategies.recipe import Recipe

cpu = torch.device("cpu")
for variant in emulated_qk.TRITON_VARIANTS:
    assert emulated_qk.self_check(cpu, emulated.group_scores_torch, variant), variant

def one_ulp_off(latent, rope, records, live0, group):
    s = emulated.group_scores_torch(latent, rope, records, live0, group).clone()
    finite = torch.isfinite(s).flatten().nonzero()[5]
    s.view(-1).view(torch.int32)[finite] += 1
    return s

def rounded_once(latent, rope, records, live0, group):
    # every MFMA's term summed in f64 and rounded to f32 once: not the kernel's order of roundings
    n_keys = group * 128
    s = emulated.group_scores_torch(latent, rope * 0.0, records, live0, group).double()
    return (s + emulated.group_scores_torch(latent * 0.0, rope, records, live0, group).double()).float()

assert not emulated_qk.self_check(cpu, one_ulp_off, "dot")
assert not emulated_qk.self_check(cpu, rounded_once, "dot")
assert fastpath.choose(emulated_qk.FAST_PATH, cpu) == "fma"
bits = lambda t: t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])
recipes = (
    Recipe(seed=3, n_q=3, heads=2, row_lengths=(300, 40, 129), cache_rows=256, latent="above_cap"),
    Recipe(seed=5, n_q=2, heads=16, row_lengths=(130, 7), cache_rows=64, has_invalid=True),
    Recipe(seed=7, n_q=2, heads=1, row_lengths=(256, 0), cache_rows=300, rope="large"),
)
emulated.TILE_GROUP_SLOTS["cpu"] = 1 << 19
for recipe in recipes:
    p = materialize(recipe, "cpu")
    args = p.args
    kw = dict(has_invalid=p.has_invalid, return_lse=True)
    loop = emulated.run_emulated(*args, batch_tiles=False, **kw)
    out, lse = emulated.run_emulated(*args, batch_tiles=True, **kw)
    assert torch.equal(bits(out), bits(loop[0])) and torch.equal(bits(lse), bits(loop[1])), recipe
print("fused QK scores: same bits")
"""


@needs_triton
def test_interpreted_qk_kernel_matches_torch() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "CONFORMANCE_FAST_PATHS": "emulated.qk=triton"}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "same bits" in done.stdout, done.stderr[-3000:]


def test_default_is_the_cuda_kernel_where_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset setting: the CUDA variant where emulated_qk_cuda.supported and its self-check passes,
    else torch (silently); emulated.qk=off: torch; emulated.qk=triton: only Triton variants (not
    with emulated.state=off)."""
    import torch

    from kernel import fastpath
    from kernel.emulated import qk as emulated_qk
    from kernel.emulated import qk_cuda as emulated_qk_cuda

    cpu = torch.device("cpu")
    monkeypatch.delenv(fastpath.SETTING, raising=False)
    fastpath.forget()
    assert fastpath.choose(emulated_qk.FAST_PATH, cpu) is None  # no CUDA here
    tried: list[str] = []
    monkeypatch.setattr(emulated_qk_cuda, "supported", lambda device: True)
    monkeypatch.setattr(emulated_qk, "self_check", lambda device, reference, variant: tried.append(variant) or True)
    assert fastpath.choose(emulated_qk.FAST_PATH, cpu) == "cuda"
    monkeypatch.setenv(fastpath.SETTING, "emulated.qk=off")
    assert fastpath.choose(emulated_qk.FAST_PATH, cpu) is None
    monkeypatch.setenv(fastpath.SETTING, "emulated.qk=triton")
    monkeypatch.setattr(emulated_qk, "triton_reason", lambda device: "")  # Triton may be absent here
    assert fastpath.choose(emulated_qk.FAST_PATH, cpu) == emulated_qk.TRITON_VARIANTS[0]
    monkeypatch.setenv(fastpath.SETTING, "emulated.state=off,emulated.qk=triton")
    assert fastpath.choose(emulated_qk.FAST_PATH, cpu) is None
    monkeypatch.setenv(fastpath.SETTING, "emulated.state=off")
    assert fastpath.choose(emulated_qk.FAST_PATH, cpu) == "cuda"  # the DMMA kernel is no Triton kernel
    assert tried == ["cuda", emulated_qk.TRITON_VARIANTS[0]]
    fastpath.forget()


def test_cuda_variant_refuses_shapes_it_does_not_take() -> None:
    import torch

    from kernel.emulated import qk_cuda as emulated_qk_cuda

    latent = torch.zeros(1, 16, 6, 32, dtype=torch.float64)
    rope = torch.zeros(1, 3, 64, dtype=torch.float64)
    records = torch.zeros(1, 128, 656, dtype=torch.uint8)
    with pytest.raises(ValueError, match="latent"):
        emulated_qk_cuda.scores_cuda(latent[:, :, :4], rope, records, 1, 1)
    with pytest.raises(ValueError, match="records hold"):
        emulated_qk_cuda.scores_cuda(latent, rope, records, 1, 2)
    with pytest.raises(ValueError, match="f64"):
        emulated_qk_cuda.scores_cuda(latent.float(), rope, records, 1, 1)
