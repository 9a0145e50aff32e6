"""What a gate item measured and decided, and the run's verdict."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal

from qualify.schema.models import MeasurementModel


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"
    # Compiled but not selected (`-k` / `-m`): nothing was shown for it, so the run cannot be a PASS.
    DESELECTED = "deselected"
    # Ran and no check failed, but no check could have failed (vacuous or underpowered): nothing was shown.
    INCOMPLETE = "incomplete"


class Verdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCOMPLETE = "INCOMPLETE"


# Units whose values are fractions and read as percentages: "fraction" is what checks store now; "%" is how
# earlier reports labelled the same fractions (0.0013 meant 0.13 %), so it reads the same way.
FRACTION_UNITS = frozenset({"fraction", "%"})

_OPERATORS = {
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}


@dataclass(frozen=True)
class Check:
    """One hypothesis-test-like decision: `observed OP threshold`, with the statistic that produced it.

    `decided_on` is the number the decision used (for example the upper end of a CI); it defaults to
    `observed`. `outcome` may be "inconclusive" for CI-based decisions that neither clear nor miss.
    """

    name: str
    observed: float
    operator: str
    threshold: float
    statistic: str
    n: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    decided_on: float | None = None
    unit: str = ""
    outcome: str | None = None

    def __post_init__(self) -> None:
        if self.operator not in _OPERATORS:
            raise ValueError(f"operator must be one of {sorted(_OPERATORS)}, got {self.operator!r}")
        if self.outcome not in (None, "pass", "fail", "inconclusive"):
            raise ValueError(f"outcome must be pass, fail or inconclusive, got {self.outcome!r}")

    @property
    def value_decided(self) -> float:
        return self.observed if self.decided_on is None else self.decided_on

    @property
    def nan_reason(self) -> str | None:
        """Why a NaN makes this check fail, or None. It overrides even an explicit outcome: a broken
        measurement must never look like a pass (or like a merely inconclusive one)."""
        if math.isnan(self.observed):
            return "observed value is NaN"
        if math.isnan(self.value_decided):
            return "value decided on is NaN"
        return None

    @property
    def passed(self) -> bool:
        if self.nan_reason is not None:
            return False
        if self.outcome is not None:
            return self.outcome == "pass"
        return _OPERATORS[self.operator](self.value_decided, self.threshold)

    @property
    def decided_outcome(self) -> str:
        if self.nan_reason is not None:
            return "fail"
        return self.outcome or ("pass" if self.passed else "fail")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["outcome"] = self.decided_outcome
        return d


@dataclass(frozen=True)
class InputRef:
    """A file that was qualified; its digest becomes a subject of the signed statement."""

    name: str
    path: str
    sha256: str
    role: str  # cartridge, eval-set, dataset, kernel-source, model, ...


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]


Weakness = Literal["vacuous", "underpowered"]


@dataclass(frozen=True)
class Shortfall:
    """Why an item's checks could not have failed: `vacuous` (for example the reference scored 0, or every
    sample was equal) or `underpowered` (n below what the bound needs). Such an item is INCOMPLETE, never PASS."""

    kind: Weakness
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass
class ItemOutcome:
    """What a runner returns. The item fails when any check fails; when none fails but `shortfalls` says no
    check could have failed, the item is INCOMPLETE.

    `measurements` is an instance of the kind's measurements model (None when nothing was measured);
    `parameters` are the fields as recorded (`KindParams.report_parameters`, thresholds left to the checks).
    """

    checks: list[Check] = field(default_factory=list)
    measurements: MeasurementModel | None = None
    tables: list[Table] = field(default_factory=list)
    inputs: list[InputRef] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    shortfalls: list[Shortfall] = field(default_factory=list)
    # Kernel specializations (compiled-variant keys) this item showed correct, and those it launched to measure
    # something else (speed): a run may only vouch for what it dispatched if a passing item qualified it.
    qualifies: list[str] = field(default_factory=list)
    dispatches: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def failure_reason(self) -> str:
        failed = [c.name + (f" ({c.nan_reason})" if c.nan_reason else "") for c in self.checks if not c.passed]
        return "failed checks: " + ", ".join(failed)

    def settled_status(self) -> tuple[Status, str | None]:
        """The item's status from its checks: a pass that could not have been a failure is INCOMPLETE, and so is
        an inconclusive check of an item that declared itself underpowered (its CI straddles the bound because
        the sample is too small to decide, which is no evidence either way). Anywhere else an inconclusive check
        fails the item (a comparison that should have decided and did not)."""
        decided = [c.decided_outcome for c in self.checks]
        if not decided or "fail" in decided:
            return Status.FAILED, self.failure_reason()
        why = "; ".join(dict.fromkeys(str(s) for s in self.shortfalls))
        if "inconclusive" in decided:
            if not any(s.kind == "underpowered" for s in self.shortfalls):
                return Status.FAILED, self.failure_reason()
            open_checks = ", ".join(c.name for c in self.checks if c.decided_outcome == "inconclusive")
            return Status.INCOMPLETE, f"{why}; inconclusive at this n (the CI straddles the bound): {open_checks}"
        if self.shortfalls:
            return Status.INCOMPLETE, why
        return Status.PASSED, None


@dataclass
class ItemResult:
    nodeid: str
    name: str
    gate_id: str
    cell_id: str | None
    kind: str
    gate_file: str
    requires: list[str]
    description: str
    status: Status
    reason: str | None = None
    duration_s: float = 0.0  # the item's own seconds
    outcome: ItemOutcome | None = None
    shared_setup_s: float = 0.0  # memoized work first built for this item, reused by later ones
    gpu: str | None = None  # under `qualify run --gpus`: the GPU (CUDA_VISIBLE_DEVICES) its worker was pinned to

    def to_dict(self) -> dict[str, Any]:
        o = self.outcome or ItemOutcome()
        return {
            "nodeid": self.nodeid,
            "name": self.name,
            "gate_id": self.gate_id,
            "cell": self.cell_id,
            "kind": self.kind,
            "gate_file": self.gate_file,
            "requires": list(self.requires),
            "protects": self.description,
            "status": self.status.value,
            "reason": self.reason,
            "duration_s": round(self.duration_s, 3),
            "shared_setup_s": round(self.shared_setup_s, 3),
            "checks": [c.to_dict() for c in o.checks],
            "measurements": {} if o.measurements is None else o.measurements.model_dump(mode="json"),
            "tables": [asdict(t) for t in o.tables],
            "inputs": [asdict(i) for i in o.inputs],
            "parameters": o.parameters,
            "notes": list(o.notes),
            "specializations": {"qualified": sorted(set(o.qualifies)), "dispatched": sorted(set(o.dispatches))},
            **({"gpu": self.gpu} if self.gpu is not None else {}),
        }


def verdict(statuses: list[Status]) -> Verdict:
    """PASS only if every compiled item was selected, ran and passed something it could have failed.

    A skip, a deselection or a vacuous/underpowered item never looks like a pass; no items at all is
    INCOMPLETE: nothing was shown.
    """
    if any(s in (Status.FAILED, Status.ERROR) for s in statuses):
        return Verdict.FAIL
    if not statuses or any(s is not Status.PASSED for s in statuses):
        return Verdict.INCOMPLETE
    return Verdict.PASS
