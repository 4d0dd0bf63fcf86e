"""The layering holds: no import cycle, no upward import, the core imports no front end, the data
package imports no kernel code (scripts/import_graph.py states the rules; docs/import-graph.png
is its picture, docs/architecture.md the recipe's route through it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_graph.py"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["import_graph"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_import_graph_keeps_its_rules() -> None:
    graph = _load()
    edges = graph.graph()
    assert len(edges) > 50
    assert graph.problems(edges) == []


def test_the_rules_catch_a_core_module_importing_a_front_end() -> None:
    graph = _load()
    edges = graph.graph()
    edges["conformance.judging.checks"] = {*edges["conformance.judging.checks"], "conformance.suite.plugin"}
    edges["kernel.record"] = {*edges["kernel.record"], "oracle.bound"}
    edges["kernel.fp8"] = {*edges["kernel.fp8"], "kernel.record"}
    edges["strategies.materialize"] = {*edges["strategies.materialize"], "kernel.backend"}
    found = graph.problems(edges)
    assert "conformance.judging.checks imports the front end conformance.suite.plugin" in found
    assert any(line.startswith("kernel.record (layer kernel) imports the higher layer oracle.bound") for line in found)
    assert any(line.startswith("import cycle:") and "kernel.fp8" in line for line in found)
    assert "strategies.materialize imports kernel.backend (the data package builds tensors; it never holds or calls a kernel)" in found


def test_the_rules_catch_a_core_package_importing_upward() -> None:
    graph = _load()
    edges = graph.graph()
    edges["conformance.durability.wal"] = {*edges["conformance.durability.wal"], "conformance.records.corpus"}
    found = graph.problems(edges)
    assert "conformance.durability.wal (conformance.durability) imports the higher core package conformance.records.corpus" in found
