"""Messages a newcomer reads: compact reprs in falsifying examples, file and line of an import error."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis.vendor.pretty import pretty

from conformance.judging.checks import differential
from conformance.judging.target import build_target
from kernel.backend import BackendUnavailable
from kernel.emulated.gfx950 import run_emulated
from kernel.registry import resolve
from strategies.recipe import Recipe


def test_suite_target_and_recipe_print_on_one_line() -> None:
    target = build_target("emulated", device="cpu")
    assert pretty(target) == repr(target) == "<kernel emulated on cpu, profile gfx950>"
    recipe = Recipe(seed=3, n_q=2, heads=1, row_lengths=(1, 2), cache_rows=5, q_pad=(1, 0))
    assert pretty(recipe) == "Recipe(seed=3, n_q=2, heads=1, row_lengths=[1, 2], cache_rows=5, q_pad=[1, 0])"
    assert "\n" not in pretty(target) and "NumericsProfile" not in pretty(target)


@pytest.mark.parametrize(
    ("source", "line", "what"),
    [
        ("x = 1\nraise RuntimeError('extension not built')\n", 2, "RuntimeError at import: extension not built"),
        ("import no_such_dependency_xyz\n", 1, "No module named 'no_such_dependency_xyz'"),
    ],
)
def test_import_error_of_a_kernel_module_names_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, line: int, what: str
) -> None:
    (tmp_path / "user_kernel_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_kernel_mod", raising=False)
    with pytest.raises(BackendUnavailable) as info:
        resolve("user_kernel_mod:fn")
    assert what in str(info.value)
    assert f"({tmp_path / 'user_kernel_mod.py'}, line {line})" in str(info.value)


def bare_tensor(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    """A kernel returning out alone instead of the (out, lse) pair."""
    return run_emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse, out=out)[0]


def float_out(q, kv_cache, indices, indptr, softmax_scale, *, has_invalid=False, return_lse=False, out=None):  # type: ignore[no-untyped-def]
    """A kernel returning out in float32."""
    result, lse = run_emulated(q, kv_cache, indices, indptr, softmax_scale, has_invalid=has_invalid, return_lse=return_lse)
    return result.float(), lse


for _kernel in (bare_tensor, float_out):
    _kernel.profile = "gfx950"  # type: ignore[attr-defined]
    _kernel.accepts_out = False  # type: ignore[attr-defined]

TWO_ROWS = Recipe(seed=2, n_q=2, heads=1, row_lengths=(3, 5), cache_rows=50)


@pytest.mark.parametrize("recipe", [TWO_ROWS, dataclasses.replace(TWO_ROWS, n_q=1, row_lengths=(4,))], ids=["n_q 2", "n_q 1"])
def test_a_bare_tensor_is_a_contract_violation(recipe: Recipe) -> None:
    expected = r"^contract violation: the kernel's result is not a pair of out and lse \(it returned a Tensor \(\d, 1, 512\)\)"
    with pytest.raises(AssertionError, match=expected):
        differential(build_target(f"{__name__}:bare_tensor", device="cpu"), recipe, use_target=False)


def test_a_wrong_dtype_is_one_contract_line_not_a_bound_failure() -> None:
    with pytest.raises(AssertionError) as info:
        differential(build_target(f"{__name__}:float_out", device="cpu"), TWO_ROWS, use_target=False)
    text = str(info.value)
    assert text == (
        "contract violation: out is not bfloat16 of the contract's shape (out is torch.float32 (2, 1, 512), expected bfloat16 (2, 1, 512))"
    )


def test_an_lse_failure_shows_the_worst_lse_not_an_out_element() -> None:
    with pytest.raises(AssertionError) as info:
        differential(build_target("examples.fp32_buggy.kernel:fp32_buggy", device="cpu"), TWO_ROWS, use_target=False)
    text = str(info.value)
    assert "lse values exceed the bound" in text and "worst lse value: " in text
    assert "worst out element" not in text and "out elements exceed" not in text
    worst = json.loads(text.split("worst lse value: ")[1].splitlines()[0])
    assert abs(worst["lse"] * math.log(2.0) - worst["ref"]) < 1e-3 * max(1.0, abs(worst["ref"]))  # the kernel's lse is log2
