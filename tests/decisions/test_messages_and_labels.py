"""What the decision code says when it refuses input or describes a CI: the words reach the signed report or the
user's terminal, so they are pinned like the numbers (mutation run 3, results/2026-12-01-mutation-cpu/)."""

from __future__ import annotations

import numpy as np
import pytest

from qualify.accuracy.floor import FloorRule, evaluate_floor
from qualify.perf.compare import CI_METHODS, Side, _ratio_ci
from qualify.stats.paired import mcnemar_exact_p, score_ratio_ci
from qualify.stats.ratio import median_ratio_ci, process_t_median_ratio_ci, two_level_median_ratio_ci

GOOD = [1.0, 1.1, 0.9]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: median_ratio_ci([1.0], GOOD), r"^candidate: need at least 2 repetitions, got 1$"),
        (lambda: median_ratio_ci(GOOD, [1.0, float("nan")]), r"^baseline: timing samples must be finite and positive$"),
        (lambda: two_level_median_ratio_ci([GOOD], [GOOD, [0.0, 1.0]]), r"^baseline process 1: timing samples"),
        (lambda: process_t_median_ratio_ci([GOOD, [1.0]], [GOOD, GOOD]), r"^candidate process 1: need at least 2"),
        (lambda: process_t_median_ratio_ci([GOOD, GOOD], [GOOD, [-1.0, 1.0]]), r"^baseline process 1: timing"),
        (lambda: mcnemar_exact_p(-1, 2), r"^discordant counts cannot be negative$"),
        (
            lambda: score_ratio_ci([1, 0], [1, 1], np.random.default_rng(0), 10, 1.0),
            r"^confidence must be in \(0, 1\)$",
        ),
    ],
)
def test_refusals_name_the_side_and_the_problem(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_an_unknown_ci_method_lists_the_choices() -> None:
    side = Side("s", [GOOD, GOOD])
    with pytest.raises(ValueError, match=rf"^unknown ci_method 'magic'; choices: {', '.join(CI_METHODS)}$"):
        _ratio_ci(side, side, method="magic", confidence=0.95, n_resamples=10, seed=0)


@pytest.mark.parametrize(
    ("groups", "label"),
    [
        ([[1.0] * 5] * 3, "3 processes x 5 repetitions"),
        ([[1.0] * 4, [1.0] * 5, [1.0] * 6], "3 processes x 4-6 repetitions"),  # the smallest and the largest
        ([[1.0] * 6, [1.0] * 4], "2 processes x 4-6 repetitions"),
        ([[1.0] * 2], "1 process x 2 repetitions"),
    ],
)
def test_side_layout_names_processes_and_the_range_of_repetitions(groups, label: str) -> None:
    assert Side("s", groups).layout() == label


def test_a_flat_bootstrap_statistic_counts_the_repetitions_of_each_side() -> None:
    cand, base = Side("c", [[1.0, 1.1, 0.9, 1.0]]), Side("b", [[2.0, 2.1, 1.9]])
    _, how = _ratio_ci(cand, base, method="process-t", confidence=0.95, n_resamples=50, seed=0)
    assert "percentile flat bootstrap over the repetitions of one process per side (4 / 3)" in how


def test_a_vacuous_floor_says_why_in_its_reason() -> None:
    result = evaluate_floor([0] * 6, [1] * 6, FloorRule((0.99,), "point", n_resamples=50), np.random.default_rng(0),
                            label="t")  # fmt: skip
    assert str(result.shortfalls[0]) == ("vacuous: the reference scored 0 of 6: no floor could fail (ratio taken as 1)")


def test_a_resample_with_one_reference_success_has_a_real_ratio() -> None:
    # One item of ten right on the reference, none on the candidate: every resample that drew that item has
    # ratio 0 (about 65 % of them); only those that never drew it take the convention 1. Treating a reference
    # sum of 1 like 0 would make 74 % of the ratios 1 and move the 40 % quantile to 1.
    ci = score_ratio_ci([1] + [0] * 9, [0] * 10, np.random.default_rng(3), 4000, confidence=0.2)
    assert ci.low == 0.0 == ci.high
