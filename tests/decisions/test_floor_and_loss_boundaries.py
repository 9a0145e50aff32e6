"""The accuracy floor and the loss gate decided at the right number: point estimate or the CI's unfavourable end."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from qualify.accuracy.floor import FloorRule, evaluate_floor
from qualify.kinds.loss_increase.params import LossIncreaseParams
from qualify.kinds.loss_increase.runner import _check, _control_check
from qualify.loss.evaluate import LayoutResult
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import Layout

# --- accuracy floor ---


def outcomes(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """400 paired items: reference 80 % right, the candidate loses 20 of them (ratio 300/320 = 0.9375)."""
    ref = np.zeros(400, dtype=bool)
    ref[:320] = True
    cand = ref.copy()
    cand[:20] = False
    order = rng.permutation(400)
    return ref[order], cand[order]


@pytest.fixture
def data(test_seed: int) -> tuple[np.ndarray, np.ndarray]:
    return outcomes(np.random.default_rng(test_seed))


def _floor(data: tuple[np.ndarray, np.ndarray], floors: tuple[float, ...], decision: str):
    ref, cand = data
    rule = FloorRule(floors=floors, decision=decision, n_resamples=1000)  # type: ignore[arg-type]
    return evaluate_floor(ref, cand, rule, np.random.default_rng(11), label="t")


def test_ci_lower_decides_on_the_ci_lower_end(data: tuple[np.ndarray, np.ndarray]) -> None:
    probe = _floor(data, (0.5,), "ci_lower").checks[0]
    assert probe.observed == pytest.approx(300 / 320)
    assert probe.ci_low < probe.observed < probe.ci_high
    assert probe.decided_on == probe.ci_low
    # A floor between the CI's lower end and the estimate: the point passes, ci_lower must fail.
    straddle = (probe.ci_low + probe.observed) / 2
    ci_lower = _floor(data, (straddle,), "ci_lower")
    point = _floor(data, (straddle,), "point")
    assert not ci_lower.checks[0].passed
    assert point.checks[0].passed
    assert ci_lower.measurements["decided_on"] == ci_lower.checks[0].ci_low
    assert point.measurements["decided_on"] == point.checks[0].observed


def test_floor_exactly_at_the_decided_value_passes(data: tuple[np.ndarray, np.ndarray]) -> None:
    probe = _floor(data, (0.5,), "ci_lower").checks[0]
    at = _floor(data, (probe.ci_low, float(np.nextafter(probe.ci_low, 2.0))), "ci_lower")
    assert [c.passed for c in at.checks] == [True, False]
    exact = _floor(data, (300 / 320, float(np.nextafter(300 / 320, 2.0))), "point")
    assert [c.passed for c in exact.checks] == [True, False]


def test_floor_above_the_estimate_fails_both_ways_and_below_the_ci_passes_both(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    probe = _floor(data, (0.5,), "ci_lower").checks[0]
    for decision in ("point", "ci_lower"):
        hi = _floor(data, ((probe.observed + probe.ci_high) / 2,), decision)
        lo = _floor(data, (probe.ci_low * 0.99,), decision)
        assert not hi.checks[0].passed
        assert lo.checks[0].passed


def test_every_floor_is_decided_separately(data: tuple[np.ndarray, np.ndarray]) -> None:
    probe = _floor(data, (0.5,), "ci_lower").checks[0]
    floors = (0.5, probe.ci_low * 0.999, (probe.ci_low + probe.observed) / 2, 0.99)
    res = _floor(data, floors, "ci_lower")
    assert [c.passed for c in res.checks] == [True, True, False, False]
    assert [c.threshold for c in res.checks] == list(floors)


# --- loss gate ---


def _params(decide_on: str) -> LossIncreaseParams:
    return LossIncreaseParams(
        workload="w",
        checkpoint="c",
        max_rel_increase={"K16/V8": 0.02},
        positive_control={"layout": "K8/V8", "minimum": 0.05},
        decide_on=decide_on,
    )


def _layout(rel: float, low: float, high: float, layout: Layout = Layout.K16_V8) -> LayoutResult:
    return LayoutResult(
        layout=layout,
        loss=1.0 + rel,
        rel_increase=rel,
        ci_low=low,
        ci_high=high,
        kl_mean=0.0,
        top1_agreement=1.0,
        n_items=50,
        n_tokens=500,
        saturated_k=0,
        saturated_v=0,
        scaling=Scaling.NONE,
    )


@pytest.mark.parametrize(
    ("rel", "low", "high", "bound", "ci_passes", "point_passes"),
    [
        (0.010, 0.000, 0.030, 0.020, False, True),  # point passes, the CI's high end does not
        (0.010, 0.000, 0.030, 0.005, False, False),  # only the low end would clear: must not pass
        (0.010, 0.000, 0.030, 0.030, True, True),  # high end exactly on the bound
        (0.010, 0.000, 0.030, 0.010, False, True),  # point exactly on the bound
        (0.010, 0.000, 0.030, 0.031, True, True),
        (0.025, 0.015, 0.035, 0.020, False, False),  # point fails, low end would pass
    ],
)
def test_loss_bound_decided_on_the_high_end(
    rel: float, low: float, high: float, bound: float, ci_passes: bool, point_passes: bool
) -> None:
    r = _layout(rel, low, high)
    on_ci = _check(r, bound, _params("ci"), 50)
    on_point = _check(r, bound, _params("point"), 50)
    assert on_ci.decided_on == high and on_ci.passed is ci_passes
    assert on_point.decided_on == rel and on_point.passed is point_passes
    assert on_ci.operator == on_point.operator == "<="


@pytest.mark.parametrize(
    ("rel", "low", "high", "minimum", "ci_passes", "point_passes"),
    [
        (0.10, 0.04, 0.16, 0.05, False, True),  # point shows damage, the CI's low end does not
        (0.10, 0.04, 0.16, 0.12, False, False),  # only the high end would clear: must not pass
        (0.10, 0.05, 0.16, 0.05, True, True),  # low end exactly on the minimum
        (0.10, 0.06, 0.16, 0.05, True, True),
    ],
)
def test_positive_control_decided_on_the_low_end(
    rel: float, low: float, high: float, minimum: float, ci_passes: bool, point_passes: bool
) -> None:
    r = _layout(rel, low, high, Layout.K8_V8)
    cmp = SimpleNamespace(layouts=[_layout(0.0, 0.0, 0.0), r], reference=SimpleNamespace(n_items=50))
    for decide_on, passes, decided in (("ci", ci_passes, low), ("point", point_passes, rel)):
        p = _params(decide_on)
        p = p.model_copy(update={"positive_control": p.positive_control.model_copy(update={"minimum": minimum})})
        check = _control_check(cmp, p, seed=0)  # type: ignore[arg-type]
        assert check.decided_on == decided and check.passed is passes
