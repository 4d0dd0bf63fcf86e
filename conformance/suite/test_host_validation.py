"""Property 6: host validation. Each bad input the host can see gets a clear error: the call
raises, and the message names the offending argument. A failure is a contract violation that
says which bad input was accepted (or which error did not name it) and what was expected."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from conformance.judging.finding import CONTRACT, Finding, failure
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


@dataclass(frozen=True)
class BadInput:
    """One bad call: the word its error must contain (`keyword`, lower case), what is wrong in
    words (`what`), how to build the call's arguments from a valid problem, and what is bad when
    that is not the keyword itself (`argument`)."""

    keyword: str
    what: str
    build: Callable[[Problem], dict[str, object]]
    argument: str = ""

    @property
    def subject(self) -> str:
        """What is bad, for the failure's subject."""
        return self.argument or self.keyword


BAD_INPUTS: dict[str, BadInput] = {
    "q_float32": BadInput("q", "q of dtype float32 where the contract takes bf16", _with(q=lambda p: p.q.float())),
    "q_2d": BadInput("q", "a 2-D q where the contract takes [n_q, H, 576]", _with(q=lambda p: p.q[:, 0])),
    "q_width_575": BadInput("q", "q with 575 values per head where the contract takes 576", _with(q=lambda p: p.q[..., :575])),
    "q_17_heads": BadInput(
        "h", "q with 17 heads where the contract takes 1 to 16", _with(q=lambda p: p.q.repeat(1, 9, 1)[:, :17]), "head count"
    ),
    "q_last_dim_strided": BadInput(
        "q", "q whose last dim is not contiguous", _with(q=lambda p: torch.repeat_interleave(p.q, 2, dim=-1)[..., ::2])
    ),
    "kv_int8": BadInput(
        "kv_cache", "kv_cache of dtype int8 where the contract takes uint8", _with(kv_cache=lambda p: p.kv_cache.view(torch.int8))
    ),
    "kv_width_655": BadInput(
        "kv_cache",
        "kv_cache rows of 655 bytes where the contract takes 656",
        _with(kv_cache=lambda p: p.kv_cache[:, : RECORD_BYTES - 1].contiguous()),
    ),
    "kv_not_contiguous": BadInput(
        "kv_cache",
        "kv_cache whose rows are not contiguous",
        _with(kv_cache=lambda p: torch.cat((p.kv_cache, p.kv_cache), dim=1)[:, :RECORD_BYTES]),
    ),
    "indices_int64": BadInput(
        "indices", "indices of dtype int64 where the contract takes int32", _with(indices=lambda p: p.indices.long())
    ),
    "indices_2d": BadInput("indices", "2-D indices where the contract takes a 1-D stream", _with(indices=lambda p: p.indices.view(1, -1))),
    "indptr_int64": BadInput("indptr", "indptr of dtype int64 where the contract takes int32", _with(indptr=lambda p: p.indptr.long())),
    "indptr_too_short": BadInput(
        "indptr", "indptr with n_q entries where the contract takes n_q + 1", _with(indptr=lambda p: p.indptr[:-1].clone())
    ),
    "softmax_scale_nan": BadInput("softmax_scale", "softmax_scale NaN", _with(softmax_scale=lambda p: float("nan"))),
    "softmax_scale_string": BadInput("softmax_scale", "softmax_scale given as the string '0.04'", _with(softmax_scale=lambda p: "0.04")),
    "out_float32": BadInput(
        "out", "out of dtype float32 where the contract takes bf16", _with(out=lambda p: torch.empty(3, 2, 512, device=p.q.device))
    ),
    "out_wrong_shape": BadInput(
        "out",
        "out of shape [n_q, H, 511] where the contract takes [n_q, H, 512]",
        _with(out=lambda p: torch.empty(3, 2, 511, dtype=torch.bfloat16, device=p.q.device)),
    ),
    "out_overlapping_heads": BadInput(
        "out",
        "out whose heads overlap: head stride 0",
        _with(out=lambda p: torch.empty(3, 1, 512, dtype=torch.bfloat16, device=p.q.device).expand(3, 2, 512)),
    ),
}


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gets_clear_error(target: Target, case: str) -> None:
    bad = BAD_INPUTS[case]
    if bad.keyword == "out" and not target.backend.accepts_out:
        pytest.skip(f"{target.name} takes no out=")
    problem = materialize(BASE, target.device)
    args = bad.build(problem)
    out = args.pop("out")
    kwargs = {"has_invalid": args.pop("has_invalid"), "return_lse": args.pop("return_lse")}
    if out is not None:
        kwargs["out"] = out
    expected = f"expected an error naming {bad.keyword!r}"
    try:
        target.backend.fn(*args.values(), **kwargs)
    except Exception as err:  # noqa: BLE001 - any error type will do, if it names the argument
        if bad.keyword not in str(err).lower():
            raise failure(
                Finding(CONTRACT, f"the error for a bad {bad.subject} does not name it", f"{bad.what}; {expected}, got {_first_line(err)}")
            ) from err
        return
    raise failure(Finding(CONTRACT, f"a bad {bad.subject} is accepted", f"{bad.what}; the call returned, {expected}"))


def test_device_mismatch_gets_clear_error(target: Target) -> None:
    if target.device.type == "cpu":
        pytest.skip("needs a GPU to put one argument on another device")
    problem = materialize(BASE, target.device)
    with pytest.raises(Exception) as caught:
        target.backend.fn(problem.q, problem.kv_cache.cpu(), problem.indices, problem.indptr, problem.softmax_scale)
    assert "device" in str(caught.value).lower() or "kv_cache" in str(caught.value).lower()
