"""The module import graph of source trees, read with `ast` (nothing is imported), and its cycles.

What counts as an edge from module A to module B: every `import` statement in A's file that names B,
wherever it stands: at module level, inside functions (deferred imports still couple the modules: the
dependency is only postponed) and under `if TYPE_CHECKING:` (a type that must come from above is a
layering problem too). `from P import x` is an edge to the module `P.x` when that is a module of the
tree, else to `P`. Relative imports are resolved against A's package. An import of a module outside the
trees is not an edge; an import of a name inside one is an edge to the longest module prefix of it.
Parent packages are not implied: importing `P.m` runs `P/__init__.py` too, but counting that would make
every package whose `__init__` re-exports a submodule a cycle with its own submodules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

Graph = dict[str, set[str]]


@dataclass(frozen=True)
class SourceRoot:
    """A package directory and the dotted name it is imported as (e.g. kernels/cartridge_attn as cartridge_attn)."""

    package: str
    path: Path


def modules(roots: Iterable[SourceRoot]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file below the roots (a package is its __init__.py)."""
    out: dict[str, Path] = {}
    for root in roots:
        for f in sorted(root.path.rglob("*.py")):
            parts = [root.package, *f.relative_to(root.path).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def _owner(name: str, known: Mapping[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.AST, module: str, is_package: bool, known: Mapping[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def import_graph(roots: Iterable[SourceRoot]) -> Graph:
    """Module -> the modules of the same trees it imports (see the module docstring for what counts)."""
    known = modules(roots)
    graph: Graph = {m: set() for m in known}
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for target in _targets(node, module, is_package, known):
                owner = _owner(target, known)
                if owner is not None and owner != module:
                    graph[module].add(owner)
    return graph


def collapse(graph: Mapping[str, set[str]], depth: int) -> Graph:
    """The graph of subpackages: each module mapped to its first `depth` name parts (qualify.X for depth 2)."""

    def group(m: str) -> str:
        return ".".join(m.split(".")[:depth])

    out: Graph = {}
    for m, targets in graph.items():
        out.setdefault(group(m), set())
        for t in targets:
            if group(t) != group(m):
                out[group(m)].add(group(t))
    return out


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def cycle_path(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """One concrete cycle through a component, as a -> b -> ... -> a, for a readable failure message."""
    members = set(component)
    start = component[0]
    # Breadth-first from start's successors back to start, inside the component.
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for t in sorted(graph.get(node, ())):
                if t not in members or t in previous:
                    continue
                previous[t] = node
                if t == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(previous[path[-1]])
                    return list(reversed(path))
                nxt.append(t)
        frontier = nxt
    return component


def to_dot(graph: Mapping[str, set[str]], name: str = "imports") -> str:
    """The graph in Graphviz DOT, edges in a stable order."""
    lines = [f"digraph {name} {{", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    for m in sorted(graph):
        lines.append(f'  "{m}";')
        lines += [f'  "{m}" -> "{t}";' for t in sorted(graph[m])]
    lines.append("}")
    return "\n".join(lines) + "\n"


def project_roots(repo: Path) -> list[SourceRoot]:
    """The trees this project checks: the `qualify` package and the kernel package."""
    return [SourceRoot("qualify", repo / "qualify"), SourceRoot("cartridge_attn", repo / "kernels" / "cartridge_attn")]
