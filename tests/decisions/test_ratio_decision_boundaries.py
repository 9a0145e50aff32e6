"""The perf decision at its edges: each direction, each CI end, pass/fail/inconclusive, and symmetry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qualify.perf.compare import CellKey, Side, compare_cell, outcome_of
from qualify.perf.metrics import metric
from qualify.stats.ratio import (
    Decision,
    Direction,
    RatioCI,
    decide,
    process_t_median_ratio_ci,
)

H, L = Direction.HIGHER_IS_BETTER, Direction.LOWER_IS_BETTER


def ci(low: float, ratio: float, high: float) -> RatioCI:
    return RatioCI(ratio=ratio, low=low, high=high, confidence=0.95, n_candidate=5, n_baseline=5, n_resamples=0)


@pytest.mark.parametrize(
    ("interval", "threshold", "direction", "expected"),
    [
        # higher is better (throughput): the low end must clear, the high end missing fails
        (ci(1.01, 1.05, 1.10), 1.0, H, Decision.PASS),
        (ci(1.00, 1.05, 1.10), 1.0, H, Decision.PASS),  # low end exactly on the threshold
        (ci(0.99, 1.05, 1.10), 1.0, H, Decision.INCONCLUSIVE),  # point passes, worst end fails
        (ci(0.90, 0.95, 1.01), 1.0, H, Decision.INCONCLUSIVE),  # point fails, best end clears
        (ci(0.90, 0.95, 1.00), 1.0, H, Decision.INCONCLUSIVE),  # best end exactly on the threshold
        (ci(0.90, 0.95, 0.99), 1.0, H, Decision.FAIL),
        # lower is better (latency, TTFT): the high end must clear, the low end missing fails
        (ci(0.90, 0.95, 0.99), 1.0, L, Decision.PASS),
        (ci(0.90, 0.95, 1.00), 1.0, L, Decision.PASS),  # high end exactly on the threshold
        (ci(0.90, 0.95, 1.01), 1.0, L, Decision.INCONCLUSIVE),  # point passes, worst end fails
        (ci(0.99, 1.05, 1.10), 1.0, L, Decision.INCONCLUSIVE),  # point fails, best end clears
        (ci(1.00, 1.05, 1.10), 1.0, L, Decision.INCONCLUSIVE),  # best end exactly on the threshold
        (ci(1.01, 1.05, 1.10), 1.0, L, Decision.FAIL),
    ],
)
def test_decide_table(interval: RatioCI, threshold: float, direction: Direction, expected: Decision) -> None:
    assert decide(interval, threshold, direction) is expected


def test_lower_is_better_uses_the_high_end_not_the_low_end() -> None:
    # A narrow-at-the-bottom CI: the low end clears a 1.0 ceiling, the high end does not.
    assert decide(ci(0.80, 0.98, 1.20), 1.0, L) is Decision.INCONCLUSIVE
    # The low end misses a 0.9 ceiling, the high end also: fail, never pass.
    assert decide(ci(0.95, 1.00, 1.05), 0.9, L) is Decision.FAIL
    assert decide(ci(0.95, 1.00, 1.05), 1.05, L) is Decision.PASS


finite = st.floats(0.2, 5.0, allow_nan=False)


@given(finite, finite, finite, finite)
def test_decide_is_symmetric_under_inversion(a: float, b: float, c: float, t: float) -> None:
    """Swapping candidate and baseline inverts the ratio (and flips the CI's ends): with the threshold inverted
    and the direction flipped the decision is the same."""
    low, mid, high = sorted((a, b, c))
    # Stay off exact float ties after inversion.
    assume(all(abs(x - t) > 1e-9 * t for x in (low, high)))
    for d, flipped in ((H, L), (L, H)):
        assert decide(ci(low, mid, high), t, d) is decide(ci(1 / high, 1 / mid, 1 / low), 1 / t, flipped)


@given(finite, finite, finite, finite)
def test_decide_outcomes_are_consistent_with_the_ci(a: float, b: float, c: float, t: float) -> None:
    low, mid, high = sorted((a, b, c))
    up = decide(ci(low, mid, high), t, H)
    assert (up is Decision.PASS) == (low >= t)
    assert (up is Decision.FAIL) == (high < t)
    down = decide(ci(low, mid, high), t, L)
    assert (down is Decision.PASS) == (high <= t)
    assert (down is Decision.FAIL) == (low > t)


process = st.lists(st.floats(50.0, 200.0, allow_nan=False), min_size=2, max_size=5)


@settings(max_examples=40, deadline=None)
@given(st.lists(process, min_size=2, max_size=4), st.lists(process, min_size=2, max_size=4), finite)
def test_process_t_swap_gives_inverse_ci_and_same_decision(
    cand: list[list[float]], base: list[list[float]], t: float
) -> None:
    fwd = process_t_median_ratio_ci(cand, base)
    rev = process_t_median_ratio_ci(base, cand)
    assume(fwd.method == "process-t" and rev.method == "process-t")
    assert rev.ratio == pytest.approx(1 / fwd.ratio, rel=1e-9)
    assert rev.low == pytest.approx(1 / fwd.high, rel=1e-9)
    assert rev.high == pytest.approx(1 / fwd.low, rel=1e-9)
    assume(all(abs(x - t) > 1e-6 * t for x in (fwd.low, fwd.high)))
    for d, flipped in ((H, L), (L, H)):
        assert decide(fwd, t, d) is decide(rev, 1 / t, flipped)


# --- compare_cell: the Check records the worst end for the metric's direction, and the outcome follows it ---

KW = {"confidence": 0.95, "n_resamples": 400, "ci_method": "process-t"}


def groups(rng: np.random.Generator, centres: list[float], noise: float = 0.002) -> list[list[float]]:
    return [list(c * (1 + noise * rng.standard_normal(5))) for c in centres]


@pytest.fixture
def rng(test_seed: int) -> np.random.Generator:
    return np.random.default_rng(test_seed)


def _cell(name: str, cand: list[list[float]], base: list[list[float]], threshold: float, strict: bool = False):
    return compare_cell(
        CellKey(metric(name), 1, 128), Side("cand", cand), Side("base", base), threshold, seed=7, strict=strict, **KW
    )


@pytest.mark.parametrize("name", ["ttft_proxy_ms", "ttft_p50_ms"])
def test_lower_is_better_cell_decides_on_the_high_end(rng: np.random.Generator, name: str) -> None:
    base = groups(rng, [100.0, 101.0, 99.0])
    cand = groups(rng, [90.0, 93.0, 88.0])  # faster, with process spread
    probe = _cell(name, cand, base, 1.0).check
    low, high = probe.ci_low, probe.ci_high
    assert low < probe.observed < high < 1.0
    assert probe.operator == "<=" and probe.decided_on == high
    # Threshold between the point estimate and the high end: the point passes, the CI's worst end does not.
    mid = (probe.observed + high) / 2
    straddle = _cell(name, cand, base, mid)
    assert straddle.measurements["decision"] == "inconclusive"
    assert straddle.check.outcome == "inconclusive" and not straddle.check.passed
    assert _cell(name, cand, base, mid, strict=True).check.outcome == "fail"
    # Threshold between the low end and the point: the best end clears, so not a fail either.
    assert _cell(name, cand, base, (low + probe.observed) / 2).measurements["decision"] == "inconclusive"
    # Above the high end: pass; below the low end: fail.
    assert _cell(name, cand, base, high * 1.001).check.outcome == "pass"
    assert _cell(name, cand, base, low * 0.999).check.outcome == "fail"


def test_higher_is_better_cell_decides_on_the_low_end(rng: np.random.Generator) -> None:
    base = groups(rng, [100.0, 101.0, 99.0])
    cand = groups(rng, [110.0, 113.0, 108.0])
    probe = _cell("decode_tokens_per_s", cand, base, 1.0).check
    low, high = probe.ci_low, probe.ci_high
    assert 1.0 < low < probe.observed < high
    assert probe.operator == ">=" and probe.decided_on == low
    assert _cell("decode_tokens_per_s", cand, base, (low + probe.observed) / 2).check.outcome == "inconclusive"
    assert _cell("decode_tokens_per_s", cand, base, (probe.observed + high) / 2).check.outcome == "inconclusive"
    assert _cell("decode_tokens_per_s", cand, base, low * 0.999).check.outcome == "pass"
    assert _cell("decode_tokens_per_s", cand, base, high * 1.001).check.outcome == "fail"


def test_swapping_sides_of_a_cell_mirrors_the_decision(rng: np.random.Generator) -> None:
    a, b = groups(rng, [90.0, 93.0, 88.0]), groups(rng, [100.0, 101.0, 99.0])
    for t in (0.9, 0.93, 0.95, 1.0):
        fwd = _cell("ttft_proxy_ms", a, b, t).measurements["decision"]
        rev = _cell("decode_tokens_per_s", b, a, 1 / t).measurements["decision"]
        assert fwd == rev


@pytest.mark.parametrize(
    ("decision", "strict", "outcome"),
    [
        (Decision.PASS, False, "pass"),
        (Decision.PASS, True, "pass"),
        (Decision.FAIL, False, "fail"),
        (Decision.FAIL, True, "fail"),
        (Decision.INCONCLUSIVE, False, "inconclusive"),
        (Decision.INCONCLUSIVE, True, "fail"),
    ],
)
def test_outcome_of(decision: Decision, strict: bool, outcome: str) -> None:
    assert outcome_of(decision, strict=strict) == outcome
