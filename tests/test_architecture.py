"""The import structure: no cycles among modules or among subpackages, and no module importing a layer above it.

Read with `ast` from the source (see qualify/devtools/imports.py for exactly which imports count: all of them,
including those inside functions and under TYPE_CHECKING). `python scripts/import_graph.py --depth 2` draws it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.devtools.imports import Graph, collapse, cycle_path, cycles, import_graph, project_roots

REPO = Path(__file__).resolve().parents[1]

# Packages that measure things (domain code) and the core that collects gates: neither may import the layers
# built on them (the gate kinds, the pytest plugin and its session, the command line, reports, rendering).
DOMAIN = ("qualify.loss", "qualify.accuracy", "qualify.perf", "qualify.numerics", "qualify.stats", "qualify.quant",
          "qualify.cartridge", "qualify.models", "qualify.serve", "cartridge_attn")  # fmt: skip
CORE = ("qualify.registry", "qualify.compile", "qualify.gate", "qualify.schema", "qualify.results", "qualify.context",
        "qualify.errors", "qualify.host", "qualify.hashing")  # fmt: skip
ABOVE_DOMAIN = ("qualify.kinds", "qualify.plugin", "qualify.session", "qualify.cli", "qualify.report", "qualify.render")
ABOVE_KINDS = ("qualify.plugin", "qualify.session", "qualify.cli", "qualify.report")


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(project_roots(REPO))


def _describe(g: Graph) -> str:
    return "\n".join(" -> ".join(cycle_path(g, c)) for c in cycles(g))


def test_the_graph_sees_the_project(graph: Graph) -> None:
    # A reader that found nothing would pass every rule below; make sure it reads what it should.
    assert {"qualify.cli", "qualify.registry", "qualify.kinds.loss_increase.runner", "cartridge_attn.api"} <= set(graph)
    assert "qualify.compile" in graph["qualify.cli"]
    assert "qualify.context" in graph["qualify.kinds.loss_increase.runner"]


def test_no_import_cycle_among_modules(graph: Graph) -> None:
    assert not cycles(graph), "import cycles among modules:\n" + _describe(graph)


def test_no_import_cycle_among_subpackages(graph: Graph) -> None:
    packages = collapse(graph, 2)
    assert not cycles(packages), "import cycles among subpackages (qualify.X):\n" + _describe(packages)


def upward_imports(g: Graph) -> list[str]:
    def up(module: str, target: str) -> bool:
        if _in(module, DOMAIN) or _in(module, CORE):
            return _in(target, ABOVE_DOMAIN)
        return _in(module, ("qualify.kinds",)) and _in(target, ABOVE_KINDS)

    return [f"{m} -> {t}" for m, targets in g.items() for t in sorted(targets) if up(m, t)]


def test_no_upward_imports(graph: Graph) -> None:
    assert upward_imports(graph) == []


def test_the_checks_can_fail() -> None:
    # The same functions on small graphs with the faults they must report.
    looped = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "b.w": set()}
    assert cycles(looped) == [["a.x", "a.y", "a.z"]]
    assert cycle_path(looped, ["a.x", "a.y", "a.z"]) == ["a.x", "a.y", "a.z", "a.x"]
    packages = collapse({"p.a.m": {"p.b.n"}, "p.b.n": {"p.a.k"}, "p.a.k": set()}, 2)
    assert cycles(packages) == [["p.a", "p.b"]]
    assert upward_imports({"qualify.loss.evaluate": {"qualify.kinds.loss_increase.params"}}) == [
        "qualify.loss.evaluate -> qualify.kinds.loss_increase.params"
    ]


def test_deferred_and_type_checking_imports_count(tmp_path: Path) -> None:
    from qualify.devtools.imports import SourceRoot

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    g = import_graph([SourceRoot("pkg", pkg)])
    assert g["pkg.a"] == {"pkg.b"} and g["pkg.b"] == {"pkg.a"}
    assert cycles(g) == [["pkg.a", "pkg.b"]]
