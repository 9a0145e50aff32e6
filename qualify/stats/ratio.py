"""Ratio of two timing samples with a bootstrap CI, and the three-way decision the perf gate takes on it.

Timings on shared GPUs are noisy and skewed, so the statistic is the ratio of medians, and its CI comes
from resampling each sample independently (the two were measured in separate processes, so there is no
pairing to exploit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np


class Direction(StrEnum):
    HIGHER_IS_BETTER = "higher"  # throughput: candidate/baseline should be >= threshold
    LOWER_IS_BETTER = "lower"  # latency: candidate/baseline should be <= threshold


class Decision(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class RatioCI:
    ratio: float  # median(candidate) / median(baseline)
    low: float
    high: float
    confidence: float
    n_candidate: int
    n_baseline: int
    n_resamples: int


def median_ratio_ci(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = 4000,
    seed: int = 0,
) -> RatioCI:
    """Percentile-bootstrap CI of median(candidate) / median(baseline), the samples resampled independently."""
    c = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(baseline, dtype=np.float64)
    if c.size < 2 or b.size < 2:
        raise ValueError(f"need at least 2 repetitions per side, got {c.size} and {b.size}")
    if not (np.isfinite(c).all() and np.isfinite(b).all()) or (b <= 0).any() or (c <= 0).any():
        raise ValueError("timing samples must be finite and positive")
    rng = np.random.default_rng(seed)
    c_med = np.median(c[rng.integers(0, c.size, (n_resamples, c.size))], axis=1)
    b_med = np.median(b[rng.integers(0, b.size, (n_resamples, b.size))], axis=1)
    ratios = c_med / b_med
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return RatioCI(
        ratio=float(np.median(c) / np.median(b)),
        low=float(low),
        high=float(high),
        confidence=confidence,
        n_candidate=int(c.size),
        n_baseline=int(b.size),
        n_resamples=n_resamples,
    )


def decide(ci: RatioCI, threshold: float, direction: Direction) -> Decision:
    """Pass if the CI's worst end clears the threshold, fail if even its best end misses it, else inconclusive."""
    if direction is Direction.HIGHER_IS_BETTER:
        worst, best = ci.low, ci.high
        if worst >= threshold:
            return Decision.PASS
        return Decision.FAIL if best < threshold else Decision.INCONCLUSIVE
    worst, best = ci.high, ci.low
    if worst <= threshold:
        return Decision.PASS
    return Decision.FAIL if best > threshold else Decision.INCONCLUSIVE
