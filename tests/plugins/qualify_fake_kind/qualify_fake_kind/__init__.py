"""Gate kind `compare`: a value must stay within a limit. Test-only; the worked example of a plug-in kind.

The whole kind: fields (`CompareParams`), typed measurements (`CompareMeasurements`), a runner (`run`) and the
spec that names them. It has no render hook, so the sign-off page shows its items in the generic gate tables.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from qualify.compile import GateItem
from qualify.context import RunContext
from qualify.hashing import sha256_file
from qualify.registry import GateKindSpec
from qualify.results import Check, InputRef, ItemOutcome
from qualify.schema.models import KindParams, MeasurementModel


class CompareParams(KindParams):
    threshold_fields: ClassVar[dict[str, Any]] = {"limit": True}  # the limit is recorded once, as the check's threshold

    value: float
    limit: float
    mode: Literal["upper", "lower"] = "upper"
    file: str | None = None


class CompareMeasurements(MeasurementModel):
    value: float


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    p = item.params
    assert isinstance(p, CompareParams)
    op = "<=" if p.mode == "upper" else ">="
    outcome = ItemOutcome(
        checks=[Check(name="value", observed=p.value, operator=op, threshold=p.limit, statistic="exact", n=1)],
        measurements=CompareMeasurements(value=p.value),
        parameters=p.report_parameters(),
    )
    if p.file:
        path = item.gate_file.resolve(p.file)
        outcome.inputs.append(InputRef(name=path.name, path=str(path), sha256=sha256_file(path), role="test-input"))
    return outcome


SPEC = GateKindSpec(
    name="compare",
    params=CompareParams,
    measurements=CompareMeasurements,
    runner=f"{__name__}:run",
    protects="a test value stays within its limit",
)
