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


def side(name: str, centre: float, noise: float, seed: int, n: int = 5, processes: int = 3, drift: float = 0.0) -> Side:
    """`processes` groups of `n` repetitions; each process's centre is off by `drift` (relative, normal)."""
    rng = np.random.default_rng(seed)
    groups = [
        list(centre * (1 + drift * rng.standard_normal()) * (1 + noise * rng.standard_normal(n)))
        for _ in range(processes)
    ]
    return Side(name=name, groups=groups, bytes_moved=10)


def cmp(key_metric, cand: Side, base: Side, threshold: float = 1.0, strict: bool = False, **kw):  # type: ignore[no-untyped-def]
    return compare_cell(
        CellKey(key_metric, 16, 128), cand, base, threshold, confidence=0.95, n_resamples=2000, seed=0, strict=strict,
        **kw,
    )  # fmt: skip


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
    for key in ("metric", "batch", "candidate", "baseline", "ratio", "ci_low", "ci_high", "direction",
                "outcome", "ci_method", "ci_method_requested", "ci_df", "ci_fallback", "ci_description",
                "candidate_samples", "baseline_samples", "candidate_median", "baseline_median", "unit", "bytes_moved",
                "pct_peak_bw", "clocks", "ncu"):  # fmt: skip
        assert key in m, key
    assert "threshold" not in m  # stated once, by the check
    assert m["candidate_median"] == pytest.approx(float(np.median(m["candidate_samples"])))
    assert m["processes"] == {"candidate": 3, "baseline": 3}
    assert len(m["candidate_process_samples"]) == 3 and len(m["candidate_samples"]) == 15
    assert m["candidate_samples"] == [x for g in m["candidate_process_samples"] for x in g]


def test_the_statistic_names_the_process_t_interval_and_its_df_and_n_counts_processes() -> None:
    c = cmp(TOK, side("cand", 150, 0.01, 1, n=5, processes=3), side("base", 100, 0.01, 2, n=5, processes=3))
    m = c.measurements
    assert m["ci_method"] == m["ci_method_requested"] == "process-t" and m["ci_fallback"] is None
    assert 2.0 <= m["ci_df"] <= 4.0  # Welch-Satterthwaite with 3 processes per side: between 2 and 4
    assert f"process-level Welch t interval (df {m['ci_df']:.3g}) on the log medians of 3 processes x 5 " in (
        c.check.statistic
    )
    assert "repetitions per side" in c.check.statistic and c.check.n == 3
    # Centred on the log of the pooled medians' ratio.
    assert np.log(c.check.ci_low) + np.log(c.check.ci_high) == pytest.approx(2 * np.log(m["ratio"]))  # type: ignore[arg-type]
    uneven = cmp(TOK, side("cand", 150, 0.01, 1, n=5, processes=4), side("base", 100, 0.01, 2, n=7, processes=3))
    assert "4 processes x 5 repetitions (cand) and 3 processes x 7 repetitions (base)" in uneven.check.statistic
    assert uneven.check.n == 3


def test_the_two_level_bootstrap_stays_selectable() -> None:
    c = cmp(TOK, side("cand", 150, 0.01, 1), side("base", 100, 0.01, 2), ci_method="two-level-bootstrap")
    assert "percentile two-level bootstrap over 3 processes x 5 repetitions per side" in c.check.statistic
    m = c.measurements
    assert (m["ci_method"], m["ci_method_requested"], m["ci_df"]) == (
        "two-level-bootstrap",
        "two-level-bootstrap",
        None,
    )
    assert c.check.n == 3 and c.check.outcome == "pass"
    with pytest.raises(ValueError, match="unknown ci_method 'bca'"):
        cmp(TOK, side("cand", 150, 0.01, 1), side("base", 100, 0.01, 2), ci_method="bca")


def test_a_single_process_side_falls_back_to_the_bootstrap_and_says_so() -> None:
    one = cmp(TOK, side("cand", 150, 0.01, 1), side("release:cand", 100, 0.01, 2, processes=1))
    assert "two-level bootstrap over 3 processes x 5 repetitions (cand)" in one.check.statistic
    assert "and 1 process x 5 repetitions (release:cand)" in one.check.statistic
    assert "release:cand has one process, so its process-to-process variation is not in this CI" in one.check.statistic
    assert "process-t not used: the baseline has one process" in one.check.statistic
    assert one.measurements["ci_method"] == "two-level-bootstrap" and one.measurements["ci_df"] is None
    assert (
        one.measurements["ci_fallback"] == "the baseline has one process, so its process-to-process variance is unknown"
    )
    flat = cmp(TOK, side("cand", 150, 0.01, 1, processes=1), side("base", 100, 0.01, 2, processes=1))
    assert "flat bootstrap over the repetitions of one process per side" in flat.check.statistic
    assert "not in this CI" in flat.check.statistic and flat.check.n == 5
    assert "process-t not used: one process per side" in flat.check.statistic
    assert flat.measurements["processes"] == {"candidate": 1, "baseline": 1}
    assert (
        flat.measurements["ci_method"] == "flat-bootstrap" and flat.measurements["ci_method_requested"] == "process-t"
    )
    # Asked for explicitly, the two-level bootstrap on one process per side is the flat one, with no fallback note.
    asked = cmp(
        TOK, side("c", 150, 0.01, 1, processes=1), side("b", 100, 0.01, 2, processes=1), ci_method="two-level-bootstrap"
    )
    assert asked.measurements["ci_method"] == "flat-bootstrap" and "process-t not used" not in asked.check.statistic


def test_identical_process_medians_fall_back_to_the_two_level_bootstrap() -> None:
    # Every process of each side has the same repetitions: zero variance between process medians on both sides.
    cand = Side(name="cand", groups=[[149.0, 150.0, 152.0, 151.0, 148.0]] * 3)
    base = Side(name="base", groups=[[99.0, 100.0, 101.0, 102.0, 98.0]] * 3)
    c = cmp(TOK, cand, base)
    assert c.measurements["ci_method"] == "two-level-bootstrap" and c.measurements["ci_df"] is None
    assert "process-t not used: every process median is the same on both sides" in c.check.statistic
    assert c.check.ci_low < c.measurements["ratio"] < c.check.ci_high  # type: ignore[operator]
    assert c.check.outcome == "pass"


@pytest.mark.parametrize("ci_method", ["process-t", "two-level-bootstrap"])
def test_process_drift_widens_the_ci_where_repetitions_alone_would_not(ci_method: str) -> None:
    # 2 % between processes, 0.1 % within: the CI must reach beyond one process's spread.
    drifting = [cmp(TOK, side("c", 100, 0.001, s, drift=0.02), side("b", 100, 0.001, 500 + s, drift=0.02),
                    ci_method=ci_method) for s in range(20)]  # fmt: skip
    within_one = [cmp(TOK, side("c", 100, 0.001, s, processes=1), side("b", 100, 0.001, 500 + s, processes=1))
                  for s in range(20)]  # fmt: skip
    width = [c.check.ci_high - c.check.ci_low for c in drifting]  # type: ignore[operator]
    narrow = [c.check.ci_high - c.check.ci_low for c in within_one]  # type: ignore[operator]
    assert float(np.median(width)) > 5 * float(np.median(narrow))
