"""Run kernel_numerics cells of a gate file in this process and print one JSON line per item.

Used by the tests in a subprocess, because the Triton interpreter must be chosen (TRITON_INTERPRET=1)
before triton is first imported. argv: GATE_FILE
"""

from __future__ import annotations

import json
import sys

from qualify.compile import compile_gate_file
from qualify.context import RunContext
from qualify.host import detect_host
from qualify.kinds.kernel_numerics.runner import run
from qualify.registry import default_registry


def main() -> None:
    gate_file = sys.argv[1]
    ctx = RunContext(host=detect_host(), seed=0)
    for item in compile_gate_file(gate_file, default_registry(), env={}).items:
        outcome = run(item, ctx)
        failed = [c.name for c in outcome.checks if not c.passed]
        measured = outcome.measurements.model_dump()
        print(
            json.dumps(
                {
                    "item": item.name,
                    "passed": outcome.passed,
                    "failed": failed,
                    **{k: measured[k] for k in ("rel_l2", "max_abs_err", "nan_count", "violations")},
                    **{k: measured[k] for k in ("rel_l2_f64", "oracle_rel_l2_f64", "oracle_f64")},
                    "qualifies": outcome.qualifies,
                    "checks": [c.name for c in outcome.checks],
                }
            )
        )


if __name__ == "__main__":
    main()
