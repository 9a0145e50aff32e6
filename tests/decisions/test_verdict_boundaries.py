"""The run's verdict and the item/check pass rule at their edges: empty, partial and mixed selections."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qualify.results import Check, ItemOutcome, Status, Verdict, verdict

statuses = st.lists(st.sampled_from(list(Status)), max_size=12)


def test_empty_selection_is_not_a_pass() -> None:
    # Nothing ran, nothing was shown: the "no statuses" guard must hold.
    assert verdict([]) is Verdict.INCOMPLETE
    assert verdict([]) is not Verdict.PASS


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        ([Status.PASSED], Verdict.PASS),
        ([Status.PASSED, Status.PASSED], Verdict.PASS),
        ([Status.FAILED], Verdict.FAIL),
        ([Status.ERROR], Verdict.FAIL),
        ([Status.SKIPPED], Verdict.INCOMPLETE),
        ([Status.PASSED, Status.SKIPPED], Verdict.INCOMPLETE),  # partial selection
        ([Status.SKIPPED, Status.FAILED], Verdict.FAIL),  # a failure outranks a gap
        ([Status.PASSED, Status.ERROR], Verdict.FAIL),
        ([Status.PASSED] * 5 + [Status.FAILED], Verdict.FAIL),
        ([Status.PASSED, Status.DESELECTED], Verdict.INCOMPLETE),  # partial selection (-k / -m)
        ([Status.DESELECTED], Verdict.INCOMPLETE),
        ([Status.PASSED, Status.INCOMPLETE], Verdict.INCOMPLETE),  # vacuous or underpowered item
        ([Status.INCOMPLETE, Status.ERROR], Verdict.FAIL),
    ],
)
def test_verdict_table(selection: list[Status], expected: Verdict) -> None:
    assert verdict(selection) is expected


@given(statuses)
def test_verdict_matches_its_definition(selection: list[Status]) -> None:
    v = verdict(selection)
    if any(s in (Status.FAILED, Status.ERROR) for s in selection):
        assert v is Verdict.FAIL
    elif selection and all(s is Status.PASSED for s in selection):
        assert v is Verdict.PASS
    else:
        assert v is Verdict.INCOMPLETE


@given(statuses, st.sampled_from([Status.FAILED, Status.ERROR]), st.integers(0, 12))
def test_adding_a_failure_never_yields_pass(selection: list[Status], bad: Status, at: int) -> None:
    grown = [*selection[:at], bad, *selection[at:]]
    assert verdict(grown) is Verdict.FAIL
    if verdict(selection) is Verdict.FAIL:
        assert verdict(grown) is Verdict.FAIL


@given(
    statuses,
    st.sampled_from([s for s in Status if s not in (Status.PASSED, Status.FAILED, Status.ERROR)]),
    st.integers(0, 12),
)
def test_adding_a_gap_never_yields_pass(selection: list[Status], gap: Status, at: int) -> None:
    grown = [*selection[:at], gap, *selection[at:]]
    assert verdict(grown) is not Verdict.PASS
    assert verdict(grown) is (Verdict.FAIL if verdict(selection) is Verdict.FAIL else Verdict.INCOMPLETE)


@given(statuses, st.randoms(use_true_random=False))
def test_verdict_ignores_order(selection: list[Status], rnd) -> None:
    shuffled = list(selection)
    rnd.shuffle(shuffled)
    assert verdict(shuffled) is verdict(selection)


# --- Check.passed: the comparison at equality, decided_on against observed, outcome overriding both ---


@pytest.mark.parametrize(
    ("op", "value", "threshold", "passes"),
    [
        (">=", 1.0, 1.0, True),
        (">=", math.nextafter(1.0, 0.0), 1.0, False),
        ("<=", 1.0, 1.0, True),
        ("<=", math.nextafter(1.0, 2.0), 1.0, False),
        (">", 1.0, 1.0, False),
        (">", math.nextafter(1.0, 2.0), 1.0, True),
        ("<", 1.0, 1.0, False),
        ("<", math.nextafter(1.0, 0.0), 1.0, True),
    ],
)
def test_check_operator_at_the_threshold(op: str, value: float, threshold: float, passes: bool) -> None:
    assert Check("c", value, op, threshold, "s").passed is passes
    # decided_on, not observed, is what is compared.
    assert Check("c", 123.0 if op in (">=", ">") else -123.0, op, threshold, "s", decided_on=value).passed is passes


@pytest.mark.parametrize("op", [">=", "<=", ">", "<"])
def test_nan_never_passes(op: str) -> None:
    assert not Check("c", math.nan, op, 1.0, "s").passed
    assert not Check("c", 1.0, op, 1.0, "s", decided_on=math.nan).passed


def test_point_passes_but_decided_end_fails_and_vice_versa() -> None:
    # observed clears >= 1.0, the decided CI end does not: fail.
    assert not Check("c", 1.05, ">=", 1.0, "s", ci_low=0.97, ci_high=1.1, decided_on=0.97).passed
    # observed misses, decided end clears: pass (the decision is the decided value's).
    assert Check("c", 0.99, ">=", 0.95, "s", ci_low=0.96, ci_high=1.02, decided_on=0.96).passed
    assert not Check("c", 0.01, "<=", 0.02, "s", ci_low=0.0, ci_high=0.03, decided_on=0.03).passed


@pytest.mark.parametrize(
    ("outcome", "passes", "label"),
    [("pass", True, "pass"), ("fail", False, "fail"), ("inconclusive", False, "inconclusive")],
)
def test_explicit_outcome_overrides_the_comparison(outcome: str, passes: bool, label: str) -> None:
    # The comparison alone would pass; the outcome decides.
    c = Check("c", 2.0, ">=", 1.0, "s", outcome=outcome)
    assert c.passed is passes
    assert c.to_dict()["outcome"] == label
    assert c.to_dict()["passed"] is passes


def test_no_outcome_reports_the_comparison() -> None:
    assert Check("c", 2.0, ">=", 1.0, "s").to_dict()["outcome"] == "pass"
    assert Check("c", 0.5, ">=", 1.0, "s").to_dict()["outcome"] == "fail"


def test_check_rejects_unknown_operator_and_outcome() -> None:
    with pytest.raises(ValueError, match="operator"):
        Check("c", 1.0, "==", 1.0, "s")
    with pytest.raises(ValueError, match="outcome"):
        Check("c", 1.0, ">=", 1.0, "s", outcome="maybe")


def test_item_with_no_checks_does_not_pass() -> None:
    assert not ItemOutcome().passed
    assert ItemOutcome(checks=[Check("a", 1.0, ">=", 1.0, "s")]).passed


@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_item_passes_iff_every_check_passes(flags: list[bool]) -> None:
    checks = [Check(f"c{i}", 1.0 if ok else 0.0, ">=", 1.0, "s") for i, ok in enumerate(flags)]
    assert ItemOutcome(checks=checks).passed is all(flags)
