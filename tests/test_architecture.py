"""The layering holds: no import cycle, no upward import, the core imports no front end, the data
package imports no kernel code (tools/import_graph.py states the rules; docs/import-graph.png
is its picture, docs/architecture.md the recipe's route through it)."""

from __future__ import annotations

from tools import import_graph as graph


def test_the_import_graph_keeps_its_rules() -> None:
    edges = graph.graph()
    assert len(edges) > 50
    assert graph.problems(edges) == []


def test_the_rules_catch_a_core_module_importing_a_front_end() -> None:
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
    edges = graph.graph()
    edges["conformance.durability.wal"] = {*edges["conformance.durability.wal"], "conformance.records.corpus"}
    found = graph.problems(edges)
    assert "conformance.durability.wal (conformance.durability) imports the higher core package conformance.records.corpus" in found


def test_nothing_imports_the_developer_front_ends() -> None:
    edges = graph.graph()
    assert "benchmarks.quickstart" in edges and "tools.import_graph" in edges
    edges["conformance.records.report"] = {*edges["conformance.records.report"], "benchmarks.quickstart"}
    edges["kernel.record"] = {*edges["kernel.record"], "tools.import_graph"}
    edges["benchmarks.quickstart"] = {*edges["benchmarks.quickstart"], "conformance.cli.fuzz"}
    found = graph.problems(edges)
    assert "conformance.records.report imports the front end benchmarks.quickstart" in found
    assert "kernel.record imports the front end tools.import_graph" in found
    assert "benchmarks.quickstart imports the front end conformance.cli.fuzz" in found
