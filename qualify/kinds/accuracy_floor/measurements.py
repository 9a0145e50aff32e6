"""The typed measurements of one `accuracy_floor` item (one task under one layout, against the reference).

Scores and drops are fractions of items (0.0123 = 1.23 points) except `delta_points`. Each floor is the
threshold of its check (named in `FloorPower.check`), stated nowhere else.
"""

from __future__ import annotations

from typing import Any, Literal

from qualify.schema.models import MeasurementModel


class Discordant(MeasurementModel):
    ref_only: int
    cand_only: int


class PairedTable(MeasurementModel):
    """Items right under both layouts, the reference only, the candidate only, neither."""

    both: int
    ref_only: int
    cand_only: int
    neither: int


class Power(MeasurementModel):
    alpha: float
    beta: float
    assumed_discordance: float
    discordance_assumed: str
    min_resolvable_drop: float


class FloorPower(MeasurementModel):
    """What the sample can resolve for one floor."""

    # The check that decided this floor; None in reports written before the floor moved into the check alone.
    check: str | None = None
    allowed_drop: float
    underpowered: bool
    power_statement: str


class ServedRuns(MeasurementModel):
    checkpoint: str
    runs: dict[str, dict[str, Any]]


class AccuracyFloorMeasurements(MeasurementModel):
    task: str
    task_id: str
    metric: str
    layout: str
    reference_layout: str
    backend: Literal["hf", "vllm", "served"]
    scaling: str
    model: dict[str, Any]
    sample_seed: int
    num_fewshot: int | None
    n: int
    reference_score: float
    score: float
    delta_points: float
    ratio: float
    ratio_defined: bool
    ratio_ci_low: float
    ratio_ci_high: float
    ratio_ci_confidence: float
    n_resamples: int
    decision: Literal["point", "ci_lower"]
    decided_on: float
    mcnemar_p: float
    discordant: Discordant
    paired_table: PairedTable
    discordance_rate: float
    power: Power
    min_resolvable_drop: float
    floors: list[FloorPower]
    underpowered: bool
    smoke: bool
    scores: dict[str, float]  # the reference and every table layout
    wall_s: dict[str, float]
    # backend vllm: per layout, the kv_cache_dtype asked for and what the engine reported when it started.
    vllm: dict[str, dict[str, Any]] | None = None
    # backend served: the checkpoint whose cartridge answered, and per layout how it was served (its scoring run,
    # the items counted wrong because neither answer's order was known, the process's facts).
    served: ServedRuns | None = None
