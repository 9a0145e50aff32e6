"""Paired percentile bootstrap of a ratio of sums: coverage on synthetic truth, pairing, determinism, speed."""

from __future__ import annotations

import time

import numpy as np
import pytest

from qualify.stats.bootstrap import bootstrap_indices, paired_ratio_ci, ratio_of_sums_ci


def _synthetic(rng: np.random.Generator, n: int, true_ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-item NLL sums of a reference and a variant whose expected total is `true_ratio` times larger.

    The multiplier is independent of the item, so E[sum variant] / E[sum reference] is exactly true_ratio.
    """
    tokens = rng.integers(20, 80, size=n)
    reference = tokens * rng.gamma(4.0, 0.5, size=n)  # item difficulty varies a lot
    variant = reference * rng.normal(true_ratio, 0.01, size=n)
    return variant, reference


def test_coverage_on_known_truth(test_seed: int) -> None:
    seed = test_seed
    rng = np.random.default_rng(seed)
    true_ratio, sims, covered = 1.01, 200, 0
    for _ in range(sims):
        variant, reference = _synthetic(rng, 400, true_ratio)
        ci = paired_ratio_ci(variant, reference, rng, n_resamples=1000)
        covered += ci.low <= true_ratio <= ci.high
    # Nominal 95 % (about 94.4 % seen over many seeds: percentile intervals run slightly narrow); 180 is
    # 2.7 sd below that, so a false alarm is rare. The upper bound catches intervals too wide to mean anything.
    assert 0.90 * sims <= covered <= 0.99 * sims, f"seed={seed}: {covered}/{sims} covered"


def test_pairing_makes_the_interval_tight(test_seed: int) -> None:
    rng = np.random.default_rng(test_seed)
    variant, reference = _synthetic(rng, 200, 1.01)
    indices = bootstrap_indices(200, rng)
    paired = ratio_of_sums_ci(variant, reference, indices)
    # Unpaired: the two sides resampled independently, so item difficulty no longer cancels.
    other = bootstrap_indices(200, rng)
    ratios = variant[indices].sum(axis=1) / reference[other].sum(axis=1)
    unpaired_width = np.quantile(ratios, 0.975) - np.quantile(ratios, 0.025)
    assert paired.high - paired.low < unpaired_width / 5
    assert paired.low > 1.0  # a 1 % increase with 1 % per-item noise over 200 items is resolved


def test_estimate_and_bounds(test_seed: int) -> None:
    rng = np.random.default_rng(test_seed)
    variant, reference = _synthetic(rng, 50, 1.2)
    ci = paired_ratio_ci(variant, reference, rng, n_resamples=500, confidence=0.9)
    assert ci.estimate == pytest.approx(variant.sum() / reference.sum(), rel=1e-12)
    assert ci.low < ci.estimate < ci.high
    assert (ci.confidence, ci.n_resamples) == (0.9, 500)
    # A constant ratio has no spread.
    exact = paired_ratio_ci(2 * reference, reference, rng, n_resamples=100)
    assert exact.low == pytest.approx(2.0) and exact.high == pytest.approx(2.0)


def test_seed_determines_the_interval(test_seed: int) -> None:
    seed = test_seed
    variant, reference = _synthetic(np.random.default_rng(seed), 80, 1.05)
    a = paired_ratio_ci(variant, reference, np.random.default_rng(seed))
    b = paired_ratio_ci(variant, reference, np.random.default_rng(seed))
    c = paired_ratio_ci(variant, reference, np.random.default_rng(seed + 1))
    assert a == b
    assert (a.low, a.high) != (c.low, c.high)


def test_vectorized_speed(test_seed: int) -> None:
    rng = np.random.default_rng(test_seed)
    variant, reference = _synthetic(rng, 400, 1.01)
    start = time.perf_counter()
    paired_ratio_ci(variant, reference, rng, n_resamples=2000)
    assert time.perf_counter() - start < 1.0  # milliseconds normally; generous for a busy shared CI box


def test_rejects_bad_shapes() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="equal 1-D"):
        ratio_of_sums_ci(np.ones(3), np.ones(4), bootstrap_indices(3, rng))
    with pytest.raises(ValueError, match="do not resample"):
        ratio_of_sums_ci(np.ones(3), np.ones(3), bootstrap_indices(4, rng))
    with pytest.raises(ValueError, match="confidence"):
        ratio_of_sums_ci(np.ones(3), np.ones(3), bootstrap_indices(3, rng), confidence=1.0)
    with pytest.raises(ValueError):
        bootstrap_indices(0, rng)
