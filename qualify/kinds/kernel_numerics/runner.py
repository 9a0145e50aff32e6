"""Run one `kernel_numerics` item: dispatch its `check:` mode to `qualify.numerics`, then type what it measured.

The check modes record the cell and its errors as a dictionary (`KernelNumericsMeasurements` names every field);
here it becomes the typed model, and the parameters the report form, each threshold left to its check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from qualify.kinds.kernel_numerics.measurements import KernelNumericsMeasurements
from qualify.numerics.cell import KernelNumericsParams
from qualify.numerics.contract_check import run_contract_check
from qualify.numerics.kernel_check import run_kernel_check
from qualify.numerics.reference_check import run_reference_check
from qualify.results import ItemOutcome

if TYPE_CHECKING:
    from qualify.compile import GateItem
    from qualify.context import RunContext

_CHECKS: dict[str, Callable[..., ItemOutcome]] = {
    "kernel": run_kernel_check,
    "contract": run_contract_check,
    "reference": run_reference_check,
}
# Recorded by the check modes for every cell; these copies of the parameters are not measurements.
_NOT_MEASURED = frozenset({"tolerance"})


def typed(outcome: ItemOutcome, p: KernelNumericsParams) -> ItemOutcome:
    """`outcome` with typed measurements and report parameters (keeping any the check mode added, e.g. a fault)."""
    raw: Any = outcome.measurements
    measurements = (
        raw
        if raw is None or isinstance(raw, KernelNumericsMeasurements)
        else KernelNumericsMeasurements.written({k: v for k, v in raw.items() if k not in _NOT_MEASURED})
    )
    declared = p.model_dump(mode="json")
    added = {k: v for k, v in outcome.parameters.items() if k not in declared}
    return replace(outcome, measurements=measurements, parameters={**p.report_parameters(), **added})


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    p = item.params
    assert isinstance(p, KernelNumericsParams)
    return typed(_CHECKS[p.check](item, p, ctx), p)
