"""A verdict speaks for every compiled item: deselection, vacuous checks and NaN never read as a pass."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_plugin_and_cli import gate_file, run

from qualify.cli import main
from qualify.results import Check, ItemOutcome, Shortfall, Status, Verdict, verdict


@pytest.mark.parametrize("selection", [["-k", "0.25"], ["--", "-m", "gate"], ["--", "--deselect", "x::y"]])
def test_strict_run_refuses_deselection_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], selection: list[str]
) -> None:
    gates = gate_file(tmp_path, 0.5)
    assert main(["keygen", "--out", str(tmp_path / "keys")]) == 0
    capsys.readouterr()
    key = tmp_path / "keys" / "signing-key.pem"
    code, out = run(tmp_path, gates, "--strict", "--sign-key", str(key), *selection)
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "runs every compiled item" in err
    assert not out.exists()  # nothing ran, nothing was written


def test_plain_pytest_records_deselected_items(pytester: pytest.Pytester, tmp_path: Path) -> None:
    gates = gate_file(tmp_path, 0.5)
    out = tmp_path / "plain"
    result = pytester.runpytest_inprocess(
        str(gates), "-p", "no:cacheprovider", "-k", "0.25", "--qualify-out", str(out), "--qualify-name", "r"
    )
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*VERDICT: INCOMPLETE (1 deselected*"])
    report = json.loads((out / "r.json").read_text())
    assert report["verdict"] == "INCOMPLETE"
    assert [(i["name"], i["status"], i["reason"]) for i in report["items"] if i["status"] == "deselected"] == [
        ("bound[0.5]", "deselected", "deselected by -k 0.25")
    ]


def test_plain_pytest_strict_refuses_marker_selection(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = pytester.runpytest_inprocess(str(gate_file(tmp_path, 0.5)), "--qualify-strict", "-m", "gate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "runs every compiled item: drop -m gate" in result.stderr.str()


def _check(observed: float, **extra: object) -> Check:
    return Check(name="c", observed=observed, operator=">=", threshold=0.9, statistic="s", **extra)  # type: ignore[arg-type]


def test_a_pass_that_could_not_have_failed_is_incomplete() -> None:
    vacuous = ItemOutcome(checks=[_check(1.0)], shortfalls=[Shortfall("vacuous", "the reference scored 0 of 8")])
    assert vacuous.passed
    assert vacuous.settled_status() == (Status.INCOMPLETE, "vacuous: the reference scored 0 of 8")
    assert ItemOutcome(checks=[_check(1.0)]).settled_status() == (Status.PASSED, None)
    # A failing check still fails: a shortfall never softens a failure.
    failing = ItemOutcome(checks=[_check(0.5)], shortfalls=[Shortfall("underpowered", "n=8")])
    assert failing.settled_status()[0] is Status.FAILED


def test_an_inconclusive_check_is_incomplete_only_where_the_item_declared_itself_underpowered() -> None:
    open_check = _check(0.95, decided_on=0.8, ci_low=0.8, ci_high=1.0, outcome="inconclusive")
    small = Shortfall("underpowered", "n=27 resolves a 30-point drop")
    status, why = ItemOutcome(checks=[open_check], shortfalls=[small]).settled_status()
    assert status is Status.INCOMPLETE
    assert why == "underpowered: n=27 resolves a 30-point drop; inconclusive at this n (the CI straddles the bound): c"
    # Without that declaration (a timing comparison that should have decided), inconclusive fails the item.
    assert ItemOutcome(checks=[open_check]).settled_status() == (Status.FAILED, "failed checks: c")
    vacuous = Shortfall("vacuous", "every sample equal")
    assert ItemOutcome(checks=[open_check], shortfalls=[vacuous]).settled_status()[0] is Status.FAILED
    # Beside a failing check, or as NaN, it settles nothing: the item fails.
    assert ItemOutcome(checks=[open_check, _check(0.5)], shortfalls=[small]).settled_status()[0] is Status.FAILED
    nan = _check(0.95, decided_on=math.nan, outcome="inconclusive")
    assert ItemOutcome(checks=[nan], shortfalls=[small]).settled_status()[0] is Status.FAILED
    assert ItemOutcome(checks=[], shortfalls=[small]).settled_status()[0] is Status.FAILED


@pytest.mark.parametrize("unshown", [Status.DESELECTED, Status.INCOMPLETE, Status.SKIPPED])
def test_verdict_is_incomplete_when_anything_was_not_shown(unshown: Status) -> None:
    assert verdict([Status.PASSED, unshown]) is Verdict.INCOMPLETE
    assert verdict([Status.FAILED, unshown]) is Verdict.FAIL
    assert verdict([Status.PASSED, Status.PASSED]) is Verdict.PASS


@pytest.mark.parametrize(
    ("check", "reason"),
    [
        (_check(math.nan), "observed value is NaN"),
        (_check(math.nan, outcome="pass"), "observed value is NaN"),  # an explicit outcome cannot hide it
        (_check(0.95, decided_on=math.nan), "value decided on is NaN"),
        (_check(0.95, decided_on=math.nan, outcome="inconclusive"), "value decided on is NaN"),
    ],
)
def test_nan_fails_with_a_reason(check: Check, reason: str) -> None:
    assert not check.passed
    assert check.nan_reason == reason
    assert check.to_dict()["outcome"] == "fail"
    status, why = ItemOutcome(checks=[check]).settled_status()
    assert status is Status.FAILED and why == f"failed checks: c ({reason})"


@pytest.mark.parametrize("bad", [".inf", "-.inf", ".nan"])
def test_lint_refuses_non_finite_thresholds(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    path = gate_file(tmp_path, 0.5)
    path.write_text(path.read_text().replace("limit: 1.0", f"limit: {bad}"))
    assert main(["lint", str(path)]) == 2
    assert f"{path}:7:5: gate 'bound': limit: Input should be a finite number" in capsys.readouterr().err
