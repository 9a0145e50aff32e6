"""The perf gate's per-cell decision on synthetic samples: a clear win passes, a clear loss fails, overlapping
noise is inconclusive, and --strict turns inconclusive into a failure."""

from __future__ import annotations

import numpy as np
import pytest

from qualify.perf.compare import CellKey, Side, compare_cell, outcome_of
from qualify.perf.metrics import metric
from qualify.stats.ratio import Decision

TOK = metric("decode_tokens_per_s")
TTFT = metric("ttft_proxy_ms")


def side(name: str, centre: float, noise: float, seed: int, n: int = 5) -> Side:
    rng = np.random.default_rng(seed)
    return Side(name=name, samples=list(centre * (1 + noise * rng.standard_normal(n))), bytes_moved=10)


def cmp(key_metric, cand: Side, base: Side, threshold: float = 1.0, strict: bool = False):  # type: ignore[no-untyped-def]
    return compare_cell(
        CellKey(key_metric, 16, 128), cand, base, threshold, confidence=0.95, n_resamples=2000, seed=0, strict=strict
    )


def test_clear_throughput_win_passes_and_is_decided_on_the_ci_low_end() -> None:
    c = cmp(TOK, side("cand", 150, 0.01, 1), side("base", 100, 0.01, 2))
    assert c.check.outcome == "pass" and c.check.passed
    assert c.check.decided_on == c.check.ci_low and c.check.ci_low > 1.0
    assert c.measurements["decision"] == "pass" and c.measurements["direction"] == "higher"
    assert c.check.operator == ">="


def test_clear_throughput_loss_fails() -> None:
    c = cmp(TOK, side("cand", 70, 0.01, 1), side("base", 100, 0.01, 2))
    assert c.check.outcome == "fail" and not c.check.passed
    assert c.check.ci_high < 1.0


def test_latency_is_decided_on_the_ci_high_end() -> None:
    faster = cmp(TTFT, side("cand", 7, 0.01, 1), side("base", 10, 0.01, 2))
    slower = cmp(TTFT, side("cand", 13, 0.01, 1), side("base", 10, 0.01, 2))
    assert faster.check.outcome == "pass" and faster.check.decided_on == faster.check.ci_high
    assert faster.check.operator == "<="
    assert slower.check.outcome == "fail"


def test_overlapping_noise_is_inconclusive_and_does_not_pass() -> None:
    outcomes = [cmp(TOK, side("cand", 100, 0.08, s), side("base", 100, 0.08, 1000 + s)).check for s in range(20)]
    inconclusive = [c for c in outcomes if c.outcome == "inconclusive"]
    assert len(inconclusive) >= 15
    assert not any(c.passed for c in inconclusive)


def test_strict_turns_inconclusive_into_fail_but_keeps_the_decision_visible() -> None:
    for s in range(20):
        c = cmp(TOK, side("cand", 100, 0.08, s), side("base", 100, 0.08, 1000 + s), strict=True)
        if c.measurements["decision"] == "inconclusive":
            assert c.check.outcome == "fail" and c.measurements["outcome"] == "fail"
            return
    pytest.fail("no inconclusive case among 20 noisy pairs")


def test_outcome_mapping() -> None:
    assert outcome_of(Decision.INCONCLUSIVE, strict=False) == "inconclusive"
    assert outcome_of(Decision.INCONCLUSIVE, strict=True) == "fail"
    assert outcome_of(Decision.PASS, strict=True) == "pass"


def test_tolerance_threshold_accepts_a_small_regression_only_when_shown_within_it() -> None:
    # 1 % slower with 0.2 % noise: inside a 3 % tolerance (passes), outside a 0 % one (fails).
    cand, base = side("now", 99, 0.002, 1, n=9), side("then", 100, 0.002, 2, n=9)
    assert cmp(TOK, cand, base, threshold=0.97).check.outcome == "pass"
    assert cmp(TOK, cand, base, threshold=1.0).check.outcome == "fail"


def test_measurements_have_the_documented_schema() -> None:
    m = cmp(TOK, side("cand", 150, 0.01, 1), side("base", 100, 0.01, 2)).measurements
    for key in ("metric", "batch", "candidate", "baseline", "ratio", "ci_low", "ci_high", "threshold", "direction",
                "outcome", "candidate_samples", "baseline_samples", "candidate_median", "baseline_median", "unit",
                "bytes_moved", "pct_peak_bw", "clocks", "ncu"):  # fmt: skip
        assert key in m, key
    assert m["candidate_median"] == pytest.approx(float(np.median(m["candidate_samples"])))
