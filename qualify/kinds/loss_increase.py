"""Gate kind `loss_increase`: eval-loss cost of quantizing a cartridge, per layout, against BF16."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from qualify.registry import GateKindSpec, LintIssue
from qualify.schema.models import KindParams, StrictModel

LayoutName = Literal["K16/V16", "K16/V8", "K8/V16", "K8/V8"]


class PositiveControl(StrictModel):
    """A layout known to damage keys; if it does not show `min_rel_increase`, the measurement is blind."""

    layout: LayoutName
    min_rel_increase: float = Field(gt=0)


class LossIncreaseParams(KindParams):
    workload: str
    checkpoint: str
    max_rel_increase: dict[LayoutName, float] = Field(min_length=1)
    positive_control: PositiveControl
    scaling: Literal["none", "per_tensor", "per_head"] = "none"
    # `ci`: the CI's unfavourable end must clear the threshold (shown, not just estimated); `point`: the estimate.
    decide_on: Literal["ci", "point"] = "ci"
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    n_resamples: int = Field(default=2000, ge=200)
    batch_size: int = Field(default=16, ge=1)
    max_items: int | None = Field(default=None, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Context length for the raw-payload table's "full-context KV bytes" column.
    context_tokens: int = Field(default=32768, ge=1)


def _lint(params: KindParams, gate_file: object) -> list[LintIssue]:
    assert isinstance(params, LossIncreaseParams)
    workloads = getattr(gate_file, "workloads", {})
    issues = []
    wl = workloads.get(params.workload)
    if wl is None:
        known = ", ".join(sorted(workloads)) or "none declared"
        return [LintIssue(("workload",), f"unknown workload {params.workload!r} (known: {known})")]
    if params.checkpoint not in wl.cartridges:
        known = ", ".join(sorted(wl.cartridges)) or "none declared"
        issues.append(
            LintIssue(
                ("checkpoint",),
                f"workload {params.workload!r} has no cartridge {params.checkpoint!r} (known: {known})",
            )
        )
    if wl.eval_set is None:
        issues.append(LintIssue(("workload",), f"workload {params.workload!r} declares no eval_set"))
    for layout, bound in params.max_rel_increase.items():
        if bound < 0:
            issues.append(LintIssue(("max_rel_increase", layout), "a maximum increase cannot be negative"))
    if (
        params.positive_control.layout in params.max_rel_increase
        and params.max_rel_increase[params.positive_control.layout] < params.positive_control.min_rel_increase
    ):
        issues.append(
            LintIssue(
                ("positive_control",),
                f"{params.positive_control.layout} must both stay below "
                f"{params.max_rel_increase[params.positive_control.layout]} and exceed "
                f"{params.positive_control.min_rel_increase}: no result can pass",
            )
        )
    return issues


LOSS_INCREASE = GateKindSpec(
    name="loss_increase",
    params=LossIncreaseParams,
    runner="qualify.runners.loss_increase:run",
    protects=(
        "A quantized cartridge layout must not raise eval loss beyond its bound; FP8 keys cost ~1 % "
        "on trained cartridges while ordinary benchmarks do not show it."
    ),
    lint=_lint,
)
