"""Verdict messages do not depend on how the package was installed.

pytest rewrites `assert` statements in every module of a distribution that registers a pytest11
plugin when the installer lists the modules (a regular or a setup.py-develop install; not a PEP
660 editable wheel). A rewritten assert adds introspection lines (object reprs) to its message,
so the failure signature of one failure differs from call to call: a fuzz campaign then counted
one lse defect as 5 distinct failures and `corpus minimise` saw every candidate fail differently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LIBRARY_PACKAGES = ("conformance", "kernel", "oracle", "strategies")


def _library_modules() -> list[Path]:
    modules = []
    for package in LIBRARY_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.parent.name == "suite" and path.name.startswith("test_"):
                continue  # the suite's properties: test modules, rewritten on purpose
            modules.append(path)
    return modules


def test_no_library_assert_carries_a_message() -> None:
    """A message-carrying assert is a user-facing message: raise AssertionError instead."""
    offenders = []
    for path in _library_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offenders += [f"{path.relative_to(REPO)}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Assert) and node.msg]
    assert offenders == []


def test_differential_failure_message_is_only_the_judgement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The message of a failing differential check is its finding's headline, its header and the
    judgement's lines; the failure carries the finding (conformance.judging.finding.carried)."""
    from conformance.durability.state import RUN_ID_ENV

    monkeypatch.setenv("CONFORMANCE_DIR", str(tmp_path / "state"))  # the example's record goes here
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    from conformance.judging.checks import differential
    from conformance.judging.target import build_target
    from strategies.recipe import Recipe

    target = build_target("conformance.mutation.catalogue:lse_base2", device="cpu")
    with pytest.raises(AssertionError) as info:
        differential(target, Recipe(seed=1, n_q=1, heads=1, row_lengths=(3,), cache_rows=8), "test", use_target=False)
    from conformance.judging.finding import WRONG_RESULT, carried

    lines = str(info.value).splitlines()
    finding = carried(info.value)
    assert finding is not None and finding.group == (WRONG_RESULT, "lse outside the bound"), finding
    assert lines[0] == finding.headline, lines[0]
    assert lines[1] == "kernel output outside the a-priori bound:"
    assert not any(line.lstrip().startswith(("assert ", "+  where", "where ")) for line in lines)
