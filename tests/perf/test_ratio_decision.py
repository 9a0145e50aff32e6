"""The perf gate's statistics on synthetic timings: a clear win passes, a clear loss fails, noise is inconclusive."""

from __future__ import annotations

import numpy as np
import pytest

from qualify.stats.ratio import Decision, Direction, decide, median_ratio_ci


def samples(rng: np.random.Generator, centre: float, rel_noise: float, n: int = 5) -> list[float]:
    return list(centre * (1 + rel_noise * rng.standard_normal(n)))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()  # fresh every run


def test_clear_win_passes_and_clear_loss_fails(rng: np.random.Generator) -> None:
    base = samples(rng, 100.0, 0.01)
    win = median_ratio_ci(samples(rng, 150.0, 0.01), base, seed=1)
    loss = median_ratio_ci(samples(rng, 70.0, 0.01), base, seed=1)
    assert decide(win, 1.0, Direction.HIGHER_IS_BETTER) is Decision.PASS
    assert decide(loss, 1.0, Direction.HIGHER_IS_BETTER) is Decision.FAIL
    # For latency the same ratios mean the opposite.
    assert decide(win, 1.0, Direction.LOWER_IS_BETTER) is Decision.FAIL
    assert decide(loss, 1.0, Direction.LOWER_IS_BETTER) is Decision.PASS


def test_overlapping_noise_is_inconclusive(rng: np.random.Generator) -> None:
    results = [
        decide(
            median_ratio_ci(samples(rng, 100.0, 0.08), samples(rng, 100.0, 0.08), seed=s),
            1.0,
            Direction.HIGHER_IS_BETTER,
        )
        for s in range(20)
    ]
    # Equal means with 8 % noise: a CI straddling 1.0 almost always; never a confident pass or fail en masse.
    assert results.count(Decision.INCONCLUSIVE) >= 15


def test_ci_contains_the_point_ratio_and_is_deterministic_given_the_seed(rng: np.random.Generator) -> None:
    c, b = samples(rng, 120.0, 0.05, 7), samples(rng, 100.0, 0.05, 7)
    ci = median_ratio_ci(c, b, seed=3)
    assert ci.low <= ci.ratio <= ci.high
    assert median_ratio_ci(c, b, seed=3) == ci
    assert ci.n_candidate == 7 and ci.n_baseline == 7


@pytest.mark.parametrize("bad", [[1.0], [1.0, float("nan")], [1.0, 0.0], [1.0, -2.0]])
def test_bad_samples_are_refused(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        median_ratio_ci(bad, [1.0, 1.1, 0.9])
