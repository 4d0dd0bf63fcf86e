"""Property 6: host validation. Each bad input the host can see gets a clear error: the call
raises, and the message names the offending argument."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from conformance.judging.target import Target
from kernel.record import RECORD_BYTES
from strategies.materialize import Problem, materialize
from strategies.recipe import Recipe

BASE = Recipe(seed=7, n_q=3, heads=2, row_lengths=(4, 0, 130), cache_rows=300, return_lse=True)


def _args(p: Problem) -> dict[str, object]:
    return {
        "q": p.q,
        "kv_cache": p.kv_cache,
        "indices": p.indices,
        "indptr": p.indptr,
        "softmax_scale": p.softmax_scale,
        "has_invalid": False,
        "return_lse": True,
        "out": None,
    }


def _with(**changes: Callable[[Problem], object]) -> Callable[[Problem], dict[str, object]]:
    def build(p: Problem) -> dict[str, object]:
        args = _args(p)
        for name, make in changes.items():
            args[name] = make(p)
        return args

    return build


BAD_INPUTS: dict[str, tuple[str, Callable[[Problem], dict[str, object]]]] = {
    "q_float32": ("q", _with(q=lambda p: p.q.float())),
    "q_2d": ("q", _with(q=lambda p: p.q[:, 0])),
    "q_width_575": ("q", _with(q=lambda p: p.q[..., :575])),
    "q_17_heads": ("h", _with(q=lambda p: p.q.repeat(1, 9, 1)[:, :17])),
    "q_last_dim_strided": ("q", _with(q=lambda p: torch.repeat_interleave(p.q, 2, dim=-1)[..., ::2])),
    "kv_int8": ("kv_cache", _with(kv_cache=lambda p: p.kv_cache.view(torch.int8))),
    "kv_width_655": ("kv_cache", _with(kv_cache=lambda p: p.kv_cache[:, : RECORD_BYTES - 1].contiguous())),
    "kv_not_contiguous": ("kv_cache", _with(kv_cache=lambda p: torch.cat((p.kv_cache, p.kv_cache), dim=1)[:, :RECORD_BYTES])),
    "indices_int64": ("indices", _with(indices=lambda p: p.indices.long())),
    "indices_2d": ("indices", _with(indices=lambda p: p.indices.view(1, -1))),
    "indptr_int64": ("indptr", _with(indptr=lambda p: p.indptr.long())),
    "indptr_too_short": ("indptr", _with(indptr=lambda p: p.indptr[:-1].clone())),
    "softmax_scale_nan": ("softmax_scale", _with(softmax_scale=lambda p: float("nan"))),
    "softmax_scale_string": ("softmax_scale", _with(softmax_scale=lambda p: "0.04")),
    "out_float32": ("out", _with(out=lambda p: torch.empty(3, 2, 512, device=p.q.device))),
    "out_wrong_shape": ("out", _with(out=lambda p: torch.empty(3, 2, 511, dtype=torch.bfloat16, device=p.q.device))),
    "out_overlapping_heads": (
        "out",
        _with(out=lambda p: torch.empty(3, 1, 512, dtype=torch.bfloat16, device=p.q.device).expand(3, 2, 512)),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gets_clear_error(target: Target, case: str) -> None:
    keyword, build = BAD_INPUTS[case]
    if keyword == "out" and not target.backend.accepts_out:
        pytest.skip(f"{target.name} takes no out=")
    problem = materialize(BASE, target.device)
    args = build(problem)
    out = args.pop("out")
    kwargs = {"has_invalid": args.pop("has_invalid"), "return_lse": args.pop("return_lse")}
    if out is not None:
        kwargs["out"] = out
    with pytest.raises(Exception) as caught:
        target.backend.fn(*args.values(), **kwargs)
    message = str(caught.value).lower()
    assert keyword in message, f"{case}: the error does not name {keyword!r}: {caught.value!r}"


def test_device_mismatch_gets_clear_error(target: Target) -> None:
    if target.device.type == "cpu":
        pytest.skip("needs a GPU to put one argument on another device")
    problem = materialize(BASE, target.device)
    with pytest.raises(Exception) as caught:
        target.backend.fn(problem.q, problem.kv_cache.cpu(), problem.indices, problem.indptr, problem.softmax_scale)
    assert "device" in str(caught.value).lower() or "kv_cache" in str(caught.value).lower()
