"""Fields and lint of `perf_nonregression`: a candidate implementation against a baseline on timing ratios.

Each item is one (metric, batch, suffix) cell; its check passes when the worst end of the CI of
median(candidate) / median(baseline) clears the metric's threshold, fails when even the best end misses it,
and is inconclusive otherwise (a failure under --strict). The CI is taken over the `timing.processes` fresh
worker processes of each side (`timing.ci_method`: a Welch t interval on the processes' log medians by
default, or a two-level bootstrap; one process per side falls back to a bootstrap over its repetitions, and
the report says so). The baseline is another
implementation of the same set or `release`: the same candidate in the signed report given with --baseline.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from qualify.perf.implementations import RELEASE, default_implementations
from qualify.perf.metrics import METRICS, MetricName
from qualify.perf.spec import ImplementationOptions, ShapeSet, Timing
from qualify.registry import LintIssue
from qualify.schema.models import KindParams
from qualify.worker_groups import TIMING


class PerfNonRegressionParams(KindParams):
    threshold_fields: ClassVar[dict[str, Any]] = {"thresholds": True}

    implementation_set: str = "kernel"
    candidate: str
    baseline: str  # an implementation of the set, or "release"
    candidate_options: ImplementationOptions = Field(default_factory=ImplementationOptions)
    baseline_options: ImplementationOptions = Field(default_factory=ImplementationOptions)
    metric: MetricName
    batch: int = Field(ge=1)
    suffix: int = Field(ge=1)
    stream: str | None = None  # a serving shape's named stream (ShapeSet.streams); None for every other shape
    shape: ShapeSet
    # Ratio thresholds per metric: tokens/s ratios must be >= theirs, TTFT ratios <= theirs.
    thresholds: dict[MetricName, float] = Field(min_length=1)
    timing: Timing = Field(default_factory=Timing)
    # Implementations measured with this item in a Latin-square order (process k runs the list rotated by k), so
    # that every layout of a comparison takes every position in the run; must name the candidate and the baseline.
    # Items of other gates that name the same list reuse those processes.
    rotation: list[str] = Field(default_factory=list)
    # Nsight Compute counters of the candidate, and of a baseline measured in this run, when ncu is on PATH.
    hardware_counters: bool = False
    baseline_public_key: str | None = None  # path (relative to the gate file); else $QUALIFY_BASELINE_PUBLIC_KEY


def lint(params: KindParams, gate_file: object) -> list[LintIssue]:
    assert isinstance(params, PerfNonRegressionParams)
    p = params
    try:
        impl_set = default_implementations().get_set(p.implementation_set)
    except KeyError as exc:
        return [LintIssue(("implementation_set",), exc.args[0])]
    issues = []
    sides = [("candidate", p.candidate)] + ([] if p.baseline == RELEASE else [("baseline", p.baseline)])
    for field, name in sides:
        try:
            impl = impl_set.get(name)
        except KeyError as exc:
            issues.append(LintIssue((field,), exc.args[0] + (f" or {RELEASE!r}" if field == "baseline" else "")))
            continue
        if p.metric not in impl.metrics:
            issues.append(
                LintIssue(("metric",), f"{name} does not measure {p.metric} (it measures {sorted(impl.metrics)})")
            )
    if p.baseline == p.candidate and p.baseline_options == p.candidate_options:
        issues.append(
            LintIssue(("baseline",), "candidate and baseline are the same implementation with the same options")
        )
    if p.baseline == RELEASE and p.baseline_options != ImplementationOptions():
        issues.append(LintIssue(("baseline_options",), "a release baseline is the candidate as recorded; no options"))
    if p.batch not in p.shape.batches:
        issues.append(LintIssue(("batch",), f"batch {p.batch} is not in the shape set's batches {p.shape.batches}"))
    if p.suffix not in p.shape.suffixes:
        issues.append(
            LintIssue(("suffix",), f"suffix {p.suffix} is not in the shape set's suffixes {p.shape.suffixes}")
        )
    if p.rotation:
        missing = [n for n in (p.candidate, p.baseline) if n not in p.rotation]
        if p.baseline == RELEASE:
            issues.append(LintIssue(("rotation",), "a release baseline is not measured, so it cannot be rotated"))
        elif missing:
            issues.append(LintIssue(("rotation",), f"the rotation must name the candidate and baseline: {missing}"))
        if len(set(p.rotation)) != len(p.rotation):
            issues.append(LintIssue(("rotation",), f"the rotation names an implementation twice: {p.rotation}"))
        for name in p.rotation:
            if name not in impl_set.names():
                issues.append(LintIssue(("rotation",), f"{name!r} is not in the {p.implementation_set} set"))
    named = [st.id for st in p.shape.streams or []]
    if named and p.stream not in named:
        issues.append(LintIssue(("stream",), f"the shape serves streams {named}: the item must name one of them"))
    elif not named and p.stream is not None:
        issues.append(LintIssue(("stream",), f"stream {p.stream!r}, but the shape names no streams"))
    if p.metric not in p.thresholds:
        issues.append(LintIssue(("thresholds",), f"no threshold for metric {p.metric}"))
    for name, value in p.thresholds.items():
        if not value > 0:
            issues.append(LintIssue(("thresholds", name), "a ratio threshold must be positive"))
    if p.shape.cartridge_len % p.shape.page_size:
        issues.append(LintIssue(("shape",), "cartridge_len must be a multiple of page_size (pages are shared whole)"))
    unknown = sorted(set(p.thresholds) - set(METRICS))
    if unknown:
        issues.append(LintIssue(("thresholds",), f"unknown metrics {unknown}"))
    return issues


def worker_group(params: KindParams) -> str | None:
    """Every timed item in one worker: items share measured worker processes, and timings never overlap."""
    return TIMING
