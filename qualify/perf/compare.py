"""One cell of the perf gate: candidate vs baseline samples -> the ratio's CI, the decision, the Check.

Each side's samples come grouped by fresh worker process. The CI (`qualify.stats.ratio`) is by default
`process-t`: a Welch t interval on the log medians of the processes, centred on the log of the ratio of the
pooled medians; `two-level-bootstrap` (processes, then repetitions) is the alternative. Where the t interval
cannot be formed (a side with one process, or every process median equal on both sides) the two-level
bootstrap is used, or the flat bootstrap over repetitions when both sides have a single process (a release
report written before processes were recorded, compared with a single-process measurement), and the statistic
says so and why, including that process-to-process variation is then not in the CI.

Pure (numpy only), so the decision logic is tested on CPU with synthetic samples.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from qualify.perf.metrics import Metric
from qualify.results import Check, Table
from qualify.stats.ratio import (
    Decision,
    Direction,
    RatioCI,
    decide,
    median_ratio_ci,
    process_t_median_ratio_ci,
    two_level_median_ratio_ci,
)

CI_METHODS = ("process-t", "two-level-bootstrap")  # what a gate may ask for (`Timing.ci_method`)

TABLE_COLUMNS = [
    "metric",
    "batch",
    "suffix",
    "candidate",
    "baseline",
    "candidate median",
    "baseline median",
    "ratio",
    "CI",
    "decision",
    "outcome",
]  # fmt: skip  (no threshold column: the check states it, once)


@dataclass(frozen=True)
class Side:
    """One side of a comparison: who was measured, its samples in the metric's unit, and context.

    `groups` holds one list of repetitions per fresh worker process, in launch order; `clocks` is what
    nvidia-smi read around each process (a list, one entry per process) or, from an older report, one entry.
    """

    name: str
    groups: list[list[float]]
    bytes_moved: int | None = None
    pct_peak_bw: float | None = None
    clocks: list[Any] | dict[str, Any] | None = None
    method: str | None = None

    @property
    def samples(self) -> list[float]:
        """Every repetition of every process, pooled (what the point estimate's median is taken over)."""
        return [x for group in self.groups for x in group]

    @property
    def processes(self) -> int:
        return len(self.groups)

    def layout(self) -> str:
        """'3 processes x 5 repetitions' (or 'x 4-5' when the processes differ)."""
        reps = sorted({len(g) for g in self.groups})
        r = str(reps[0]) if len(reps) == 1 else f"{reps[0]}-{reps[-1]}"
        return f"{self.processes} process{'es' if self.processes != 1 else ''} x {r} repetitions"


@dataclass(frozen=True)
class CellKey:
    metric: Metric
    batch: int
    suffix: int
    stream: str | None = None  # a serving shape's named stream


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
    ci_method: str = "process-t",
) -> Comparison:
    m = key.metric
    ci, how = _ratio_ci(
        candidate, baseline, method=ci_method, confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    decision = decide(ci, threshold, m.direction)
    worst = ci.low if m.direction is Direction.HIGHER_IS_BETTER else ci.high
    outcome = outcome_of(decision, strict=strict)
    check = Check(
        name=f"{m.name} ratio b{key.batch} s{key.suffix}" + (f" {key.stream}" if key.stream else ""),
        observed=ci.ratio,
        operator=m.operator,
        threshold=threshold,
        statistic=(
            f"median({candidate.name}) / median({baseline.name}), {confidence:.0%} CI "
            f"[{_fmt(ci.low)}, {_fmt(ci.high)}] from a {how}; decided on the CI's worst end"
        ),
        # The unit the CI counts: processes for the t interval and the two-level bootstrap, repetitions for
        # the flat bootstrap.
        n=(
            min(ci.n_candidate, ci.n_baseline)
            if ci.method == "flat"
            else min(ci.candidate_processes, ci.baseline_processes)
        ),
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
        "stream": key.stream,
        "candidate": candidate.name,
        "baseline": baseline.name,
        "ratio": ci.ratio,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "confidence": confidence,
        "direction": m.direction.value,
        "decision": decision.value,
        "outcome": outcome,
        "ci_method": _METHOD_NAMES[ci.method],  # the method the CI was taken with (after any fallback)
        "ci_method_requested": ci_method,
        "ci_df": ci.df,  # Welch-Satterthwaite degrees of freedom of a process-t CI, else None
        "ci_fallback": ci.fallback,  # why process-t was asked for and a bootstrap CI used, else None
        "ci_description": how,
        "processes": {"candidate": candidate.processes, "baseline": baseline.processes},
        "candidate_samples": candidate.samples,
        "baseline_samples": baseline.samples,
        "candidate_process_samples": [list(g) for g in candidate.groups],
        "baseline_process_samples": [list(g) for g in baseline.groups],
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
        decision.value, outcome,
    ]  # fmt: skip
    table = Table(title="perf: candidate vs baseline", columns=list(TABLE_COLUMNS), rows=[row])
    return Comparison(check=check, measurements=measurements, table=table)


_METHOD_NAMES = {"process-t": "process-t", "two-level": "two-level-bootstrap", "flat": "flat-bootstrap"}


def _ratio_ci(
    candidate: Side, baseline: Side, *, method: str, confidence: float, n_resamples: int, seed: int
) -> tuple[RatioCI, str]:
    """The CI and how it was taken, in words for the Check's statistic."""
    if method not in CI_METHODS:
        raise ValueError(f"unknown ci_method {method!r}; choices: {', '.join(CI_METHODS)}")
    kw: dict[str, Any] = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
    if method == "process-t":
        ci = process_t_median_ratio_ci(candidate.groups, baseline.groups, **kw)
        if ci.method == "process-t":
            over = _layouts(candidate, baseline)
            return ci, (
                f"process-level Welch t interval (df {ci.df:.3g}) on the log medians of {over}, centred on the "
                "log of the pooled medians' ratio"
            )
        return ci, f"{_bootstrap_how(ci, candidate, baseline)}; process-t not used: {ci.fallback}"
    if candidate.processes == 1 and baseline.processes == 1:
        ci = median_ratio_ci(candidate.samples, baseline.samples, **kw)
    else:
        ci = two_level_median_ratio_ci(candidate.groups, baseline.groups, **kw)
    return ci, _bootstrap_how(ci, candidate, baseline)


def _layouts(candidate: Side, baseline: Side) -> str:
    if candidate.layout() == baseline.layout():
        return f"{candidate.layout()} per side"
    return f"{candidate.layout()} ({candidate.name}) and {baseline.layout()} ({baseline.name})"


def _bootstrap_how(ci: RatioCI, candidate: Side, baseline: Side) -> str:
    """The words for a flat or two-level percentile-bootstrap CI."""
    if ci.method == "flat":
        reps = f"{len(candidate.samples)} / {len(baseline.samples)}"
        return (
            f"percentile flat bootstrap over the repetitions of one process per side ({reps}); "
            "process-to-process variation is not in this CI"
        )
    how = f"percentile two-level bootstrap over {_layouts(candidate, baseline)}"
    single = [s.name for s in (candidate, baseline) if s.processes == 1]
    if single:
        how += f"; {single[0]} has one process, so its process-to-process variation is not in this CI"
    return how
