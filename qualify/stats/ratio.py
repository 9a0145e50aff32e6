"""Ratio of two timing samples with a bootstrap CI, and the three-way decision the perf gate takes on it.

Timings on shared GPUs are noisy and skewed, so the statistic is the ratio of medians, and its CI comes
from resampling each side independently (the two were measured in separate processes, so there is no
pairing to exploit).

Two levels of variation. Repetitions inside one worker process agree closely (often to 0.2 %), but a fresh
process of the same implementation lands somewhere else: other SM and memory clocks (boost and thermal state
move between processes), other physical pages and L2 set placement of its buffers, another allocator and
JIT-cache state. On an H200 the ratio moved 0.2-2 % between two runs while a bootstrap over the 5 repetitions
of one process gave CIs of +-0.5 %: that CI described one process, not the measurement. So each side is
measured in several fresh processes, and `two_level_median_ratio_ci` resamples the way the data arose:
processes with replacement, then repetitions with replacement inside each drawn process. Its width then
follows the process-to-process spread when there is one, and stays close to the flat CI when there is none.

With few processes the two-level percentile CI is still somewhat narrow (the bootstrap sees (P-1)/P of the
between-process variance; with 3 processes per side its coverage of a 1 % process drift was about 88 % for a
nominal 95 % in simulation, with 2 processes about 67 %). And even an exact 95 % CI puts each of two
independent runs' ratios inside the other's CI only about 83 % of the time (the two ratios differ by
sqrt(2) standard errors), so that consistency check is expected to miss on a minority of cells.
`median_ratio_ci` (the flat bootstrap) remains for samples without process structure.

`process_t_median_ratio_ci` is the gate's default. It treats the process, not the repetition, as the unit:
each process is summarised by the median of its repetitions, and the CI is a Welch t interval on the logs of
those process medians (sample variance on each side, Welch-Satterthwaite degrees of freedom), centred on the
log of the ratio of the pooled medians (the same point estimate as the bootstraps) and exponentiated. The t
quantile is what corrects the small-sample narrowness of the percentile bootstrap: with 3 processes per side
and df of about 2-4 it is 2.8-4.3 rather than 1.96. In the simulation above (3 x 5 per side, 1 % process
drift, 0.2 % repetition noise, 4000 pairs of runs) it covered the true ratio 95.7 % of the time and put two
independent runs' ratios inside each other's CIs 82 % of the time (about what an exact CI gives), against 88 %
and 59 % for the two-level bootstrap. It needs at least 2 processes per side and some spread between process
medians; otherwise it returns the bootstrap CI (two-level, or flat when both sides have one process) and
`RatioCI.fallback` says why. `student_t_quantile` is implemented here: the regularized incomplete beta by its
continued fraction, inverted by bisection. Why not scipy, although GPU images often carry it: it is not a
runtime dependency of the suite (a CPU runner's venv, built from pyproject, has none), and "scipy where present,
ours elsewhere" would give two code paths for one decision, so a verdict could differ in its last digits by
host. One implementation everywhere, held to `scipy.stats.t` (1e-6 relative for the quantile) and
`scipy.special.betainc` (1e-9) by tests/decisions/test_student_t_and_mcnemar.py, which the dev extra runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import NormalDist

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
    n_candidate: int  # samples (all processes together)
    n_baseline: int
    n_resamples: int
    candidate_processes: int = 1
    baseline_processes: int = 1
    # "flat" (repetitions resampled), "two-level" (processes, then repetitions) or "process-t" (Welch t on the
    # log process medians)
    method: str = "flat"
    df: float | None = None  # the Welch-Satterthwaite degrees of freedom of a "process-t" CI
    fallback: str | None = None  # why a "process-t" CI was asked for and this bootstrap CI returned instead


def median_ratio_ci(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = 4000,
    seed: int = 0,
) -> RatioCI:
    """Percentile-bootstrap CI of median(candidate) / median(baseline), the samples resampled independently."""
    c = _checked(candidate, "candidate")
    b = _checked(baseline, "baseline")
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


def _checked(samples: Sequence[float], side: str) -> np.ndarray:
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"{side}: need at least 2 repetitions, got {x.size}")
    if not np.isfinite(x).all() or (x <= 0).any():
        raise ValueError(f"{side}: timing samples must be finite and positive")
    return x


def _two_level_medians(groups: list[np.ndarray], n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Median of each two-level resample: draw len(groups) processes with replacement, then as many
    repetitions as each drawn process has, with replacement from that process; pool; take the median."""
    sizes = np.array([g.size for g in groups])
    width = int(sizes.max())
    padded = np.full((len(groups), width), np.nan)
    for i, g in enumerate(groups):
        padded[i, : g.size] = g
    procs = rng.integers(0, len(groups), (n_resamples, len(groups)))
    drawn_sizes = sizes[procs][..., None]  # (resample, process, 1)
    reps = np.floor(rng.random((n_resamples, len(groups), width)) * drawn_sizes).astype(np.int64)
    values = padded[procs[..., None], reps]
    # A drawn process contributes exactly its own number of repetitions; the padding beyond it is NaN.
    values[np.arange(width) >= drawn_sizes] = np.nan
    return np.nanmedian(values.reshape(n_resamples, -1), axis=1)


def two_level_median_ratio_ci(
    candidate: Sequence[Sequence[float]],
    baseline: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    n_resamples: int = 4000,
    seed: int = 0,
) -> RatioCI:
    """Percentile CI of median(candidate) / median(baseline) from a two-level (hierarchical) bootstrap.

    Parameters
    ----------
    candidate, baseline
        Samples grouped by process: one inner sequence per fresh worker process, its repetitions in order
        (at least 2 each; processes may differ in repetitions). The sides are resampled independently.

    The point estimate is the ratio of the medians of all samples of each side pooled, as in
    `median_ratio_ci`. A side with one process is resampled over its repetitions only (the flat bootstrap for
    that side): its process-to-process variation is then not in the CI, which callers must say.
    """
    if not candidate or not baseline:
        raise ValueError(f"need at least 1 process per side, got {len(candidate)} and {len(baseline)}")
    c = [_checked(g, f"candidate process {i}") for i, g in enumerate(candidate)]
    b = [_checked(g, f"baseline process {i}") for i, g in enumerate(baseline)]
    rng = np.random.default_rng(seed)
    ratios = _two_level_medians(c, n_resamples, rng) / _two_level_medians(b, n_resamples, rng)
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    c_all, b_all = np.concatenate(c), np.concatenate(b)
    return RatioCI(
        ratio=float(np.median(c_all) / np.median(b_all)),
        low=float(low),
        high=float(high),
        confidence=confidence,
        n_candidate=int(c_all.size),
        n_baseline=int(b_all.size),
        n_resamples=n_resamples,
        candidate_processes=len(c),
        baseline_processes=len(b),
        method="two-level",
    )


def process_t_median_ratio_ci(
    candidate: Sequence[Sequence[float]],
    baseline: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    n_resamples: int = 4000,
    seed: int = 0,
) -> RatioCI:
    """Welch t CI of median(candidate) / median(baseline) over the processes, on the log scale.

    Parameters are those of `two_level_median_ratio_ci` (samples grouped by process). Per process the median
    of its repetitions is taken and logged; with s2 the sample variance of those logs on a side and n its
    number of processes, the half-width is t(1 - alpha/2, df) * sqrt(s2_c / n_c + s2_b / n_b), df the
    Welch-Satterthwaite value, around log(ratio of the pooled medians); the bounds are exponentiated.

    Falls back to the bootstrap, with `fallback` saying why, where the t interval cannot be formed: when a side
    has one process its process-to-process variance is unknown (the two-level bootstrap, or the flat one when
    both sides have one process, as `qualify.perf.compare` did before); when every process median is the same
    on both sides the interval would be a single point (the two-level bootstrap, which still sees the
    repetitions' spread). `n_resamples` and `seed` are used only by those fallbacks.
    """
    if not candidate or not baseline:
        raise ValueError(f"need at least 1 process per side, got {len(candidate)} and {len(baseline)}")
    c = [_checked(g, f"candidate process {i}") for i, g in enumerate(candidate)]
    b = [_checked(g, f"baseline process {i}") for i, g in enumerate(baseline)]

    def two_level() -> RatioCI:
        return two_level_median_ratio_ci(c, b, confidence=confidence, n_resamples=n_resamples, seed=seed)

    if len(c) == 1 and len(b) == 1:
        flat = median_ratio_ci(c[0], b[0], confidence=confidence, n_resamples=n_resamples, seed=seed)
        return replace(
            flat,
            fallback="one process per side, so there is no process-to-process variance to form a t interval from",
        )
    if len(c) == 1 or len(b) == 1:
        which = "candidate" if len(c) == 1 else "baseline"
        return replace(
            two_level(),
            fallback=f"the {which} has one process, so its process-to-process variance is unknown",
        )
    log_c = np.log([np.median(g) for g in c])
    log_b = np.log([np.median(g) for g in b])
    v_c = float(np.var(log_c, ddof=1)) / log_c.size  # squared standard error of each side's mean log median
    v_b = float(np.var(log_b, ddof=1)) / log_b.size
    se2 = v_c + v_b
    if not se2 > 0.0:
        return replace(
            two_level(),
            fallback="every process median is the same on both sides, so the t interval would be a single point",
        )
    df = se2**2 / (v_c**2 / (log_c.size - 1) + v_b**2 / (log_b.size - 1))
    half = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * math.sqrt(se2)
    c_all, b_all = np.concatenate(c), np.concatenate(b)
    ratio = float(np.median(c_all) / np.median(b_all))
    centre = math.log(ratio)
    return RatioCI(
        ratio=ratio,
        low=math.exp(centre - half),
        high=math.exp(centre + half),
        confidence=confidence,
        n_candidate=int(c_all.size),
        n_baseline=int(b_all.size),
        n_resamples=0,
        candidate_processes=len(c),
        baseline_processes=len(b),
        method="process-t",
        df=float(df),
    )


# -- Student t quantile (no scipy) ------------------------------------------------------------------------
def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz), for x < (a + 1) / (a + b + 2)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _regularized_incomplete_beta(a: float, b: float, x: float, one_minus_x: float) -> float:
    """I_x(a, b), with 1 - x passed in separately so that neither is lost to cancellation."""
    if x <= 0.0:
        return 0.0
    if one_minus_x <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(one_minus_x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, one_minus_x) / b


def student_t_upper_tail(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` (> 0, not necessarily whole) degrees of freedom."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(df):
        return 1.0 - NormalDist().cdf(t)
    tail = 0.5 * _regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def student_t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` (> 0, not necessarily whole; inf for the normal) degrees of
    freedom: the upper tail from the incomplete beta, inverted by bisection to about 1e-12 relative."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(df) or df > 1e10:
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    q = 1.0 - p  # the upper tail to find
    low, high = 0.0, max(1.0, NormalDist().inv_cdf(p))
    while student_t_upper_tail(high, df) > q:  # heavier tails than the normal: widen until bracketed
        low, high = high, high * 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if student_t_upper_tail(mid, df) > q:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * high:
            break
    return 0.5 * (low + high)


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
