"""Print the import graph of qualify/ and kernels/cartridge_attn/ as Graphviz DOT.

    python scripts/import_graph.py                  # modules
    python scripts/import_graph.py --depth 2        # subpackages (qualify.X)
    python scripts/import_graph.py --depth 2 | dot -Tsvg > imports.svg

What counts as an import is documented in qualify/devtools/imports.py (shared with tests/test_architecture.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qualify.devtools.imports import collapse, import_graph, project_roots, to_dot


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=0, help="collapse to the first N name parts (0: whole modules)")
    args = ap.parse_args()
    graph = import_graph(project_roots(Path(__file__).resolve().parents[1]))
    print(to_dot(collapse(graph, args.depth) if args.depth else graph), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
