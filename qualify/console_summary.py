"""The gate summary the terminal shows after a run: what ran, a line per gate, and skips grouped by reason.

A run on a CPU host skips most GPU items for one reason; listing each of them with its reason cut to fit a
column hid the part a release engineer acts on. So: items that ran get a row each with their gate's primary
check as headline; skipped and deselected items are counted per reason, each reason shown in full (wrapped).
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from qualify.failure import fmt_value, format_table
from qualify.results import Check, ItemResult, Status

NOT_RUN = (Status.SKIPPED, Status.DESELECTED)
ROLLUP_ORDER = (Status.PASSED, Status.FAILED, Status.ERROR, Status.INCOMPLETE, Status.SKIPPED, Status.DESELECTED)
# A rollup line names its top reason briefly; skip and deselection reasons are given in full further down.
ROLLUP_REASON_CHARS = 70


def headline_check(checks: list[Check], primary: Callable[[Check], bool] | None) -> Check | None:
    """A failed check if any (that is the news), else the kind's primary check, else the first."""
    if not checks:
        return None
    failed = next((c for c in checks if not c.passed), None)
    if failed is not None:
        return failed
    if primary is not None:
        chosen = next((c for c in checks if primary(c)), None)
        if chosen is not None:
            return chosen
    return checks[0]


def headline(result: ItemResult, primary: Callable[[Check], bool] | None) -> str:
    if result.outcome is None or result.status is Status.INCOMPLETE:
        return result.reason or ""
    c = headline_check(result.outcome.checks, primary)
    if c is None:
        return result.reason or ""
    return f"{c.name}: {fmt_value(c.observed, c.unit)} {c.operator} {fmt_value(c.threshold, c.unit)}"


@dataclass(frozen=True)
class GateRollup:
    gate: str
    counts: Counter[Status]
    top_reason: str

    def line(self) -> str:
        parts = [f"{self.counts[s]} {s.value}" for s in ROLLUP_ORDER if self.counts[s]]
        tail = f"  ({self.top_reason})" if self.top_reason else ""
        return f"{self.gate}: {', '.join(parts)}{tail}"


def gate_rollups(results: list[ItemResult]) -> list[GateRollup]:
    """One rollup per gate in run order; the top reason is the commonest among items that did not pass."""
    gates: dict[str, list[ItemResult]] = {}
    for r in results:
        gates.setdefault(r.gate_id, []).append(r)
    rollups = []
    for gate, items in gates.items():
        reasons = Counter(r.reason for r in items if r.status is not Status.PASSED and r.reason)
        top = ""
        if reasons:
            reason, n = reasons.most_common(1)[0]
            if len(reason) > ROLLUP_REASON_CHARS:
                reason = reason[: ROLLUP_REASON_CHARS - 3].rstrip() + "..."
            top = f"{n}x {reason}" if n > 1 else reason
        rollups.append(GateRollup(gate, Counter(r.status for r in items), top))
    return rollups


def not_run_groups(results: list[ItemResult]) -> list[tuple[Status, str, int]]:
    """(status, reason, count) for skipped and deselected items, the largest group first."""
    groups = Counter((r.status, r.reason or "no reason given") for r in results if r.status in NOT_RUN)
    return [(status, reason, n) for (status, reason), n in groups.most_common()]


def summary_lines(
    results: list[ItemResult], primary_of: Callable[[str], Callable[[Check], bool] | None], width: int = 100
) -> list[str]:
    """The whole summary as lines: ran items, per-gate rollups, then not-run groups with full reasons."""
    lines: list[str] = []
    ran = [r for r in results if r.status not in NOT_RUN]
    if ran:
        rows = [[r.name, r.status.value.upper(), f"{r.duration_s:.1f}s", headline(r, primary_of(r.kind))] for r in ran]
        lines += format_table(["item", "status", "time", "headline / reason"], rows).splitlines()
        shared = sum(r.shared_setup_s for r in results)
        if shared >= 0.05:
            lines.append(f"(times are each item's own; shared setup such as model loads took {shared:.1f}s more)")
        lines.append("")
    lines.append("per gate:")
    lines += [f"  {g.line()}" for g in gate_rollups(results)]
    groups = not_run_groups(results)
    if groups:
        lines += ["", "not run (by reason):"]
        for status, reason, n in groups:
            lead = f"  {n} {status.value}: "
            wrapped = textwrap.wrap(reason, width=max(40, width - len(lead)), break_on_hyphens=False) or [""]
            lines.append(lead + wrapped[0])
            lines += [" " * len(lead) + more for more in wrapped[1:]]
    return lines
