"""A minimal gate kind for testing the backbone without loading a model (registered by the tests only)."""

from __future__ import annotations

from typing import Literal

from qualify.registry import GateKindSpec
from qualify.results import Check, InputRef, ItemOutcome
from qualify.schema.models import KindParams


class CompareParams(KindParams):
    value: float
    limit: float
    mode: Literal["upper", "lower"] = "upper"
    file: str | None = None


def run(item, ctx) -> ItemOutcome:
    p = item.params
    op = "<=" if p.mode == "upper" else ">="
    outcome = ItemOutcome(
        checks=[Check(name="value", observed=p.value, operator=op, threshold=p.limit, statistic="exact", n=1)],
        parameters={"value": p.value, "limit": p.limit},
    )
    if p.file:
        from qualify.hashing import sha256_file

        path = item.gate_file.resolve(p.file)
        outcome.inputs.append(InputRef(name=path.name, path=str(path), sha256=sha256_file(path), role="test-input"))
    return outcome


COMPARE = GateKindSpec(
    name="compare",
    params=CompareParams,
    runner=f"{__name__}:run",
    protects="a test value stays within its limit",
)
