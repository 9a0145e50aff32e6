"""The perf gate's statistics on synthetic timings: a clear win passes, a clear loss fails, noise is inconclusive."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qualify.stats.ratio import (
    Decision,
    Direction,
    RatioCI,
    decide,
    median_ratio_ci,
    process_t_median_ratio_ci,
    student_t_quantile,
    two_level_median_ratio_ci,
)


def samples(rng: np.random.Generator, centre: float, rel_noise: float, n: int = 5) -> list[float]:
    return list(centre * (1 + rel_noise * rng.standard_normal(n)))


@pytest.fixture
def rng(test_seed: int) -> np.random.Generator:
    return np.random.default_rng(test_seed)  # fresh every session, replayable (tests/conftest.py prints the seed)


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


# -- two-level (processes, then repetitions) --------------------------------------------------------------
def processes(
    rng: np.random.Generator, centre: float, drift: float, rel_noise: float, n_processes: int = 3, reps: int = 5
) -> list[list[float]]:
    """`n_processes` fresh processes: each lands `drift` (relative sd) off `centre`, its repetitions scatter
    `rel_noise` around that."""
    return [samples(rng, centre * (1 + drift * rng.standard_normal()), rel_noise, reps) for _ in range(n_processes)]


def flat(groups: list[list[float]]) -> list[float]:
    return [x for g in groups for x in g]


def width(ci: RatioCI) -> float:
    return ci.high - ci.low


def mutually_inside(a: RatioCI, b: RatioCI) -> bool:
    """The acceptance check of two runs: each run's ratio inside the other run's CI."""
    return b.low <= a.ratio <= b.high and a.low <= b.ratio <= a.high


def test_two_level_point_estimate_is_the_ratio_of_the_pooled_medians(rng: np.random.Generator) -> None:
    c, b = processes(rng, 120.0, 0.01, 0.01), processes(rng, 100.0, 0.01, 0.01)
    ci = two_level_median_ratio_ci(c, b, seed=4)
    assert ci.ratio == pytest.approx(float(np.median(flat(c)) / np.median(flat(b))))
    assert ci.low <= ci.ratio <= ci.high
    assert (ci.method, ci.candidate_processes, ci.baseline_processes, ci.n_candidate) == ("two-level", 3, 3, 15)
    assert two_level_median_ratio_ci(c, b, seed=4) == ci


def test_two_level_decides_a_clear_win_a_clear_loss_and_overlapping_noise(rng: np.random.Generator) -> None:
    base = processes(rng, 100.0, 0.005, 0.01)
    win = two_level_median_ratio_ci(processes(rng, 150.0, 0.005, 0.01), base, seed=1)
    loss = two_level_median_ratio_ci(processes(rng, 70.0, 0.005, 0.01), base, seed=1)
    assert decide(win, 1.0, Direction.HIGHER_IS_BETTER) is Decision.PASS
    assert decide(loss, 1.0, Direction.HIGHER_IS_BETTER) is Decision.FAIL
    noisy = [
        decide(
            two_level_median_ratio_ci(processes(rng, 100, 0.01, 0.08), processes(rng, 100, 0.01, 0.08), seed=s),
            1.0,
            Direction.HIGHER_IS_BETTER,
        )
        for s in range(20)
    ]
    assert noisy.count(Decision.INCONCLUSIVE) >= 15


def test_two_level_ci_is_wider_than_flat_when_processes_differ_and_about_the_same_when_not(
    rng: np.random.Generator,
) -> None:
    def width_ratio(drift: float, rel_noise: float) -> float:
        ratios = []
        for s in range(30):
            c, b = processes(rng, 100.0, drift, rel_noise), processes(rng, 100.0, drift, rel_noise)
            two = two_level_median_ratio_ci(c, b, seed=s, n_resamples=2000)
            one = median_ratio_ci(flat(c), flat(b), seed=s, n_resamples=2000)
            ratios.append(width(two) / width(one))
        return float(np.mean(ratios))

    # Processes 2 % apart, repetitions within 0.1 %: the flat bootstrap treats 15 clustered samples as 15
    # independent ones; the two-level one sees 3 processes. (Simulated mean ratio about 1.4.)
    assert width_ratio(0.02, 0.001) > 1.25
    # No process effect: both describe the same repetition noise (simulated about 1.25: the second level
    # resamples repetitions that the first already varied).
    assert 0.9 < width_ratio(0.0, 0.005) < 1.45


def test_two_runs_agree_within_two_level_cis_where_one_process_cis_do_not(rng: np.random.Generator) -> None:
    """The issue-6 symptom, simulated: processes drift 1 %, repetitions agree to 0.2 %. Two independent runs of
    3 processes x 5 repetitions per side; the old scheme is the first process of each side with the flat CI.

    An exact 95 % CI puts each of two independent runs' ratios inside the other's CI only ~83 % of the time
    (they differ by sqrt(2) standard errors), and with 3 processes the percentile CI is still somewhat narrow:
    simulated ~0.59 mutually inside and ~0.88 coverage of the true ratio 1, against ~0.10 and ~0.20 for one
    process. The process-level t interval on the same data: ~0.82 and ~0.96 (its own test below holds the
    bounds); here it must do clearly better than the bootstrap. The bounds leave about 4 binomial standard
    deviations of room on 200 runs.
    """
    n = 200
    inside_two = inside_one = inside_t = covered_two = covered_one = 0
    for s in range(n):
        run_a = (processes(rng, 100, 0.01, 0.002), processes(rng, 100, 0.01, 0.002))
        run_b = (processes(rng, 100, 0.01, 0.002), processes(rng, 100, 0.01, 0.002))
        two_a = two_level_median_ratio_ci(*run_a, seed=s, n_resamples=2000)
        two_b = two_level_median_ratio_ci(*run_b, seed=n + s, n_resamples=2000)
        one_a = median_ratio_ci(run_a[0][0], run_a[1][0], seed=s, n_resamples=2000)
        one_b = median_ratio_ci(run_b[0][0], run_b[1][0], seed=n + s, n_resamples=2000)
        inside_two += mutually_inside(two_a, two_b)
        inside_one += mutually_inside(one_a, one_b)
        inside_t += mutually_inside(process_t_median_ratio_ci(*run_a), process_t_median_ratio_ci(*run_b))
        covered_two += two_a.low <= 1.0 <= two_a.high
        covered_one += one_a.low <= 1.0 <= one_a.high
    assert inside_two / n >= 0.45 and inside_one / n <= 0.22
    assert covered_two / n >= 0.78 and covered_one / n <= 0.35
    assert inside_t / n >= inside_two / n + 0.1  # simulated difference about 0.23


def test_process_t_is_calibrated_where_the_two_level_bootstrap_is_narrow(rng: np.random.Generator) -> None:
    """The same simulation (3 processes x 5 repetitions per side, 1 % process drift, 0.2 % repetition noise),
    the process-level Welch t interval only (cheap, so 1000 pairs of runs). Simulated over 2 x 2000 pairs:
    0.82 of pairs mutually inside (an exact 95 % CI gives ~0.83) and 0.957 coverage of the true ratio 1,
    against 0.59 and 0.88 for the two-level bootstrap. The bounds are about 4 binomial standard deviations
    below those values."""
    n = 1000
    inside = covered = 0
    dfs = []
    for _ in range(n):
        a = process_t_median_ratio_ci(processes(rng, 100, 0.01, 0.002), processes(rng, 100, 0.01, 0.002))
        b = process_t_median_ratio_ci(processes(rng, 100, 0.01, 0.002), processes(rng, 100, 0.01, 0.002))
        assert a.method == b.method == "process-t" and a.fallback is None
        inside += mutually_inside(a, b)
        covered += a.low <= 1.0 <= a.high
        dfs.append(a.df)
    assert inside / n >= 0.77
    assert covered / n >= 0.93
    assert min(dfs) >= 2.0 and max(dfs) <= 4.0  # Welch-Satterthwaite with 2 + 2 degrees of freedom


# -- the process-level t interval -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("p", "df", "table"),
    [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 10, 2.228), (0.975, 30, 2.042),
     (0.995, 4, 4.604), (0.95, 3, 2.353), (0.9995, 1, 636.619), (0.975, math.inf, 1.960), (0.975, 1e9, 1.960)],
)  # fmt: skip
def test_student_t_quantile_matches_the_table(p: float, df: float, table: float) -> None:
    assert student_t_quantile(p, df) == pytest.approx(table, abs=5e-4)
    assert student_t_quantile(1 - p, df) == pytest.approx(-table, abs=5e-4)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.99999])
def test_student_t_quantile_matches_the_closed_forms_of_one_and_two_df(p: float) -> None:
    assert student_t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
    assert student_t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)


def test_student_t_quantile_takes_fractional_df_and_refuses_nonsense() -> None:
    # Welch df are not whole: the quantile falls between its neighbours, and towards the normal as df grows.
    assert student_t_quantile(0.975, 3) > student_t_quantile(0.975, 3.5) > student_t_quantile(0.975, 4)
    assert student_t_quantile(0.975, 1e6) == pytest.approx(1.959966, abs=1e-5)
    assert student_t_quantile(0.5, 3) == 0.0
    for p, df in ((0.0, 3), (1.0, 3), (0.9, 0), (0.9, -1), (0.9, float("nan"))):
        with pytest.raises(ValueError):
            student_t_quantile(p, df)


def test_process_t_is_the_welch_interval_around_the_pooled_ratio() -> None:
    c = [[10.0, 10.2, 10.1], [10.5, 10.4, 10.6], [9.8, 9.9, 10.0]]
    b = [[5.0, 5.1, 4.9], [5.2, 5.3, 5.1], [5.0, 5.0, 5.1], [4.8, 4.9, 4.7]]
    ci = process_t_median_ratio_ci(c, b)
    lc, lb = np.log([10.1, 10.5, 9.9]), np.log([5.0, 5.2, 5.0, 4.8])
    vc, vb = np.var(lc, ddof=1) / 3, np.var(lb, ddof=1) / 4
    df = (vc + vb) ** 2 / (vc**2 / 2 + vb**2 / 3)
    half = student_t_quantile(0.975, df) * math.sqrt(vc + vb)
    ratio = float(np.median(flat(c)) / np.median(flat(b)))
    assert ci.ratio == pytest.approx(ratio) and ci.df == pytest.approx(df)
    assert (ci.low, ci.high) == pytest.approx((ratio * math.exp(-half), ratio * math.exp(half)))
    assert (ci.method, ci.fallback, ci.candidate_processes, ci.baseline_processes) == ("process-t", None, 3, 4)
    assert (ci.n_candidate, ci.n_baseline) == (9, 12)


def test_process_t_decides_a_clear_win_a_clear_loss_and_overlapping_noise(rng: np.random.Generator) -> None:
    base = processes(rng, 100.0, 0.01, 0.002)
    win = process_t_median_ratio_ci(processes(rng, 110.0, 0.01, 0.002), base)
    loss = process_t_median_ratio_ci(processes(rng, 90.0, 0.01, 0.002), base)
    assert win.method == loss.method == "process-t"
    assert decide(win, 1.0, Direction.HIGHER_IS_BETTER) is Decision.PASS
    assert decide(loss, 1.0, Direction.HIGHER_IS_BETTER) is Decision.FAIL
    assert decide(win, 1.0, Direction.LOWER_IS_BETTER) is Decision.FAIL
    assert decide(loss, 1.0, Direction.LOWER_IS_BETTER) is Decision.PASS
    noisy = [
        decide(
            process_t_median_ratio_ci(processes(rng, 100, 0.01, 0.08), processes(rng, 100, 0.01, 0.08)),
            1.0,
            Direction.HIGHER_IS_BETTER,
        )
        for _ in range(20)
    ]
    assert noisy.count(Decision.INCONCLUSIVE) >= 15


def test_process_t_falls_back_to_the_bootstrap_with_one_process_and_says_so(rng: np.random.Generator) -> None:
    c, b = processes(rng, 110.0, 0.01, 0.01), processes(rng, 100.0, 0.01, 0.01)
    one_side = process_t_median_ratio_ci(c, b[:1], seed=7)
    assert one_side.method == "two-level" and one_side.df is None
    assert one_side.fallback == "the baseline has one process, so its process-to-process variance is unknown"
    assert one_side.low == two_level_median_ratio_ci(c, b[:1], seed=7).low  # exactly the two-level bootstrap
    assert "the candidate has one process" in (process_t_median_ratio_ci(c[:1], b).fallback or "")
    both = process_t_median_ratio_ci(c[:1], b[:1], seed=7)
    assert both.method == "flat" and both.fallback and both.fallback.startswith("one process per side")
    assert (both.low, both.high) == (median_ratio_ci(c[0], b[0], seed=7).low, median_ratio_ci(c[0], b[0], seed=7).high)


def test_process_t_falls_back_when_every_process_median_is_the_same(rng: np.random.Generator) -> None:
    # Identical process medians on both sides: the t interval would be a single point; the two-level bootstrap
    # still sees the repetitions' spread.
    rep_c, rep_b = samples(rng, 110.0, 0.01), samples(rng, 100.0, 0.01)
    ci = process_t_median_ratio_ci([rep_c] * 3, [list(reversed(rep_b))] * 2 + [rep_b], seed=3)
    assert ci.method == "two-level" and ci.df is None
    assert ci.fallback == "every process median is the same on both sides, so the t interval would be a single point"
    assert ci.low < ci.ratio < ci.high
    # One side without spread is fine: the other side's variance (and its df) carries the interval.
    spread = process_t_median_ratio_ci([rep_c] * 3, processes(rng, 100.0, 0.01, 0.01))
    assert spread.method == "process-t" and spread.df == pytest.approx(2.0) and spread.low < spread.high


def test_each_drawn_process_contributes_its_own_number_of_repetitions() -> None:
    # Processes of 2 and 6 repetitions. Drawing both pools 2 + 6 values, median 20; only drawing the short
    # one twice (probability 1/4) gives 10. Padding the short one to 6 would give 15 for half the draws.
    ci = two_level_median_ratio_ci([[10.0, 10.0], [20.0] * 6], [[1.0, 1.0]], confidence=0.4, seed=0)
    assert ci.low == ci.high == 20.0
    assert ci.ratio == 20.0 and ci.n_candidate == 8


def test_one_process_per_side_is_the_flat_bootstrap(rng: np.random.Generator) -> None:
    c, b = samples(rng, 110.0, 0.03, 9), samples(rng, 100.0, 0.03, 9)
    two = two_level_median_ratio_ci([c], [b], seed=5, n_resamples=20_000)
    one = median_ratio_ci(c, b, seed=5, n_resamples=20_000)
    assert two.ratio == one.ratio
    # The same resampling distribution, drawn with other random numbers: bounds agree to Monte Carlo error.
    # The median of 9 resampled values is discrete, so a percentile bound jumps between neighbouring order
    # statistics: at 2000 resamples and 0.15 widths this failed ~3 % of fresh draws. At 20000 resamples the
    # largest gap in 6000 simulated draws was 0.31 widths (10000 resamples) and 0.27 (20000); 0.4 leaves margin.
    assert abs(two.low - one.low) < 0.4 * width(one) and abs(two.high - one.high) < 0.4 * width(one)


@pytest.mark.parametrize(
    ("candidate", "message"),
    [([], "at least 1 process"), ([[1.0, 1.1], [1.0]], "candidate process 1: need at least 2"),
     ([[1.0, float("nan")]], "finite and positive"), ([[1.0, 0.0]], "finite and positive")],
)  # fmt: skip
def test_bad_process_groups_are_refused(candidate: list[list[float]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        two_level_median_ratio_ci(candidate, [[1.0, 1.1, 0.9]])
