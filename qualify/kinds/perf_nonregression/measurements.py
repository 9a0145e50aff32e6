"""The typed measurements of one `perf_nonregression` item (one metric, batch and suffix).

The ratio threshold is the check's alone; `direction` says which way the ratio must clear it.
"""

from __future__ import annotations

from typing import Any, Literal

from qualify.schema.models import MeasurementModel


class PerSide(MeasurementModel):
    """One value for each side of the comparison (None where the side did not report it)."""

    candidate: Any = None
    baseline: Any = None


class PerfNonRegressionMeasurements(MeasurementModel):
    metric: str
    batch: int
    suffix: int
    stream: str | None = None  # a serving shape's named stream
    candidate: str
    baseline: str
    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    direction: str
    decision: Literal["pass", "fail", "inconclusive"]  # the statistical decision
    outcome: Literal["pass", "fail", "inconclusive"]  # the check's: inconclusive is a fail under --strict
    ci_method: str  # the method the CI was taken with, after any fallback
    ci_method_requested: str
    ci_df: float | None  # Welch-Satterthwaite degrees of freedom of a process-t CI
    ci_fallback: str | None  # why process-t was asked for and a bootstrap CI used
    ci_description: str
    processes: PerSide
    candidate_samples: list[float]  # every repetition, pooled over processes
    baseline_samples: list[float]
    candidate_process_samples: list[list[float]]  # one list per process
    baseline_process_samples: list[list[float]]
    candidate_median: float
    baseline_median: float
    unit: str
    bytes_moved: PerSide
    pct_peak_bw: PerSide
    clocks: PerSide
    timing_method: PerSide
    # Nsight Compute counters of the candidate (and of a baseline measured in this run), when asked for and available.
    ncu: dict[str, Any] | None
    implementation_set: str
    candidate_options: dict[str, Any]
    shape: dict[str, Any]
    live: Any
    gpu: Any
    versions: Any
    kernel_identity: Any
    peak_bandwidth_tbps: float | None
    baseline_source: str
    candidate_worker_wall_s: list[float]
