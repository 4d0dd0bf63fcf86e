"""flashmla-prefill's kept padded q (PaddedQ): calls that reuse it give the bits of calls that pad
anew, whatever the scale's sign or the order of shapes, and a repeated call launches no fill."""

from __future__ import annotations

import pytest
import torch

from kernel.backends import flashmla_prefill
from kernel.backends.flashmla import pad_heads
from tests.test_peer_adapters import FakePrefill, _bits, _Ops, make_problem


@pytest.mark.parametrize("scale", [0.06, -0.04, 0.0])
def test_kept_padding_gives_the_bits_of_fresh_padding(scale: float) -> None:
    kept, fake = flashmla_prefill.PaddedQ(), FakePrefill()
    shapes = (([3, 130, 0], 5, 1), ([3, 130, 0], 5, 2), ([7], 16, 3))
    problems = [make_problem(lengths, heads, seed=seed) for lengths, heads, seed in shapes]
    problems += [make_problem([3, 130, 0], 2, seed=4), make_problem([3, 130, 0], 5, seed=5)]  # fewer heads, then more again
    for p in problems:
        for _ in range(2):
            want = flashmla_prefill.run_flashmla_prefill(**p, softmax_scale=scale, return_lse=True, module=fake)
            got = flashmla_prefill.run_flashmla_prefill(**p, softmax_scale=scale, return_lse=True, module=fake, padded_q=kept)
            assert torch.equal(_bits(got[0]), _bits(want[0])) and torch.equal(_bits(got[1]), _bits(want[1]))
            sign = 1.0 if scale > 0 else (-1.0 if scale < 0 else 0.0)
            assert torch.equal(_bits(fake.calls[-1]["q"]), _bits(pad_heads(p["q"], 64, sign=sign).view(-1, 64, 576)))


def test_a_repeated_call_pads_without_a_fill() -> None:
    p = make_problem([3, 130, 0], 5, seed=1)
    kept = flashmla_prefill.PaddedQ()
    kept.get(p["q"], 64, 1.0)
    with _Ops() as ops:
        kept.get(p["q"], 64, 1.0)
    assert [n for n in ops.names if n not in {"slice", "select", "view", "alias", "as_strided"}] == ["copy_"], ops.names
