"""Fields and lint of `loss_increase`: eval-loss cost of quantizing a cartridge, per layout, against BF16.

`backend: vllm` measures it through the serving path (one vLLM process per layout; see vllm_backend.py).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from qualify.quant.layouts import ControlLayoutName, ServedLayoutName
from qualify.registry import LintIssue
from qualify.schema.models import KindParams, StrictModel
from qualify.worker_groups import SERVING


class PositiveControl(StrictModel):
    """A layout known to damage keys; if it does not show `minimum` of `metric`, the measurement is blind.

    `rel_increase` is the relative eval-loss increase (right where the served layouts visibly hurt, as FP8
    keys do on Qwen3-8B cartridges); `kl_mean` is KL(BF16 || layout) per answer token in nats, the more
    sensitive choice where eval loss against gold answers is too noisy to show even gross key damage (a
    135M model on 67 sequences).
    """

    layout: ControlLayoutName
    metric: Literal["rel_increase", "kl_mean"] = "rel_increase"
    minimum: float = Field(gt=0)


class CpuReference(StrictModel):
    """backend vllm: the serving path's BF16 reference loss must match the CPU evaluation of the same weights and
    cartridge (Hugging Face, float32) within `tolerance`: both ends of the paired CI of the ratio of the summed
    answer NLLs (GPU / CPU) inside 1 +- tolerance. It binds the served numbers to the CPU gate's."""

    tolerance: float = Field(gt=0, lt=0.5)


class LossIncreaseParams(KindParams):
    threshold_fields: ClassVar[dict[str, Any]] = {
        "max_rel_increase": True,
        "positive_control": {"minimum"},
        "cpu_reference": {"tolerance"},
    }

    workload: str
    checkpoint: str
    max_rel_increase: dict[ServedLayoutName, float] = Field(min_length=1)
    positive_control: PositiveControl
    scaling: Literal["none", "per_tensor", "per_head"] = "none"
    # `ci`: the CI's unfavourable end must clear the threshold (shown, not just estimated); `point`: the estimate.
    decide_on: Literal["ci", "point"] = "ci"
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    n_resamples: int = Field(default=2000, ge=200)
    batch_size: int = Field(default=16, ge=1)
    max_items: int | None = Field(default=None, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # `hf`: Hugging Face transformers with the cartridge as past_key_values (CPU or CUDA); `vllm`: the serving
    # path, each layout in its own vLLM process (qualify.kinds.loss_increase.vllm_backend).
    backend: Literal["hf", "vllm"] = "hf"
    worker_timeout_s: float = Field(default=600.0, gt=0)
    # backend vllm: scoring processes side by side (qualify.serve.score_processes says why that changes no score).
    engines_at_once: int = Field(default=1, ge=1, le=16)
    cpu_reference: CpuReference | None = None
    # Context length for the raw-payload table's "full-context KV bytes" column.
    context_tokens: int = Field(default=32768, ge=1)


def lint(params: KindParams, gate_file: object) -> list[LintIssue]:
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
    if params.backend != "vllm":
        if params.engines_at_once != 1:
            issues.append(LintIssue(("engines_at_once",), "engines_at_once applies to backend: vllm only"))
        if params.cpu_reference is not None:
            issues.append(LintIssue(("cpu_reference",), "cpu_reference applies to backend: vllm only (hf is the CPU)"))
    if params.backend == "vllm":
        if params.max_items is not None:
            issues.append(LintIssue(("max_items",), "backend vllm scores the whole eval set; drop max_items"))
        if params.device == "cpu":
            issues.append(LintIssue(("device",), "backend vllm serves on the GPU; drop device: cpu"))
    control = params.positive_control
    if (
        control.metric == "rel_increase"
        and control.layout in params.max_rel_increase
        and params.max_rel_increase[control.layout] < control.minimum
    ):
        issues.append(
            LintIssue(
                ("positive_control",),
                f"{control.layout} must both stay below {params.max_rel_increase[control.layout]} and exceed "
                f"{control.minimum}: no result can pass",
            )
        )
    return issues


def worker_group(params: KindParams) -> str | None:
    """Served scores are kept in the run's store, which accuracy floors of backend `served` read."""
    assert isinstance(params, LossIncreaseParams)
    return SERVING if params.backend == "vllm" else None
