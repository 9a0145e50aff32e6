"""The typed measurements of one `loss_increase` item (one checkpoint, every layout it was asked about).

Bounds are not measurements: each lives once, in the check named by `bound_check_name(layout)`.
"""

from __future__ import annotations

from typing import Literal

from qualify.schema.models import MeasurementModel


def bound_check_name(layout: str) -> str:
    """Name of the check that holds `layout`'s bound; the runner names it so and the render hook finds it so."""
    return f"{layout} rel. loss increase"


class ReferenceLoss(MeasurementModel):
    """Eval loss with the BF16 cartridge, over the answer tokens of `n_items` sequences."""

    loss: float
    n_items: int
    n_tokens: int


class LayoutLoss(MeasurementModel):
    """One layout against the reference: loss, its relative increase with the paired bootstrap CI, and damage."""

    layout: str
    loss: float
    rel_increase: float
    ci_low: float
    ci_high: float
    kl_mean: float
    top1_agreement: float
    saturated_k: int
    saturated_v: int
    positive_control: bool


class PayloadRow(MeasurementModel):
    """Raw KV bytes of one layout for this model: per token, for a full context and for the cartridge."""

    layout: str
    bytes_per_token: int
    context_bytes: int
    cartridge_bytes: int
    capacity_ratio: float


class PerItemLoss(MeasurementModel):
    """Per-sequence negative log-likelihoods (summed over answer tokens), to recompute any statistic."""

    ids: list[str]
    tokens: list[int]
    reference_nll: list[float]
    nll: dict[str, list[float]]


class CpuAgreement(MeasurementModel):
    """backend vllm: the served BF16 reference against the CPU evaluation (float32) of the same items."""

    cpu_loss: float
    served_loss: float
    ratio: float  # summed served answer NLL / summed CPU answer NLL
    ci_low: float
    ci_high: float
    cpu_dtype: str
    cpu_seconds: float


class ServedRun(MeasurementModel):
    """backend vllm: one scoring process (qualify.serve.score_processes), as it reported itself."""

    label: str
    layout: str
    fake_quant: str | None = None
    enforce_eager: bool | None = None
    cartridge_sha256: str | None = None
    top_k: int | None = None
    engines_at_once: int | None = None
    wall_s: float | None = None
    gpu_memory_utilization: float | None = None


class LossIncreaseMeasurements(MeasurementModel):
    workload: str
    checkpoint: str
    model_id: str
    scaling: Literal["none", "per_tensor", "per_head"]
    decide_on: Literal["ci", "point"]
    confidence: float
    reference: ReferenceLoss
    layouts: list[LayoutLoss]
    payload: list[PayloadRow]
    per_item: PerItemLoss
    cpu_reference: CpuAgreement | None = None
    served_runs: list[ServedRun] | None = None
