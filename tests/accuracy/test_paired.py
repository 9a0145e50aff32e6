from __future__ import annotations

import math

import numpy as np
import pytest
from _seeding import seeded_rng

from qualify.stats.paired import discordance, mcnemar_exact_p, score_ratio, score_ratio_ci


def _hand_mcnemar(b: int, c: int) -> float:
    m, k = b + c, min(b, c)
    return min(1.0, 2 * sum(math.comb(m, i) for i in range(k + 1)) / 2**m)


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),
        (0, 5, 0.0625),  # 2 * (1/2)^5
        (9, 1, 22 / 1024),  # 2 * (1 + 10) / 2^10
        (3, 3, 1.0),
        (2, 7, 2 * (1 + 9 + 36) / 512),
    ],
)
def test_mcnemar_known_values(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact_p(c, b) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_matches_binomial_test_on_random_counts() -> None:
    rng = seeded_rng()
    for _ in range(25):
        b, c = (int(x) for x in rng.integers(0, 60, size=2))
        assert mcnemar_exact_p(b, c) == pytest.approx(_hand_mcnemar(b, c), rel=1e-9)
    scipy_stats = pytest.importorskip("scipy.stats")
    for _ in range(25):
        b, c = (int(x) for x in rng.integers(0, 400, size=2))
        if b + c == 0:
            continue
        ref = scipy_stats.binomtest(min(b, c), b + c, 0.5).pvalue
        assert mcnemar_exact_p(b, c) == pytest.approx(min(1.0, ref), rel=1e-7, abs=1e-300)


def test_mcnemar_stays_exact_for_thousands_of_discordant_items() -> None:
    # A float sum of the binomial terms underflows here; the p-value is tiny but must be positive and ordered.
    far = mcnemar_exact_p(1500, 2500)
    near = mcnemar_exact_p(1990, 2010)
    assert 0.0 < far < 1e-50
    assert near > 0.5


def test_discordance_counts_match_a_plain_loop() -> None:
    rng = seeded_rng()
    ref = rng.random(500) < 0.6
    cand = np.where(rng.random(500) < 0.1, ~ref, ref)
    table = discordance(ref, cand)
    assert table.ref_only == sum(r and not c for r, c in zip(ref, cand, strict=True))
    assert table.cand_only == sum(c and not r for r, c in zip(ref, cand, strict=True))
    assert table.both + table.ref_only == int(ref.sum())
    assert table.n == 500
    assert table.rate == pytest.approx((table.ref_only + table.cand_only) / 500)


def test_discordance_rejects_non_binary_or_unpaired_input() -> None:
    with pytest.raises(ValueError, match="0/1"):
        discordance([0, 1, 2], [0, 1, 1])
    with pytest.raises(ValueError, match="shapes"):
        discordance([0, 1], [0, 1, 1])


def test_ratio_ci_brackets_the_estimate_and_pairing_narrows_it() -> None:
    rng = seeded_rng()
    ref = rng.random(400) < 0.7
    flips = rng.random(400) < 0.03
    cand = np.where(flips, ~ref, ref)
    ci = score_ratio_ci(ref, cand, np.random.default_rng(1), n_resamples=1000, confidence=0.9)
    assert ci.estimate == pytest.approx(cand.sum() / ref.sum())
    assert ci.low <= ci.estimate <= ci.high
    # An unrelated candidate with the same accuracy: the paired CI of a near-copy must be much narrower.
    unrelated = rng.permutation(cand)
    wide = score_ratio_ci(ref, unrelated, np.random.default_rng(1), n_resamples=1000, confidence=0.9)
    assert (ci.high - ci.low) < 0.6 * (wide.high - wide.low)


def test_identical_outcomes_give_a_degenerate_ci_at_one() -> None:
    ref = seeded_rng().random(50) < 0.5
    ref[0] = True
    ci = score_ratio_ci(ref, ref.copy(), np.random.default_rng(0), n_resamples=300)
    assert ci.estimate == ci.low == ci.high == 1.0


def test_a_reference_with_nothing_right_has_ratio_one_and_finite_ci() -> None:
    ref = np.zeros(20, dtype=bool)
    cand = seeded_rng().random(20) < 0.3
    assert score_ratio(ref, cand) == 1.0
    ci = score_ratio_ci(ref, cand, np.random.default_rng(0), n_resamples=300)
    assert (ci.low, ci.estimate, ci.high) == (1.0, 1.0, 1.0)
