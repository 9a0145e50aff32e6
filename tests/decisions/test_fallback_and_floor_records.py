"""Fallback CIs honour confidence, n_resamples and seed; the floor records what it was asked to assume."""

from __future__ import annotations

import numpy as np
import pytest

from qualify.accuracy.floor import FloorRule, evaluate_floor
from qualify.perf.compare import CellKey, Side, _ratio_ci, compare_cell
from qualify.perf.metrics import metric
from qualify.stats.power import power_statement
from qualify.stats.ratio import (
    _two_level_medians,
    median_ratio_ci,
    process_t_median_ratio_ci,
    two_level_median_ratio_ci,
)


def _groups(centres: list[float], seed: int = 7) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(c * (1 + 0.01 * rng.standard_normal(6))) for c in centres]


ONE_EACH = (_groups([90.0]), _groups([100.0], seed=8))
ONE_VS_MANY = (_groups([90.0]), _groups([100.0, 104.0, 97.0], seed=8))
SAME_MEDIANS = ([[1.0, 2.0, 3.0], [0.5, 2.0, 9.0]], [[1.5, 2.5, 3.5], [2.0, 2.5, 2.6]])


def _ci(case, **kw):
    return process_t_median_ratio_ci(*case, **{"confidence": 0.95, "n_resamples": 800, "seed": 0, **kw})


@pytest.mark.parametrize("case", [ONE_EACH, ONE_VS_MANY, SAME_MEDIANS], ids=["flat", "two-level", "same-medians"])
def test_fallback_honours_confidence_resamples_and_seed(case) -> None:
    wide, narrow = _ci(case, confidence=0.99), _ci(case, confidence=0.6)
    assert wide.fallback and narrow.fallback
    assert (wide.confidence, narrow.confidence) == (0.99, 0.6)
    assert narrow.high - narrow.low < wide.high - wide.low
    assert _ci(case, n_resamples=300).n_resamples == 300
    assert _ci(case, seed=5) == _ci(case, seed=5)
    assert _ci(case, seed=5) != _ci(case, seed=6)
    # The fallback is exactly the bootstrap it names, with every argument passed on.
    c, b = case
    direct = (median_ratio_ci(c[0], b[0], confidence=0.8, n_resamples=300, seed=4) if len(c) == len(b) == 1
              else two_level_median_ratio_ci(c, b, confidence=0.8, n_resamples=300, seed=4))  # fmt: skip
    got = _ci(case, confidence=0.8, n_resamples=300, seed=4)
    assert (got.low, got.high, got.n_resamples, got.confidence) == (direct.low, direct.high, 300, 0.8)


def test_process_t_records_its_confidence_and_no_resamples() -> None:
    ci = _ci((_groups([90.0, 93.0, 88.0]), _groups([100.0, 101.0, 99.0], seed=8)), confidence=0.9)
    assert ci.method == "process-t" and ci.fallback is None
    assert ci.confidence == 0.9 and ci.n_resamples == 0


def test_two_level_ci_records_and_uses_its_arguments() -> None:
    c = [np.asarray(g) for g in _groups([90.0, 93.0, 88.0])]
    b = [np.asarray(g) for g in _groups([100.0, 101.0], seed=8)]
    ci = two_level_median_ratio_ci(c, b, confidence=0.9, n_resamples=700, seed=2)
    assert (ci.confidence, ci.n_resamples, ci.n_baseline, ci.n_candidate) == (0.9, 700, 12, 18)
    rng = np.random.default_rng(2)
    ratios = _two_level_medians(c, 700, rng) / _two_level_medians(b, 700, rng)
    assert (ci.low, ci.high) == tuple(float(q) for q in np.quantile(ratios, [0.05, 0.95]))


def test_two_level_resample_takes_each_drawn_process_with_its_own_size() -> None:
    """Reference loop: a drawn process contributes exactly as many repetitions as it has."""
    groups = [np.array([1.0, 2.0]), np.array([10.0, 11.0, 12.0, 13.0, 14.0]), np.array([5.0, 6.0, 7.0])]
    n = 400
    got = _two_level_medians(groups, n, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    procs = rng.integers(0, 3, (n, 3))
    u = rng.random((n, 3, 5))
    for r in range(n):
        pooled = [
            groups[p][int(u[r, j, k] * groups[p].size)] for j, p in enumerate(procs[r]) for k in range(groups[p].size)
        ]
        assert got[r] == np.median(pooled)


def test_perf_cell_fallback_is_reproducible_and_seeded() -> None:
    cand, base = Side("c", ONE_VS_MANY[0]), Side("b", ONE_VS_MANY[1])

    def cell(seed: int):
        return compare_cell(
            CellKey(metric("ttft_proxy_ms"), 1, 1), cand, base, 1.0, confidence=0.95, n_resamples=400, seed=seed,
            strict=False,
        ).check  # fmt: skip

    assert (cell(1).ci_low, cell(1).ci_high) == (cell(1).ci_low, cell(1).ci_high)
    assert (cell(1).ci_low, cell(1).ci_high) != (cell(2).ci_low, cell(2).ci_high)


def test_flat_bootstrap_method_passes_confidence_resamples_and_seed() -> None:
    cand, base = Side("c", ONE_EACH[0]), Side("b", ONE_EACH[1])
    ci, _ = _ratio_ci(cand, base, method="two-level-bootstrap", confidence=0.8, n_resamples=300, seed=4)
    direct = median_ratio_ci(cand.samples, base.samples, confidence=0.8, n_resamples=300, seed=4)
    assert ci == direct


# --- accuracy floor ---


def _outcomes(n: int, ref_right: int, lost: int) -> tuple[np.ndarray, np.ndarray]:
    ref = np.zeros(n, dtype=bool)
    ref[:ref_right] = True
    cand = ref.copy()
    cand[:lost] = False
    return ref, cand


def test_declared_discordance_reaches_the_power_statement() -> None:
    ref, cand = _outcomes(300, 240, 6)
    rule = FloorRule(floors=(0.95, 0.99), decision="point", assumed_discordance=0.3, n_resamples=200)
    res = evaluate_floor(ref, cand, rule, np.random.default_rng(0), label="t")
    for p, floor in zip(res.powers, rule.floors, strict=True):
        assert p == power_statement(300, 0.05, 0.2, 0.8, floor, 0.3)
    assert res.measurements["power"]["assumed_discordance"] == 0.3
    assert res.measurements["power"]["discordance_assumed"] == "declared"


def test_underpowered_note_text_and_shortfall_detail() -> None:
    ref, cand = _outcomes(100, 80, 1)
    rule = FloorRule(floors=(0.99,), decision="point", n_resamples=200)
    res = evaluate_floor(ref, cand, rule, np.random.default_rng(0), label="t")
    (p,) = res.powers
    assert p.underpowered and p.allowed_drop > 0
    note = (
        f"underpowered: n=100 resolves only a {100 * p.min_resolvable_drop:.1f}-point drop at alpha 0.05, beta 0.2; "
        f"the finest floor (0.99) allows {100 * p.allowed_drop:.2f} points"
    )
    assert res.notes == [note]
    assert [(s.kind, s.detail) for s in res.shortfalls] == [("underpowered", note.removeprefix("underpowered: "))]
    assert res.measurements["ratio"] == res.checks[0].observed == 79 / 80
    smoke = evaluate_floor(ref, cand, FloorRule((0.99,), "point", n_resamples=200, allow_underpowered=True),
                           np.random.default_rng(0), label="t")  # fmt: skip
    assert smoke.notes == [note + "; this is a smoke test, not a certification"]


def test_floor_of_one_uses_the_no_drop_sentence() -> None:
    ref, cand = _outcomes(100, 80, 0)
    res = evaluate_floor(ref, cand, FloorRule((1.0,), "point", n_resamples=200), np.random.default_rng(0), label="t")
    assert res.notes == [res.powers[0].sentence()]
    assert "allows no drop" in res.notes[0]


def test_vacuous_shortfall_only_when_the_reference_scores_zero() -> None:
    rule = FloorRule(floors=(0.5,), decision="point", n_resamples=200)
    zero = evaluate_floor(np.zeros(50, bool), np.zeros(50, bool), rule, np.random.default_rng(0), label="t")
    assert "vacuous" in [s.kind for s in zero.shortfalls]
    ref, cand = _outcomes(2000, 1600, 0)
    fine = evaluate_floor(ref, cand, rule, np.random.default_rng(0), label="t")
    assert fine.shortfalls == []


@pytest.mark.parametrize(
    ("reference", "candidate", "message"),
    [
        ([1, 0, 2, 1], [1, 0, 1, 1], "reference outcomes must be 0/1"),
        ([1, 0, 1, 1], [1, 0.5, 1, 1], "candidate outcomes must be 0/1"),
        ([1, 0, 1], [1, 0, 1, 1], "must be equal 1-D shapes"),
    ],
)
def test_floor_refuses_outcomes_that_are_not_paired_zero_one(reference, candidate, message) -> None:
    # A cast to bool would count a score of 2 (or 0.5) as correct and decide on it without a word.
    with pytest.raises(ValueError, match=message):
        evaluate_floor(reference, candidate, FloorRule((0.99,), "point", n_resamples=50), np.random.default_rng(0),
                       label="t")  # fmt: skip


def test_floor_takes_bool_and_zero_one_outcomes_alike() -> None:
    rng = np.random.default_rng(5)
    ref = rng.random(60) < 0.7
    cand = ref & (rng.random(60) < 0.95)
    rule = FloorRule((0.9,), "point", n_resamples=100)
    as_bool = evaluate_floor(ref, cand, rule, np.random.default_rng(1), label="t")
    as_int = evaluate_floor(ref.astype(int), cand.astype(int), rule, np.random.default_rng(1), label="t")
    assert as_bool.checks[0].to_dict() == as_int.checks[0].to_dict()
