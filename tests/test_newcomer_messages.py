"""Messages a newcomer reads: compact reprs in falsifying examples, file and line of an import error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis.vendor.pretty import pretty

from conformance.target import build_target
from kernel.backend import BackendUnavailable
from kernel.registry import resolve
from strategies.recipe import Recipe


def test_suite_target_and_recipe_print_on_one_line() -> None:
    target = build_target("emulated", device="cpu")
    assert pretty(target) == repr(target) == "<kernel emulated on cpu, profile gfx950>"
    recipe = Recipe(seed=3, n_q=2, heads=1, row_lengths=(1, 2), cache_rows=5, q_pad=(1, 0))
    assert pretty(recipe) == "Recipe(seed=3, n_q=2, heads=1, row_lengths=[1, 2], cache_rows=5, q_pad=[1, 0])"
    target.judged.note(recipe, "differential")
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
