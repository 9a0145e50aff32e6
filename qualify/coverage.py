"""Which kernel specializations a run qualified, and which it dispatched without qualifying.

A perf or engine item measures a kernel as production launches it; a numerics item shows a compiled variant
correct. A verdict vouches for what ships only if every variant the run dispatched was also qualified by a
passing item: otherwise speed was measured on something nobody showed correct, and the run is INCOMPLETE.
"""

from __future__ import annotations

from dataclasses import dataclass

from qualify.results import ItemResult, Status


@dataclass(frozen=True)
class CoverageRow:
    specialization: str
    qualified_by: tuple[str, ...]  # passing items that showed it correct
    dispatched_by: tuple[str, ...]  # items that launched it to measure something else

    def to_dict(self) -> dict[str, object]:
        return {
            "specialization": self.specialization,
            "qualified_by": list(self.qualified_by),
            "dispatched_by": list(self.dispatched_by),
        }


def specialization_coverage(results: list[ItemResult]) -> list[CoverageRow]:
    """One row per specialization any item qualified or dispatched, in name order."""
    qualified: dict[str, list[str]] = {}
    dispatched: dict[str, list[str]] = {}
    for r in results:
        if r.outcome is None:
            continue
        if r.status is Status.PASSED:
            for key in dict.fromkeys(r.outcome.qualifies):
                qualified.setdefault(key, []).append(r.name)
        for key in dict.fromkeys(r.outcome.dispatches):
            dispatched.setdefault(key, []).append(r.name)
    keys = sorted(set(qualified) | set(dispatched))
    return [CoverageRow(k, tuple(qualified.get(k, ())), tuple(dispatched.get(k, ()))) for k in keys]


def unqualified(rows: list[CoverageRow]) -> list[str]:
    """Specializations dispatched by some item and qualified by none that passed."""
    return [r.specialization for r in rows if r.dispatched_by and not r.qualified_by]
