"""An accuracy floor that could not have failed makes its item INCOMPLETE (vacuous or underpowered), never PASS."""

from __future__ import annotations

import numpy as np

from qualify.accuracy.floor import FloorRule, evaluate_floor
from qualify.results import ItemOutcome, Status


def _decide(reference: np.ndarray, candidate: np.ndarray, rule: FloorRule) -> tuple[Status, str | None]:
    result = evaluate_floor(reference, candidate, rule, np.random.default_rng(0), label="t L")
    return ItemOutcome(checks=result.checks, shortfalls=result.shortfalls).settled_status()


def test_a_reference_scoring_zero_is_vacuous_not_pass() -> None:
    # GSM8K smoke on CPU: 0 of 8 on every layout; the ratio is 1 by convention, so every floor "passes".
    zeros = np.zeros(8, dtype=bool)
    rule = FloorRule(floors=(0.5,), decision="point", n_resamples=200, allow_underpowered=True)
    status, reason = _decide(zeros, zeros, rule)
    assert status is Status.INCOMPLETE
    assert reason is not None and reason.startswith("vacuous: the reference scored 0 of 8")


def test_an_underpowered_floor_is_incomplete_even_when_allowed() -> None:
    ref = np.array([True, False] * 20)
    rule = FloorRule(floors=(0.99,), decision="point", n_resamples=200, allow_underpowered=True)
    status, reason = _decide(ref, ref.copy(), rule)
    assert status is Status.INCOMPLETE
    assert reason is not None and reason.startswith("underpowered: ")


def test_a_powered_floor_that_holds_passes() -> None:
    rng = np.random.default_rng(1)
    ref = rng.random(4000) < 0.8
    cand = ref.copy()
    cand[:10] = ~cand[:10]  # a few discordant items, as real layouts show
    rule = FloorRule(floors=(0.5,), decision="point", n_resamples=200, assumed_discordance=0.01)
    assert _decide(ref, cand, rule) == (Status.PASSED, None)


def _lose(reference: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """The reference's outcomes with `count` of its correct items, chosen at random, answered wrong."""
    cand = reference.copy()
    cand[rng.choice(np.flatnonzero(reference), size=count, replace=False)] = False
    return cand


def test_an_underpowered_floor_whose_ci_straddles_it_is_incomplete_not_failed() -> None:
    # BoolQ about the document on the GPU: 27 questions, one lost; the CI cannot tell a 1 % drop from none.
    rng = np.random.default_rng()
    ref = np.zeros(27, dtype=bool)
    ref[rng.choice(27, size=14, replace=False)] = True
    cand = _lose(ref, 1, rng)
    rule = FloorRule(floors=(0.99, 0.999), decision="ci_lower", n_resamples=500, allow_underpowered=True)
    result = evaluate_floor(ref, cand, rule, rng, label="t L")
    assert [c.decided_outcome for c in result.checks] == ["inconclusive", "inconclusive"]
    assert all(c.ci_low < c.threshold <= c.ci_high for c in result.checks)
    status, reason = ItemOutcome(checks=result.checks, shortfalls=result.shortfalls).settled_status()
    assert status is Status.INCOMPLETE
    assert reason is not None and reason.startswith("underpowered: ")
    assert "inconclusive at this n" in reason and "t L keeps 0.99 of reference" in reason


def test_an_underpowered_floor_still_fails_when_the_whole_ci_is_below_it() -> None:
    rng = np.random.default_rng()
    ref = np.ones(27, dtype=bool)
    cand = _lose(ref, 20, rng)
    rule = FloorRule(floors=(0.99,), decision="ci_lower", n_resamples=500, allow_underpowered=True)
    result = evaluate_floor(ref, cand, rule, rng, label="t L")
    assert result.checks[0].ci_high < 0.99
    assert _decide(ref, cand, rule)[0] is Status.FAILED


def test_a_straddling_ci_decided_on_the_point_estimate_fails_as_before() -> None:
    rng = np.random.default_rng()
    ref = np.ones(27, dtype=bool)
    cand = _lose(ref, 1, rng)
    rule = FloorRule(floors=(0.99,), decision="point", n_resamples=500, allow_underpowered=True)
    result = evaluate_floor(ref, cand, rule, rng, label="t L")
    assert result.checks[0].decided_outcome == "fail"
    assert _decide(ref, cand, rule)[0] is Status.FAILED
