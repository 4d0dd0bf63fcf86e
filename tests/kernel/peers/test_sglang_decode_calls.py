"""sglang-decode's per-call work on a repeated call (the same index tensors and cache: a serving
engine's next layer), with a stand-in kernel on the CPU (tests/kernel/peers/test_adapters.FakeSglang):
what the adapter launches around the kernel, and the same bits as a call that builds every
piece anew."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.tools.op_count import HOST_ONLY_OPS, OpCounter
from kernel.peers import sglang_decode
from kernel.peers.keys import KeptKeys
from kernel.peers.plumbing import LAYOUTS_KEPT, LayoutCache
from kernel.peers.protocol import CallArgs, run_peer
from tests.kernel.peers.test_adapters import FakeSglang, _bits, make_problem


def _split_lse_reference(attn_lse: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The merge as the adapter wrote it before its repeated call was trimmed (a where per step)."""
    holds = sglang_decode.split_holds(counts)
    lse_i = torch.where(holds, attn_lse, float("-inf"))
    peak = lse_i.amax(dim=-1, keepdim=True)
    safe = torch.where(torch.isfinite(peak), peak, 0.0)
    total = torch.exp(lse_i - safe).sum(dim=-1)
    return torch.where(holds[..., 0], safe.squeeze(-1) + torch.log(total), float("-inf"))


def test_split_lse_keeps_the_bits_of_the_where_form() -> None:
    gen = torch.Generator().manual_seed(5)
    counts = torch.tensor([0, 1, 31, 32, 33, 64, 65, 255, 300, 2048, 0, 7], dtype=torch.int32)
    att = torch.randn(12, 3, 8, generator=gen) * 40
    att[:, :, 5:] = float("nan")  # splits the kernel never writes (garbage)
    att[3, 1, 0], att[8, 2, 1], att[9, 0, 2] = float("inf"), float("nan"), float("-inf")  # non-finite written splits
    for rows in (None, sglang_decode.row_splits(counts)):
        got = sglang_decode.split_lse(att, counts, rows=rows)
        assert torch.equal(_bits(got), _bits(_split_lse_reference(att, counts)))
    assert bool(torch.isneginf(got[[0, 10]]).all())


def _call(p: dict[str, Any], fake: FakeSglang, layouts: LayoutCache | None, **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    engine, state = sglang_decode.SglangEngine(fake, fake), KeptKeys(layouts=layouts)  # type: ignore[arg-type]
    return run_peer(
        sglang_decode.ADAPTER, p["q"], p["kv_cache"], p["indices"], p["indptr"], 0.05, has_invalid=True, engine=engine, state=state, **kw
    )


@pytest.mark.parametrize("heads", [1, 3, 16])
@pytest.mark.parametrize("mode", ["lse", "no-lse", "out", "strided-out"])
def test_repeated_calls_give_the_bits_of_a_fresh_call(heads: int, mode: str) -> None:
    p = make_problem([0, 5, 40, 1, 90], heads, seed=7, negative_every=6)
    layouts, fake = LayoutCache(LAYOUTS_KEPT), FakeSglang()

    def out() -> torch.Tensor | None:
        if mode == "out":
            return torch.full((5, heads, 512), float("nan"), dtype=torch.bfloat16)
        if mode == "strided-out":
            return torch.full((5, heads + 2, 520), float("nan"), dtype=torch.bfloat16)[:, 1 : heads + 1, :512]
        return None

    kw = {"return_lse": mode != "no-lse"}
    fresh_out = out()
    want = _call(p, FakeSglang(), None, out=fresh_out, **kw)
    for _ in range(3):
        given = out()
        got = _call(p, fake, layouts, out=given, **kw)
        assert torch.equal(_bits(got[0]), _bits(want[0])) and got[0].stride() == want[0].stride()
        assert (got[1] is None) == (want[1] is None) and (got[1] is None or torch.equal(_bits(got[1]), _bits(want[1])))
        assert given is None or got[0] is given


def test_a_repeated_call_launches_only_the_output_mapping() -> None:
    """Around the kernel, a repeated 16-head call with lse launches 9 device ops: the empty rows'
    zeroing of out (in place) and the lse merge; no fill of the split counts, no zero tensor, no
    where (all kept with the CSR rows or replaced by in-place ops)."""
    p = make_problem([2048], 16, seed=8, rows=4096)
    fake, layouts = FakeSglang(), LayoutCache(LAYOUTS_KEPT)
    engine = sglang_decode.SglangEngine(fake, fake)  # type: ignore[arg-type]
    state = KeptKeys(dequant=sglang_decode.kept_cache(fake), layouts=layouts)  # type: ignore[arg-type]
    args = (p["q"], p["kv_cache"], p["indices"], p["indptr"], 0.05)
    for _ in range(3):
        call = sglang_decode.ADAPTER.prepare(engine, state, CallArgs(*args))
    with OpCounter(in_order=True) as ops:
        call = sglang_decode.ADAPTER.prepare(engine, state, CallArgs(*args))
    call.run()
    with ops:
        call.finish(None, True)
    launched = [name for name in ops.names if name not in HOST_ONLY_OPS]
    assert launched == ["masked_fill_", "masked_fill", "amax", "nan_to_num_", "sub_", "exp_", "sum", "log_", "add_"], launched
