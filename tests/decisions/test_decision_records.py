"""What a decision records beside its outcome: the threshold, the CI it used, n, unit, the statistic's words and
the measurement keys a report and its renderers read. Written to kill mutmut survivors (see
results/2026-12-01-mutation-cpu/README.md)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from qualify.accuracy.floor import FloorRule, evaluate_floor
from qualify.kinds.loss_increase.measurements import bound_check_name
from qualify.kinds.loss_increase.params import LossIncreaseParams
from qualify.kinds.loss_increase.runner import _check, _control_check
from qualify.loss.evaluate import LayoutResult
from qualify.perf.compare import TABLE_COLUMNS, CellKey, Side, compare_cell
from qualify.perf.metrics import metric
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import Layout
from qualify.stats.paired import score_ratio_ci


def _layout(layout: Layout, rel: float, low: float, high: float) -> LayoutResult:
    return LayoutResult(layout, 1.0 + rel, rel, low, high, 0.0, 1.0, 50, 500, 0, 0, Scaling.NONE)


def _params(confidence: float = 0.9) -> LossIncreaseParams:
    return LossIncreaseParams(
        workload="w",
        checkpoint="c",
        max_rel_increase={"K16/V8": 0.02},
        positive_control={"layout": "K8/V8", "minimum": 0.05},
        confidence=confidence,
    )


def test_loss_bound_check_records_its_ci_and_statistic() -> None:
    c = _check(_layout(Layout.K16_V8, 0.01, 0.002, 0.03), 0.02, _params(0.9), 50)
    assert c.name == bound_check_name("K16/V8")
    assert (c.observed, c.threshold, c.n, c.ci_low, c.ci_high, c.unit) == (0.01, 0.02, 50, 0.002, 0.03, "fraction")
    assert "paired bootstrap 90% CI" in c.statistic


def test_positive_control_check_records_its_ci_and_statistic() -> None:
    r = _layout(Layout.K8_V8, 0.1, 0.06, 0.16)
    cmp = SimpleNamespace(layouts=[_layout(Layout.K16_V8, 0.0, 0.0, 0.0), r], reference=SimpleNamespace(n_items=50))
    c = _control_check(cmp, _params(0.9), seed=0)  # type: ignore[arg-type]
    assert c.name == "positive control: K8/V8 must show key damage (rel_increase)"
    assert (c.observed, c.threshold, c.n, c.ci_low, c.ci_high, c.unit) == (0.1, 0.05, 50, 0.06, 0.16, "fraction")
    assert c.statistic == (
        "relative eval-loss increase; paired bootstrap 90% CI over sequences; if it does not fire the measurement "
        "is blind"
    )


# --- perf cell ---


@pytest.fixture
def rng(test_seed: int) -> np.random.Generator:
    return np.random.default_rng(test_seed)


def _groups(rng: np.random.Generator, centres: list[float]) -> list[list[float]]:
    return [list(c * (1 + 0.002 * rng.standard_normal(5))) for c in centres]


def test_perf_cell_records_threshold_table_and_measurements(rng: np.random.Generator) -> None:
    cand = Side("cand", _groups(rng, [90.0, 93.0, 88.0]), bytes_moved=1, pct_peak_bw=2.0, clocks=[3], method="ev")
    base = Side("base", _groups(rng, [100.0, 101.0, 99.0]), bytes_moved=4, pct_peak_bw=5.0, clocks=[6], method="ws")
    out = compare_cell(
        CellKey(metric("ttft_proxy_ms"), 4, 256), cand, base, 0.97, confidence=0.9, n_resamples=300, seed=1,
        strict=False,
    )  # fmt: skip
    c, m = out.check, out.measurements
    assert (c.name, c.threshold, c.unit, c.n) == ("ttft_proxy_ms ratio b4 s256", 0.97, "x", 3)
    assert c.to_dict()["threshold"] == 0.97
    assert m["confidence"] == 0.9 and m["suffix"] == 256 and m["batch"] == 4
    assert m["bytes_moved"] == {"candidate": 1, "baseline": 4}
    assert m["pct_peak_bw"] == {"candidate": 2.0, "baseline": 5.0}
    assert m["clocks"] == {"candidate": [3], "baseline": [6]}
    assert m["timing_method"] == {"candidate": "ev", "baseline": "ws"}
    assert m["baseline_process_samples"] == base.groups and m["candidate_process_samples"] == cand.groups
    assert out.table.title == "perf: candidate vs baseline"
    assert out.table.columns == TABLE_COLUMNS and "threshold" not in TABLE_COLUMNS
    assert "threshold" not in m  # the check states the bound, once
    assert len(out.table.rows) == 1 and out.table.rows[0][:5] == ["ttft_proxy_ms", 4, 256, "cand", "base"]
    assert out.table.rows[0][-2:] == [m["decision"], m["outcome"]]


@pytest.mark.parametrize("method", ["process-t", "two-level-bootstrap"])
def test_perf_cell_ci_uses_the_requested_confidence(rng: np.random.Generator, method: str) -> None:
    cand, base = Side("c", _groups(rng, [90.0, 95.0, 88.0])), Side("b", _groups(rng, [100.0, 104.0, 97.0]))
    key = CellKey(metric("ttft_proxy_ms"), 1, 1)

    def width(conf: float) -> float:
        ck = compare_cell(
            key, cand, base, 1.0, confidence=conf, n_resamples=500, seed=3, strict=False, ci_method=method
        ).check
        return ck.ci_high - ck.ci_low

    assert width(0.6) < width(0.99)


def test_one_process_against_several_uses_the_two_level_bootstrap(rng: np.random.Generator) -> None:
    one, many = Side("c", _groups(rng, [90.0])), Side("b", _groups(rng, [100.0, 104.0, 97.0]))
    out = compare_cell(
        CellKey(metric("ttft_proxy_ms"), 1, 1), one, many, 1.0, confidence=0.95, n_resamples=300, seed=3,
        strict=False, ci_method="two-level-bootstrap",
    )  # fmt: skip
    assert out.measurements["ci_method"] == "two-level-bootstrap"


# --- accuracy floor ---


def _data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    ref = np.zeros(200, dtype=bool)
    ref[:160] = True
    cand = ref.copy()
    cand[:12] = False
    order = rng.permutation(200)
    return ref[order], cand[order]


def test_floor_ci_follows_alpha(rng: np.random.Generator) -> None:
    ref, cand = _data(rng)

    def width(alpha: float) -> float:
        res = evaluate_floor(ref, cand, FloorRule((0.9,), "ci_lower", alpha=alpha), np.random.default_rng(1), label="t")
        return res.checks[0].ci_high - res.checks[0].ci_low

    assert width(0.2) < width(0.01)


@pytest.mark.parametrize(("decision", "words"), [("point", "point estimate"), ("ci_lower", "CI's lower end")])
def test_floor_records_its_check_and_measurements(rng: np.random.Generator, decision: str, words: str) -> None:
    ref, cand = _data(rng)
    rule = FloorRule((0.9,), decision, alpha=0.05, n_resamples=500)  # type: ignore[arg-type]
    res = evaluate_floor(ref, cand, rule, np.random.default_rng(1), label="mmlu K8/V8")
    c, m = res.checks[0], res.measurements
    assert c.name == "mmlu K8/V8 keeps 0.9 of reference"
    assert (c.n, c.unit, c.threshold) == (200, "ratio", 0.9)
    assert f"90 % CI, 500 resamples; decided on the {words}" in c.statistic
    assert m["decision"] == decision and m["n"] == 200
    assert m["reference_score"] == 0.8 and m["score"] == 0.74
    assert m["delta_points"] == pytest.approx(-6.0)
    assert (m["ratio_ci_low"], m["ratio_ci_high"]) == (c.ci_low, c.ci_high)
    assert m["ratio_ci_confidence"] == pytest.approx(0.9) and m["n_resamples"] == 500
    assert m["discordant"] == {"ref_only": 12, "cand_only": 0}
    assert m["mcnemar_p"] == pytest.approx(2 * 0.5**12)
    assert m["paired_table"]["ref_only"] == 12 and m["discordance_rate"] == pytest.approx(0.06)
    assert set(m["power"]) == {"alpha", "beta", "assumed_discordance", "discordance_assumed", "min_resolvable_drop"}
    assert m["power"]["alpha"] == 0.05 and m["power"]["beta"] == 0.2
    assert m["min_resolvable_drop"] == m["power"]["min_resolvable_drop"]
    assert m["floors"][0]["check"] == c.name
    assert set(m["floors"][0]) == {"check", "allowed_drop", "underpowered", "power_statement"}
    assert m["underpowered"] is res.underpowered
    assert m["smoke"] is False and m["ratio_defined"] is True
    assert len(res.powers) == 1 and res.notes is not None


def test_floor_smoke_needs_both_underpowered_and_allowed(rng: np.random.Generator) -> None:
    ref, cand = _data(rng)
    fine = evaluate_floor(
        ref, cand, FloorRule((0.5,), "point", allow_underpowered=True), np.random.default_rng(1), label="t"
    )
    assert not fine.underpowered and fine.measurements["smoke"] is False
    tight = FloorRule((0.999,), "point", allow_underpowered=True)
    smoke = evaluate_floor(ref, cand, tight, np.random.default_rng(1), label="t")
    assert smoke.underpowered and smoke.measurements["smoke"] is True
    assert smoke.notes[0].endswith("; this is a smoke test, not a certification")
    assert [s for s in smoke.shortfalls if s.kind == "underpowered"]


# --- paired score-ratio CI argument guards ---


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5])
def test_score_ratio_ci_rejects_confidence_outside_the_open_interval(confidence: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        score_ratio_ci([1, 0], [1, 1], np.random.default_rng(0), 100, confidence)


def test_score_ratio_ci_single_item_is_allowed_and_records_its_settings() -> None:
    ci = score_ratio_ci([1], [1], np.random.default_rng(0), 100, 0.8)
    assert (ci.estimate, ci.low, ci.high, ci.confidence, ci.n_resamples) == (1.0, 1.0, 1.0, 0.8, 100)


def test_score_ratio_ci_ends_are_the_two_sided_quantiles() -> None:
    from qualify.stats.bootstrap import bootstrap_indices

    ref = np.array([1] * 80 + [0] * 20, dtype=bool)
    cand = ref.copy()
    cand[:9] = False
    ci = score_ratio_ci(ref, cand, np.random.default_rng(5), 1000, 0.9)
    idx = bootstrap_indices(100, np.random.default_rng(5), 1000)
    ratios = cand[idx].sum(axis=1) / ref[idx].sum(axis=1)
    assert (ci.low, ci.high) == tuple(np.quantile(ratios, [0.05, 0.95]))


def test_median_ratio_ci_ends_are_the_two_sided_quantiles() -> None:
    from qualify.stats.ratio import median_ratio_ci

    c, b = np.array([9.0, 10.0, 11.0, 10.5]), np.array([10.0, 12.0, 11.0, 9.5])
    ci = median_ratio_ci(c, b, confidence=0.8, n_resamples=500, seed=2)
    rng = np.random.default_rng(2)
    cm = np.median(c[rng.integers(0, 4, (500, 4))], axis=1)
    bm = np.median(b[rng.integers(0, 4, (500, 4))], axis=1)
    assert (ci.low, ci.high) == tuple(np.quantile(cm / bm, [0.1, 0.9]))
    assert (ci.confidence, ci.n_resamples) == (0.8, 500)
