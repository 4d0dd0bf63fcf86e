"""The FlashMLA adapters' kept padded q (flashmla.PaddedQ), as `flashmla` and `flashmla-prefill`
use it: calls that reuse it give the bits of calls that pad anew, whatever the scale's sign or
the order of shapes; a repeated call launches one copy and no fill; the backends keep one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from conformance.tools.op_count import HOST_ONLY_OPS, OpCounter
from kernel.peers import flashmla, flashmla_prefill
from kernel.peers.plumbing import PaddedQ, pad_heads
from kernel.peers.protocol import backend_from_adapter, run_peer
from tests.kernel.peers.test_adapters import FakePrefill, _bits, make_problem
from tests.kernel.peers.test_flashmla import FakeFlashMLA
from tests.kernel.peers.test_flashmla import make_problem as make_decode_problem


def _decode(p: dict[str, Any], scale: float, module: FakeFlashMLA, padded_q: PaddedQ | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    state = flashmla.FlashMLAState(padded_q=padded_q)
    return run_peer(flashmla.ADAPTER, **p, softmax_scale=scale, return_lse=True, engine=flashmla.FlashMLAEngine(module), state=state)


def _prefill(p: dict[str, Any], scale: float, module: FakePrefill, padded_q: PaddedQ | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    state = flashmla_prefill.PrefillState(padded_q=padded_q)
    engine = flashmla.FlashMLAEngine(module)  # type: ignore[arg-type]
    return run_peer(flashmla_prefill.ADAPTER, **p, softmax_scale=scale, return_lse=True, engine=engine, state=state)


ADAPTERS: dict[str, tuple[Callable[..., Any], Callable[[], Any], Callable[..., dict[str, Any]]]] = {
    "flashmla": (_decode, FakeFlashMLA, make_decode_problem),
    "flashmla-prefill": (_prefill, FakePrefill, make_problem),
}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@pytest.mark.parametrize("scale", [0.06, -0.04, 0.0])
def test_kept_padding_gives_the_bits_of_fresh_padding(adapter: str, scale: float) -> None:
    run, make_fake, make = ADAPTERS[adapter]
    kept, fake = PaddedQ(), make_fake()
    shapes = (([3, 130, 0], 5, 1), ([3, 130, 0], 5, 2), ([7], 16, 3))
    problems = [make(lengths, heads, seed=seed) for lengths, heads, seed in shapes]
    problems += [make([3, 130, 0], 2, seed=4), make([3, 130, 0], 5, seed=5)]  # fewer heads, then more again
    sign = 1.0 if scale > 0 else (-1.0 if scale < 0 else 0.0)
    for p in problems:
        for _ in range(2):
            want = run(p, scale, fake, None)
            got = run(p, scale, fake, kept)
            assert torch.equal(_bits(got[0]), _bits(want[0])) and torch.equal(_bits(got[1]), _bits(want[1]))
            sent = fake.calls[-1]["q"]
            assert torch.equal(_bits(sent.reshape(-1, 64, 576)), _bits(pad_heads(p["q"], 64, sign=sign).view(-1, 64, 576)))


def test_a_repeated_call_pads_without_a_fill() -> None:
    p = make_problem([3, 130, 0], 5, seed=1)
    kept = PaddedQ()
    first = kept.get(p["q"], 64, 1.0)
    with OpCounter(in_order=True) as ops:
        again = kept.get(p["q"], 64, 1.0)
    assert again is first
    assert [n for n in ops.names if n not in HOST_ONLY_OPS] == ["copy_"], ops.names


def test_a_new_shape_makes_a_new_zero_buffer() -> None:
    kept = PaddedQ()
    a = make_problem([3, 130, 0], 5, seed=1)["q"]
    b = make_problem([3, 130], 5, seed=2)["q"]
    first = kept.get(a, 64, 1.0)
    second = kept.get(b, 64, 1.0)
    assert second.shape == (2, 1, 64, 576) and second is not first
    assert not bool(second[:, 0, 5:].any())  # heads past H stay zero


def test_both_backends_keep_a_padded_q(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backends hand every call the same kept buffer (the copy, not a fresh zero fill)."""
    import sys

    for make_fake, name in ((FakeFlashMLA, "flashmla"), (FakePrefill, "flashmla-prefill")):
        fake = make_fake()
        monkeypatch.setitem(sys.modules, "flash_mla", fake)
        monkeypatch.setattr(flashmla, "device_reason", lambda device=None: "")
        monkeypatch.setattr(flashmla_prefill, "device_reason", lambda device=None: "")
        backend = backend_from_adapter(flashmla.ADAPTER if name == "flashmla" else flashmla_prefill.ADAPTER)
        p = (make_decode_problem if name == "flashmla" else make_problem)([3, 130, 0], 5, seed=1)
        seen = []
        original = PaddedQ.get

        def spy(self: PaddedQ, q: torch.Tensor, heads_to: int, sign: float, seen: list[int] = seen) -> torch.Tensor:
            buffer = original(self, q, heads_to, sign)
            seen.append(id(self))
            return buffer

        monkeypatch.setattr(PaddedQ, "get", spy)
        backend(**p, softmax_scale=0.06, return_lse=True)
        backend(**p, softmax_scale=0.06, return_lse=True)
        monkeypatch.setattr(PaddedQ, "get", original)
        assert len(seen) == 2 and seen[0] == seen[1], name
