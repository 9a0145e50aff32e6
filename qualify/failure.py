"""How a failed gate item reads: like a hypothesis-test report, not a traceback."""

from __future__ import annotations

import json
import math

from qualify.errors import QualifyError
from qualify.results import FRACTION_UNITS, Check, ItemOutcome


class GateCheckFailed(QualifyError):
    """Raised by a gate item whose checks did not all pass; carries the raw outcome."""

    def __init__(self, item_name: str, protects: str, outcome: ItemOutcome):
        self.item_name = item_name
        self.protects = protects
        self.outcome = outcome
        super().__init__(f"{item_name}: {sum(not c.passed for c in outcome.checks)} check(s) failed")

    def diagnostics(self) -> str:
        return render_outcome(self.item_name, self.protects, self.outcome)


def fmt_value(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if unit in FRACTION_UNITS:
        return f"{value * 100:.4g} %"
    if abs(value) >= 1e4 or (value != 0 and abs(value) < 1e-3):
        return f"{value:.4e}{unit and ' ' + unit}"
    return f"{value:.5g}{unit and ' ' + unit}"


def _row(c: Check) -> list[str]:
    ci = "-"
    if c.ci_low is not None and c.ci_high is not None:
        ci = f"[{fmt_value(c.ci_low, c.unit)}, {fmt_value(c.ci_high, c.unit)}]"
    status = (c.outcome or ("pass" if c.passed else "fail")).upper()
    return [
        status,
        c.name,
        fmt_value(c.observed, c.unit),
        ci,
        f"{c.operator} {fmt_value(c.threshold, c.unit)}",
        fmt_value(c.value_decided, c.unit),
        c.statistic,
        "-" if c.n is None else str(c.n),
    ]


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=False))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)) for r in rows]
    return "\n".join(lines)


def render_outcome(item_name: str, protects: str, outcome: ItemOutcome) -> str:
    failed = [c for c in outcome.checks if not c.passed]
    head = f"gate {item_name}: {len(failed)} of {len(outcome.checks)} check(s) did not pass"
    table = format_table(
        ["result", "check", "observed", "95% CI", "threshold", "decided on", "statistic", "n"],
        [_row(c) for c in outcome.checks],
    )
    parts = [head, f"protects: {protects}", "", table]
    if outcome.notes:
        parts += ["", *[f"note: {n}" for n in outcome.notes]]
    if outcome.parameters:
        parts += ["", "parameters: " + json.dumps(outcome.parameters, sort_keys=True, default=str)]
    return "\n".join(parts)
