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
