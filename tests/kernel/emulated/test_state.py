"""The emulated kernel's Triton kernels (kernel/emulated/state.py: the running-state
updates, emulated_scores.py: the QK accumulation, emulated_decode.py: K and V), under Triton's
CPU interpreter, against the torch operations, bit for bit, on their probes and through
run_emulated; the probes' comparison tells a one-ulp change apart."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernel import fastpath
from kernel.bits import bit_view
from kernel.emulated import gfx950 as emulated
from kernel.emulated import state as emulated_state

ROOT = Path(__file__).resolve().parents[3]

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


INTERPRETED = """
import torch
from kernel import fastpath
from kernel.emulated import decode as emulated_decode, gfx950 as emulated, scores as emulated_scores, state as emulated_state
from strategies.materialize import materialize
from strategies.recipe import Recipe

cpu = torch.device("cpu")
assert not emulated_state.triton_reason(cpu)
assert emulated_state.self_check(cpu, emulated.lane_sums), "state kernel probe"
assert emulated_scores.self_check(cpu), "QK accumulation probe"
assert emulated_decode.self_check(cpu), "K/V decode probe"
p = materialize(Recipe(seed=3, n_q=3, heads=2, row_lengths=(300, 40, 129), cache_rows=256, latent="above_cap"), "cpu")
args = p.args
loop = emulated.run_emulated(*args, return_lse=True, batch_tiles=False)
emulated.TILE_GROUP_SLOTS["cpu"] = 1 << 19
assert fastpath.choose(emulated_state.FAST_PATH, cpu) == fastpath.choose(emulated_scores.FAST_PATH, cpu) == "triton"
assert fastpath.choose(emulated_decode.FAST_PATH, cpu) == "triton"
out, lse = emulated.run_emulated(*args, return_lse=True, batch_tiles=True)
bits = lambda t: t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])
assert torch.equal(bits(out), bits(loop[0])) and torch.equal(bits(lse), bits(loop[1])), "run_emulated"
print("interpreted kernels: same bits")
"""


@needs_triton
def test_interpreted_kernels_match_torch() -> None:
    """Both kernels under Triton's interpreter (a fresh process: Triton reads TRITON_INTERPRET
    when it is first imported): their probes, and run_emulated through them against the loop."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "CONFORMANCE_FAST_PATHS": "auto"}
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "same bits" in done.stdout, done.stderr[-2000:]


def test_probe_comparison_sees_one_ulp() -> None:
    buffer, alpha, p, terms, counts = emulated_state.probe_inputs(torch.device("cpu"))
    a = buffer.clone()
    emulated_state.advance_torch(a, alpha, p, terms, counts, emulated.lane_sums)
    b = a.clone()
    assert fastpath.same_bits(a, b)
    finite = torch.isfinite(b).flatten().nonzero()[3]
    b.view(-1).view(torch.int32)[finite] += 1
    assert not fastpath.same_bits(a, b)


def test_rows_past_their_count_keep_their_state() -> None:
    buffer, alpha, p, terms, counts = emulated_state.probe_inputs(torch.device("cpu"))
    after = buffer.clone()
    emulated_state.advance_torch(after, alpha, p, terms, counts, emulated.lane_sums)
    assert counts[-1] == 0
    assert torch.equal(bit_view(after[-1]), bit_view(buffer[-1]))
    assert not torch.equal(bit_view(after[0]), bit_view(buffer[0]))
