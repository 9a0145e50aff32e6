"""The console summary: items that ran with their kind's primary check, a line per gate, skips by reason in full."""

from __future__ import annotations

from qualify.console_summary import gate_rollups, headline, not_run_groups, summary_lines
from qualify.kinds.kernel_numerics import SPEC as NUMERICS
from qualify.kinds.loss_increase import SPEC as LOSS
from qualify.results import Check, ItemOutcome, ItemResult, Status

LONG_REASON = (
    "requires cuda (no CUDA GPU visible to torch), sm90 (no CUDA GPU visible to torch), flashinfer (package "
    "flashinfer not importable: install the gpu extra), vllm (package vllm not importable: install the serve extra)"
)


def bound(layout: str, observed: float, threshold: float = 0.005) -> Check:
    return Check(f"{layout} rel. loss increase", observed, "<=", threshold, "paired bootstrap", unit="fraction")


def result(name: str, gate: str, status: Status, kind: str = "loss_increase", checks=(), reason=None) -> ItemResult:
    outcome = ItemOutcome(checks=list(checks)) if checks else None
    return ItemResult(name, name, gate, None, kind, "g.yaml", [], "", status, reason, 1.0, outcome)


def test_headline_is_the_kinds_primary_check_unless_one_failed() -> None:
    checks = [bound("K16/V16", 0.0, 0.0), bound("K16/V8", 0.0013), bound("K8/V8", 0.004)]
    ok = result("loss[run1]", "loss", Status.PASSED, checks=checks)
    assert headline(ok, LOSS.primary_check) == "K16/V8 rel. loss increase: 0.13 % <= 0.5 %"
    assert headline(ok, None).startswith("K16/V16 rel. loss increase")  # no primary declared: the first
    failed = result("loss[run2]", "loss", Status.FAILED, checks=[*checks[:2], bound("K8/V8", 0.02)])
    assert headline(failed, LOSS.primary_check) == "K8/V8 rel. loss increase: 2 % <= 0.5 %"


def test_numerics_headline_is_the_error_against_the_fp32_reference() -> None:
    checks = [
        Check("NaN outputs (poisoned buffer)", 0.0, "<=", 0.0, "count"),
        Check("vs FlashInfer injection: relative L2 error", 0.003, "<=", 0.015, "l2"),
        Check("relative L2 error", 0.0017, "<=", 0.015, "l2"),
    ]
    item = result("n[c]", "numerics", Status.PASSED, kind="kernel_numerics", checks=checks)
    assert headline(item, NUMERICS.primary_check) == "relative L2 error: 0.0017 <= 0.015"


def test_skips_are_grouped_by_reason_with_counts_and_shown_in_full() -> None:
    results = [result(f"perf[{i}]", "perf", Status.SKIPPED, reason=LONG_REASON) for i in range(40)]
    results += [result("engine[1]", "engine", Status.SKIPPED, reason="requires vllm")]
    results += [result("loss[a]", "loss", Status.DESELECTED, reason="deselected by -k run1")]
    results += [result("loss[b]", "loss", Status.PASSED, checks=[bound("K16/V8", 0.001)])]
    assert not_run_groups(results) == [
        (Status.SKIPPED, LONG_REASON, 40),
        (Status.SKIPPED, "requires vllm", 1),
        (Status.DESELECTED, "deselected by -k run1", 1),
    ]
    lines = summary_lines(results, lambda kind: LOSS.primary_check, width=80)
    text = "\n".join(lines)
    assert "perf[3]" not in text  # skipped items are counted, not listed
    assert " ".join(text.split()).count(LONG_REASON) == 1  # the whole reason, wrapped, once
    not_run = lines[lines.index("not run (by reason):") + 1 :]
    assert max(len(line) for line in not_run) <= 80  # wrapped to the terminal, not cut
    assert "  40 skipped: requires cuda" in text and "  1 deselected: deselected by -k run1" in text


def test_one_rollup_line_per_gate_with_its_commonest_reason() -> None:
    results = [result(f"perf[{i}]", "perf", Status.SKIPPED, reason="requires sm90") for i in range(3)]
    results += [result("loss[a]", "loss", Status.PASSED, checks=[bound("K16/V8", 0.001)])]
    results += [result("loss[b]", "loss", Status.FAILED, checks=[bound("K16/V8", 0.01)], reason="1 check failed")]
    assert [g.line() for g in gate_rollups(results)] == [
        "perf: 3 skipped  (3x requires sm90)",
        "loss: 1 passed, 1 failed  (1 check failed)",
    ]
