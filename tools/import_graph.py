"""The project's import graph: layers, the rules it must keep, and a picture.

Reads every module of the four packages and of the developer front ends (benchmarks, tools)
with `ast` (imports inside functions count too: a lazy import is still a dependency) and checks:
- no import cycle between modules;
- layering: kernel -> oracle / strategies -> conformance core -> front ends; a module imports
  only its own layer or lower ones;
- kernel by role: the base (the contract and codec: kernel, kernel.contract, record, fp8,
  backend, fastpath, cuda_binary, engines, writers, ...) imports no kernel family and not the
  catalogue; a family (kernel.emulated, kernel.peers, kernel.flydsl, kernel.isa) imports the base
  and itself only, except kernel.flydsl -> kernel.isa (its checks read the assembly, its backend
  launches it); so kernel.isa, the interpreter, imports no other family (it builds nothing); the
  catalogue (kernel.registry) is the one module that imports the families, and nothing in kernel
  imports it (conformance and tests do);
- oracle and strategies import the kernel base only: the data package builds tensors and the
  oracle computes the reference, the harness calls the kernel;
- the core imports no front end (conformance.suite, conformance.cli, conformance.mutation, and the
  developer front ends benchmarks and tools, which nothing else imports), and front ends do not
  import each other, with these allowed edges: the command line (conformance.cli) runs the mutation
  score (conformance.mutation) for its `mutation-score` subcommand; tools.cli_reference reads the
  command line's parsers, the suite's options and the benchmark routines to write their reference
  tables (tools -> conformance.cli, conformance.suite, benchmarks); benchmarks.fuzz_kills reads
  the mutant catalogue's names (benchmarks -> conformance.mutation); conformance.__main__ starts
  the command line (benchmarks that run the command line do so in a subprocess or through runpy:
  not an import edge);
- inside the core, packages import downward only: durability (rank 0) <- judging (1) <- records
  (2) <- fleet, tools (3) <- campaign (4); a core module imports no core package of a higher rank.
The mutation score also runs suite tests in-process by name (conformance.mutation.kills, through
importlib): not an import edge. docs/explanation/architecture.md follows a recipe through these layers.

    python -m tools.import_graph [--png docs/import-graph.png]

Exit 0 when every rule holds, 1 with one line per broken rule.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernel", "oracle", "strategies", "conformance", "benchmarks", "tools")
FRONT_ENDS = ("conformance.suite", "conformance.cli", "conformance.mutation", "benchmarks", "tools")
ENTRY_POINTS = {"conformance.__main__"}
ALLOWED_FRONT_END_EDGES = {
    ("conformance.cli", "conformance.mutation"),
    ("tools", "conformance.cli"),
    ("tools", "conformance.suite"),
    ("tools", "benchmarks"),
    ("benchmarks", "conformance.mutation"),
}
LAYER = {"kernel": 0, "oracle": 1, "strategies": 1, "conformance": 2, "benchmarks": 3, "tools": 3}
KERNEL_FAMILIES = ("kernel.emulated", "kernel.peers", "kernel.flydsl", "kernel.isa")
FAMILY_EDGES = {("kernel.flydsl", "kernel.isa")}
CATALOGUE = "kernel.registry"
CORE_RANK = {
    "conformance.durability": 0,
    "conformance.judging": 1,
    "conformance.records": 2,
    "conformance.fleet": 3,
    "conformance.campaign": 4,
    "conformance.tools": 3,
}


def core_rank(name: str) -> tuple[str, int] | None:
    """The core package of `name` and its rank (CORE_RANK), or None outside them."""
    return next(((p, r) for p, r in CORE_RANK.items() if name == p or name.startswith(p + ".")), None)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """Project modules `name` imports (the longest known prefix of each imported name)."""
    known = set(known)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for imported in names:
            parts = imported.split(".")
            for cut in range(len(parts), 0, -1):
                candidate = ".".join(parts[:cut])
                if candidate in known:
                    if candidate != name:
                        targets.add(candidate)
                    break
    return targets


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, found) for name, path in found.items()}


def _is_front_end(name: str) -> str | None:
    return next((f for f in FRONT_ENDS if name == f or name.startswith(f + ".")), None)


def kernel_family(name: str) -> str | None:
    """The kernel family of `name` (KERNEL_FAMILIES), or None."""
    return next((f for f in KERNEL_FAMILIES if name == f or name.startswith(f + ".")), None)


def is_kernel_base(name: str) -> bool:
    """A module of kernel that is neither in a family nor the catalogue."""
    return (name == "kernel" or name.startswith("kernel.")) and name != CATALOGUE and kernel_family(name) is None


def _kernel_rule(source: str, target: str) -> str | None:
    """The kernel-by-role rule the edge breaks (module docstring), or None."""
    if not (target == "kernel" or target.startswith("kernel.")) or is_kernel_base(target):
        return None
    what = "the catalogue" if target == CATALOGUE else f"the family {kernel_family(target)}"
    if source.startswith(("oracle.", "strategies.")) or source in ("oracle", "strategies"):
        return f"{source} imports {target} ({what}; {source.split('.')[0]} imports the kernel base only)"
    if is_kernel_base(source):
        return f"{source} imports {target} (the kernel base imports no family and not the catalogue)"
    family = kernel_family(source)
    if family is not None and target == CATALOGUE:
        return f"{source} imports {target} (only conformance and tests import the catalogue)"
    if family is not None and kernel_family(target) != family and (family, kernel_family(target)) not in FAMILY_EDGES:
        return f"{source} imports {target} (a kernel family imports the base and itself only)"
    return None


def _parent_packages(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def problems(edges: dict[str, set[str]]) -> list[str]:
    """One line per broken rule (empty when the graph keeps them all)."""
    found: list[str] = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if target in _parent_packages(source):
                continue  # a package's __init__ runs first anyway; it is not a dependency
            front = _is_front_end(target)
            source_front = _is_front_end(source)
            if front and source_front != front and source not in ENTRY_POINTS and (source_front, front) not in ALLOWED_FRONT_END_EDGES:
                found.append(f"{source} imports the front end {target}")
            if LAYER[source.split(".")[0]] < LAYER[target.split(".")[0]]:
                found.append(f"{source} (layer {source.split('.')[0]}) imports the higher layer {target}")
            source_core, target_core = core_rank(source), core_rank(target)
            if source_core and target_core and source_core[1] < target_core[1]:
                found.append(f"{source} ({source_core[0]}) imports the higher core package {target}")
            broken = _kernel_rule(source, target)
            if broken:
                found.append(broken)
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(edges)]
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module, as a cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(e for e in edges.get(node, ()) if e not in _parent_packages(node)):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def group_of(name: str) -> str:
    if name in ENTRY_POINTS:
        return "conformance.cli"
    if name == CATALOGUE:
        return name
    front = _is_front_end(name)
    if front:
        return front
    if kernel_family(name):
        return kernel_family(name)  # type: ignore[return-value]
    if is_kernel_base(name):
        return "kernel (base)"
    core = core_rank(name)
    if core:
        return core[0]
    return name.split(".")[0] if name.split(".")[0] != "conformance" else "conformance (core)"


def draw(edges: dict[str, set[str]], path: Path) -> None:
    """A picture of the graph between groups (packages, the backends, the core, each front end)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, set[str]] = {}
    for source, targets in edges.items():
        for target in targets:
            a, b = group_of(source), group_of(target)
            if a != b and target not in _parent_packages(source):
                groups.setdefault(a, set()).add(b)
    rows = [
        ["benchmarks", "tools"],
        ["conformance.suite", "conformance.cli", "conformance.mutation"],
        ["conformance.campaign", "conformance.fleet", "conformance.tools", "conformance (core)"],
        ["conformance.records"],
        ["conformance.judging"],
        ["conformance.durability"],
        ["oracle", "strategies", "kernel.registry"],
        ["kernel.emulated", "kernel.peers", "kernel.flydsl", "kernel.isa"],
        ["kernel (base)"],
    ]
    pos = {}
    for r, row in enumerate(rows):
        for c, name in enumerate(row):
            pos[name] = ((c + 1) / (len(row) + 1), 1 - (r + 0.5) / len(rows))
    sizes = {}
    for name in modules():
        sizes[group_of(name)] = sizes.get(group_of(name), 0) + 1
    fig, ax = plt.subplots(figsize=(11, 12))
    for a, targets in groups.items():
        for b in targets:
            if a in pos and b in pos:
                ax.annotate(
                    "",
                    xy=pos[b],
                    xytext=pos[a],
                    arrowprops={
                        "arrowstyle": "->",
                        "color": "tab:red" if pos[b][1] > pos[a][1] else "0.45",
                        "shrinkA": 28,
                        "shrinkB": 28,
                        "connectionstyle": "arc3,rad=0.08",
                    },
                )
    for name, (x, y) in pos.items():
        colour = "#e8f0fe" if _is_front_end(name) else ("#fdf2e0" if core_rank(name) or name == "conformance (core)" else "#f4f4f4")
        ax.text(
            x,
            y,
            f"{name}\n{sizes.get(name, 0)} modules",
            ha="center",
            va="center",
            fontsize=10,
            bbox={"boxstyle": "round", "facecolor": colour, "edgecolor": "0.3"},
        )
    ax.set_axis_off()
    ax.set_title("Import graph between groups (arrow: imports; red would be an upward import)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--png", type=Path, help="write the picture here")
    args = parser.parse_args(argv)
    edges = graph()
    if args.png:
        draw(edges, args.png)
    found = problems(edges)
    for line in found:
        print(line)
    print(f"{len(edges)} modules, {sum(len(t) for t in edges.values())} imports, {len(found)} broken rules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
