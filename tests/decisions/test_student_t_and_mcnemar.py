"""The hand-written Student t quantile (the perf gate's process-t CI) and the exact McNemar p, against scipy."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from qualify.stats.paired import mcnemar_exact_p
from qualify.stats.ratio import _regularized_incomplete_beta, student_t_quantile, student_t_upper_tail

# The dev extra installs scipy; a runner image without it (nox -s gpu installs .[dev] with --no-deps) skips these.
stats = pytest.importorskip("scipy.stats")
special = pytest.importorskip("scipy.special")

# Published two-sided 95 % values (t(0.975, df)), 4 decimals.
TABLE_0975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 10: 2.2281, 30: 2.0423}


@pytest.mark.parametrize(("df", "value"), sorted(TABLE_0975.items()))
def test_t_0975_matches_the_printed_table(df: int, value: float) -> None:
    assert student_t_quantile(0.975, df) == pytest.approx(value, abs=5e-5)
    assert student_t_quantile(0.025, df) == pytest.approx(-value, abs=5e-5)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.95, 0.975, 0.995, 0.9995])
@pytest.mark.parametrize("df", [1, 1.5, 2, 2.5, 3, 3.7, 4, 5, 7.25, 10, 30, 200, 1e5])
def test_t_quantile_matches_scipy(p: float, df: float) -> None:
    expected = float(stats.t.ppf(p, df))
    assert student_t_quantile(p, df) == pytest.approx(expected, rel=1e-6)
    assert student_t_quantile(1.0 - p, df) == pytest.approx(-expected, rel=1e-6)


def test_t_quantile_median_and_normal_limit() -> None:
    assert student_t_quantile(0.5, 3.0) == 0.0
    z = NormalDist().inv_cdf(0.975)
    assert student_t_quantile(0.975, math.inf) == z
    assert student_t_quantile(0.975, 1e12) == pytest.approx(z, rel=1e-9)


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, -0.1])
def test_t_quantile_rejects_p_outside_the_open_unit_interval(p: float) -> None:
    with pytest.raises(ValueError, match=rf"p must be in \(0, 1\), got {p}"):
        student_t_quantile(p, 3.0)


@pytest.mark.parametrize("p", [0.5, 0.975])
@pytest.mark.parametrize("df", [0.0, -1.0])
def test_t_quantile_rejects_non_positive_df(p: float, df: float) -> None:
    with pytest.raises(ValueError, match=f"degrees of freedom must be positive, got {df}"):
        student_t_quantile(p, df)


@pytest.mark.parametrize("t", [-6.0, -2.5, -1.0, -0.3, 0.0, 0.3, 1.0, 2.5, 6.0])
@pytest.mark.parametrize("df", [1, 2.5, 4, 30])
def test_t_upper_tail_matches_scipy_on_both_sides(t: float, df: float) -> None:
    assert student_t_upper_tail(t, df) == pytest.approx(float(stats.t.sf(t, df)), rel=1e-9, abs=1e-15)


def test_t_upper_tail_at_zero_is_one_half_and_rejects_zero_df() -> None:
    assert student_t_upper_tail(0.0, 3.0) == 0.5
    with pytest.raises(ValueError, match="degrees of freedom must be positive, got 0"):
        student_t_upper_tail(1.0, 0)


_AB = [0.5, 1.0, 2.5, 5.0, 15.0, 40.0]


@pytest.mark.parametrize("a", _AB)
@pytest.mark.parametrize("b", _AB)
def test_incomplete_beta_matches_scipy_on_a_grid(a: float, b: float) -> None:
    for x in np.linspace(0.01, 0.99, 25):
        x = float(x)
        got = _regularized_incomplete_beta(a, b, x, 1.0 - x)
        assert got == pytest.approx(float(special.betainc(a, b, x)), rel=1e-9, abs=1e-300)


def test_incomplete_beta_ends() -> None:
    assert _regularized_incomplete_beta(2.0, 0.5, 0.0, 1.0) == 0.0
    assert _regularized_incomplete_beta(2.0, 0.5, 1.0, 0.0) == 1.0


_COUNTS = [0, 1, 2, 3, 5, 8, 13, 40, 101]


@pytest.mark.parametrize("b", _COUNTS)
@pytest.mark.parametrize("c", _COUNTS)
def test_mcnemar_exact_p_matches_scipy_binomtest(b: int, c: int) -> None:
    expected = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("b", "c"), [(-1, 3), (3, -1), (-2, -2)])
def test_mcnemar_rejects_negative_counts(b: int, c: int) -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        mcnemar_exact_p(b, c)
