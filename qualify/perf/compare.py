"""One cell of the perf gate: candidate vs baseline samples -> the ratio's CI, the decision, the Check.

Pure (numpy only), so the decision logic is tested on CPU with synthetic samples.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from qualify.perf.metrics import Metric
from qualify.results import Check, Table
from qualify.stats.ratio import Decision, Direction, decide, median_ratio_ci

TABLE_COLUMNS = [
    "metric", "batch", "suffix", "candidate", "baseline", "candidate median", "baseline median",
    "ratio", "CI", "threshold", "decision", "outcome",
]  # fmt: skip


@dataclass(frozen=True)
class Side:
    """One side of a comparison: who was measured, the samples in the metric's unit, and context."""

    name: str
    samples: list[float]
    bytes_moved: int | None = None
    pct_peak_bw: float | None = None
    clocks: dict[str, Any] | None = None
    method: str | None = None


@dataclass(frozen=True)
class CellKey:
    metric: Metric
    batch: int
    suffix: int


@dataclass(frozen=True)
class Comparison:
    check: Check
    measurements: dict[str, Any]
    table: Table


def outcome_of(decision: Decision, *, strict: bool) -> str:
    """The Check's outcome: an inconclusive decision stays visible as such, except that under --strict it
    is a failure (a release must show the property, not merely fail to refute it)."""
    if decision is Decision.INCONCLUSIVE and strict:
        return "fail"
    return decision.value


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def compare_cell(
    key: CellKey,
    candidate: Side,
    baseline: Side,
    threshold: float,
    *,
    confidence: float,
    n_resamples: int,
    seed: int,
    strict: bool,
) -> Comparison:
    m = key.metric
    ci = median_ratio_ci(candidate.samples, baseline.samples, confidence=confidence, n_resamples=n_resamples, seed=seed)
    decision = decide(ci, threshold, m.direction)
    worst = ci.low if m.direction is Direction.HIGHER_IS_BETTER else ci.high
    outcome = outcome_of(decision, strict=strict)
    check = Check(
        name=f"{m.name} ratio b{key.batch} s{key.suffix}",
        observed=ci.ratio,
        operator=m.operator,
        threshold=threshold,
        statistic=(
            f"median({candidate.name}) / median({baseline.name}), {confidence:.0%} percentile-bootstrap CI "
            f"[{_fmt(ci.low)}, {_fmt(ci.high)}]; decided on the CI's worst end"
        ),
        n=min(ci.n_candidate, ci.n_baseline),
        ci_low=ci.low,
        ci_high=ci.high,
        decided_on=worst,
        unit="x",
        outcome=outcome,
    )
    c_med, b_med = statistics.median(candidate.samples), statistics.median(baseline.samples)
    measurements: dict[str, Any] = {
        "metric": m.name,
        "batch": key.batch,
        "suffix": key.suffix,
        "candidate": candidate.name,
        "baseline": baseline.name,
        "ratio": ci.ratio,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "confidence": confidence,
        "threshold": threshold,
        "direction": m.direction.value,
        "decision": decision.value,
        "outcome": outcome,
        "candidate_samples": list(candidate.samples),
        "baseline_samples": list(baseline.samples),
        "candidate_median": c_med,
        "baseline_median": b_med,
        "unit": m.unit,
        "bytes_moved": {"candidate": candidate.bytes_moved, "baseline": baseline.bytes_moved},
        "pct_peak_bw": {"candidate": candidate.pct_peak_bw, "baseline": baseline.pct_peak_bw},
        "clocks": {"candidate": candidate.clocks, "baseline": baseline.clocks},
        "timing_method": {"candidate": candidate.method, "baseline": baseline.method},
        "ncu": None,
    }
    row = [
        m.name, key.batch, key.suffix, candidate.name, baseline.name, f"{_fmt(c_med)} {m.unit}",
        f"{_fmt(b_med)} {m.unit}", _fmt(ci.ratio), f"[{_fmt(ci.low)}, {_fmt(ci.high)}]",
        f"{m.operator} {_fmt(threshold)}", decision.value, outcome,
    ]  # fmt: skip
    table = Table(title="perf: candidate vs baseline", columns=list(TABLE_COLUMNS), rows=[row])
    return Comparison(check=check, measurements=measurements, table=table)
