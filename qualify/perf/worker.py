"""`python -m qualify.perf.worker --request R.json --result O.json [--profile]`

A fresh process measures one implementation over one shape set, so that no implementation inherits another's
allocator state, JIT caches in memory or L2 contents. The request names the `measure` function to import.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from qualify.perf.implementations import load_ref
from qualify.perf.spec import WorkRequest, WorkResult


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qualify.perf.worker", description=__doc__.split("\n\n")[1])
    ap.add_argument("--request", required=True, type=Path)
    ap.add_argument("--result", required=True, type=Path)
    ap.add_argument("--profile", action="store_true", help="one bracketed call per cell for ncu, no timing")
    args = ap.parse_args(argv)
    request = WorkRequest.model_validate_json(args.request.read_text())
    if args.profile:
        request = request.model_copy(update={"profile": True})
    measure: Callable[[WorkRequest], WorkResult] = load_ref(request.measure)
    result = measure(request)
    args.result.write_text(result.model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
