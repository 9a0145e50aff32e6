"""The report reshaped for reading: items grouped by gate, statuses ranked; nothing here knows a gate kind.

Everything here tolerates malformed input, because a tampered or foreign report is still rendered
(under a banner saying so) rather than crashing the page that must show the problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qualify.render.fmt import as_dict, as_float, as_list, as_text

# Worst first: a gate takes the worst status of its items, so one skipped cell cannot hide behind passes.
_STATUS_RANK = {"error": 0, "failed": 1, "incomplete": 2, "deselected": 3, "skipped": 4, "passed": 5}
# Item statuses in the order the count columns show them.
STATUSES = ("passed", "failed", "error", "incomplete", "skipped", "deselected")
# Statuses of items that ran (an incomplete item ran, but no check of it could have failed).
_RAN = ("passed", "failed", "error", "incomplete")
STATUS_HEADERS = ("passed", "failed", "errors", "vacuous/underpowered", "skipped", "deselected")


def item_status(item: dict[str, Any]) -> str:
    s = item.get("status")
    # Anything unrecognised counts as an error: an unknown status must never read as a pass.
    return s if s in _STATUS_RANK else "error"


def worst_status(statuses: list[str]) -> str:
    if not statuses:
        return "skipped"  # no items is "nothing shown", never a pass
    return min(statuses, key=lambda s: _STATUS_RANK.get(s, 0))


@dataclass(frozen=True)
class GateView:
    gate_id: str
    kind: str
    gate_file: str
    protects: str
    items: list[dict[str, Any]]

    @property
    def status(self) -> str:
        return worst_status([item_status(i) for i in self.items])

    def count(self, status: str) -> int:
        return sum(item_status(i) == status for i in self.items)


def items(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in as_list(report.get("items")) if isinstance(i, dict)]


def gates(report: dict[str, Any]) -> list[GateView]:
    """Items grouped by (gate file, gate id), in report order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for item in items(report):
        key = (as_text(item.get("gate_file")), as_text(item.get("gate_id")) or as_text(item.get("name")))
        groups.setdefault(key, []).append(item)
    return [
        GateView(
            gate_id=gate_id,
            kind=as_text(group[0].get("kind")) or "?",
            gate_file=gate_file,
            protects=as_text(group[0].get("protects")),
            items=group,
        )
        for (gate_file, gate_id), group in groups.items()
    ]


def items_of_kind(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [i for i in items(report) if i.get("kind") == kind]


@dataclass(frozen=True)
class CheckRow:
    """One row of a gate table: a check, or a placeholder for an item that produced none."""

    item: str
    status: str
    reason: str
    check: dict[str, Any] | None


def check_rows(gate: GateView) -> list[CheckRow]:
    rows = []
    for item in gate.items:
        name = as_text(item.get("name"))
        status = item_status(item)
        reason = as_text(item.get("reason"))
        checks = [c for c in as_list(item.get("checks")) if isinstance(c, dict)]
        if not checks:
            rows.append(CheckRow(name, status, reason, None))
        rows.extend(CheckRow(name, status, reason, c) for c in checks)
    return rows


def check_outcome(check: dict[str, Any]) -> str:
    outcome = check.get("outcome")
    if outcome in ("pass", "fail", "inconclusive"):
        # A check that claims "pass" but says passed=false is shown as the worse of the two.
        if outcome == "pass" and check.get("passed") is not True:
            return "fail"
        return outcome
    return "pass" if check.get("passed") is True else "fail"


def item_tables(gate: GateView, replaced: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Each distinct item table of a gate once (matrix cells often repeat the same table).

    Tables whose title contains one of `replaced` (case-insensitive) are left out: a kind's summary
    section shows them already.
    """
    seen: set[str] = set()
    out = []
    for item in gate.items:
        for table in as_list(item.get("tables")):
            if not isinstance(table, dict):
                continue
            title = as_text(table.get("title")).lower()
            if any(r.lower() in title for r in replaced):
                continue
            key = as_text(table, limit=10**9)
            if key not in seen:
                seen.add(key)
                out.append(table)
    return out


def counts(report: dict[str, Any]) -> dict[str, int]:
    """Counts recomputed from the items, so a report whose `counts` disagree cannot flatter itself."""
    statuses = [item_status(i) for i in items(report)]
    out = {s: statuses.count(s) for s in STATUSES}
    out["ran"] = sum(out[s] for s in _RAN)
    out["total"] = len(statuses)
    return out


def counts_line(c: dict[str, int]) -> str:
    """The first-screen tally: what ran, what could not have failed, and what never ran (skipped or deselected)."""
    return (
        f"{c['ran']} ran ({c['passed']} passed, {c['failed']} failed, {c['error']} errors, "
        f"{c['incomplete']} vacuous or underpowered); {c['skipped']} skipped; {c['deselected']} deselected "
        f"— {c['total']} items."
    )


def verdict(report: dict[str, Any]) -> str:
    v = report.get("verdict")
    return v if v in ("PASS", "FAIL", "INCOMPLETE") else "UNKNOWN"


def value_or_none(d: dict[str, Any], key: str) -> float | None:
    return as_float(d.get(key))


def computed_verdict(report: dict[str, Any]) -> str:
    """The verdict the items imply (same rule as qualify.results.verdict), to flag a report that disagrees."""
    statuses = [item_status(i) for i in items(report)]
    if any(s in ("failed", "error") for s in statuses):
        return "FAIL"
    if not statuses or any(s != "passed" for s in statuses):
        return "INCOMPLETE"
    return "INCOMPLETE" if unqualified_specializations(report) else "PASS"


def coverage_rows(report: dict[str, Any]) -> list[tuple[str, list[str], list[str]]]:
    """(specialization, passing items that qualified it, items that dispatched it), read from the items
    themselves (not the report's own coverage block, which a tampered report could contradict)."""
    qualified: dict[str, list[str]] = {}
    dispatched: dict[str, list[str]] = {}
    for item in items(report):
        spec = as_dict(item.get("specializations"))
        name = as_text(item.get("name"))
        if item_status(item) == "passed":
            for key in as_list(spec.get("qualified")):
                qualified.setdefault(as_text(key), []).append(name)
        for key in as_list(spec.get("dispatched")):
            dispatched.setdefault(as_text(key), []).append(name)
    return [(k, qualified.get(k, []), dispatched.get(k, [])) for k in sorted(set(qualified) | set(dispatched))]


def unqualified_specializations(report: dict[str, Any]) -> list[str]:
    """Specializations some item dispatched and no passing item qualified."""
    return [key for key, qualified, dispatched in coverage_rows(report) if dispatched and not qualified]
