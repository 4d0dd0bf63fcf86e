"""The layering holds: no import cycle, no upward import, the core imports no front end, kernel by
role (the base imports no family, a family only the base and itself, the catalogue alone imports
the families), oracle and strategies import the kernel base only (tools/import_graph.py states the
rules; docs/import-graph.png is its picture, docs/explanation/architecture.md the recipe's route through it)."""

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
    edges["strategies.materialize"] = {*edges["strategies.materialize"], "kernel.peers.keys"}
    found = graph.problems(edges)
    assert "conformance.judging.checks imports the front end conformance.suite.plugin" in found
    assert any(line.startswith("kernel.record (layer kernel) imports the higher layer oracle.bound") for line in found)
    assert any(line.startswith("import cycle:") and "kernel.fp8" in line for line in found)
    assert "strategies.materialize imports kernel.peers.keys (the family kernel.peers; strategies imports the kernel base only)" in found


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


def test_the_rules_keep_kernel_by_role() -> None:
    edges = graph.graph()
    for family in graph.KERNEL_FAMILIES:
        assert any(graph.kernel_family(name) == family for name in edges), family
    assert graph.is_kernel_base("kernel.record") and graph.is_kernel_base("kernel.writers.sglang")
    assert not graph.is_kernel_base("kernel.registry") and not graph.is_kernel_base("kernel.isa.asm")
    added = {
        "kernel.record": "kernel.emulated.gfx950",
        "kernel.engines": "kernel.registry",
        "kernel.peers.flashmla": "kernel.emulated.gfx950",
        "kernel.isa.asm": "kernel.flydsl.compile",
        "kernel.emulated.gfx950": "kernel.registry",
        "oracle.bound": "kernel.peers.keys",
        "kernel.flydsl.compile": "kernel.isa.asm",
    }
    for source, target in added.items():
        edges[source] = {*edges[source], target}
    found = graph.problems(edges)
    assert "kernel.record imports kernel.emulated.gfx950 (the kernel base imports no family and not the catalogue)" in found
    assert "kernel.engines imports kernel.registry (the kernel base imports no family and not the catalogue)" in found
    assert "kernel.peers.flashmla imports kernel.emulated.gfx950 (a kernel family imports the base and itself only)" in found
    assert "kernel.isa.asm imports kernel.flydsl.compile (a kernel family imports the base and itself only)" in found
    assert "kernel.emulated.gfx950 imports kernel.registry (only conformance and tests import the catalogue)" in found
    assert "oracle.bound imports kernel.peers.keys (the family kernel.peers; oracle imports the kernel base only)" in found
    assert not any(line.startswith("kernel.flydsl.compile imports kernel.isa") for line in found)  # the allowed edge
