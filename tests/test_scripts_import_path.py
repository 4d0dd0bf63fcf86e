"""Every `scripts/*.py` that imports the project's packages runs from a clone without an install.

Python puts the script's own folder (`scripts/`), not the repo root, first on `sys.path`, so such
a script must insert the repo root before its first project import (the device machines run the
scripts from a fresh clone where nothing is installed). Checked on the source: the first
top-level import of `conformance`, `oracle`, `kernel` or `strategies` must come after a top-level
`sys.path.insert(0, ...)` call."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PROJECT_PACKAGES = {"conformance", "oracle", "kernel", "strategies"}


def _imports_project(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return node.module.split(".")[0] in PROJECT_PACKAGES
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] in PROJECT_PACKAGES for alias in node.names)
    return False


def _inserts_path(node: ast.stmt) -> bool:
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    return isinstance(func, ast.Attribute) and func.attr == "insert" and ast.unparse(func.value) == "sys.path"


def first_project_import_unreachable(source: str) -> int | None:
    """The line of the first top-level project import that no earlier `sys.path.insert` precedes,
    or None (no project import, or the path is set first)."""
    for node in ast.parse(source).body:
        if _inserts_path(node):
            return None
        if _imports_project(node):
            return node.lineno
    return None


def test_the_check_tells_apart() -> None:
    assert first_project_import_unreachable("import sys\nfrom oracle.bound import x\n") == 2
    assert first_project_import_unreachable("import sys\nsys.path.insert(0, 'r')\nfrom oracle.bound import x\n") is None
    assert first_project_import_unreachable("import torch\nimport json\n") is None
    assert first_project_import_unreachable("import kernel.fp8 as f\n") == 1


@pytest.mark.parametrize("script", sorted(SCRIPTS.glob("*.py")), ids=lambda p: p.name)
def test_script_sets_the_repo_root_before_project_imports(script: Path) -> None:
    line = first_project_import_unreachable(script.read_text())
    assert line is None, f"{script.name}:{line} imports the project before putting the repo root on sys.path"
