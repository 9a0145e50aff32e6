"""The step summary: verdict and signature first, compact gate tables, payload, and a hard size budget."""

from __future__ import annotations

from pathlib import Path

import pytest
from _render_items import HOSTILE, check, item, with_items
from _render_signed import Signed

from qualify.cli import main
from qualify.render.markdown import STEP_SUMMARY_LIMIT, render_markdown
from qualify.render.source import RenderInput, load_input


def test_summary_starts_with_verdict_and_signature(signed: Signed) -> None:
    text = render_markdown(load_input(signed.envelope, signed.public_key))
    first = text.splitlines()[0]
    assert "**FAIL**" in first and "signature: valid (key id" in first
    assert "### Gates" in text and "### Raw payload and capacity" in text
    for gate in ("bound", "gpu-bound", "loss", "acc", "numerics", "perf"):
        assert f"### {gate} —" in text
    assert "<svg" not in text


def test_summary_escapes_markup_and_table_pipes(signed: Signed) -> None:
    text = render_markdown(load_input(signed.envelope))
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;" in text
    table_lines = [line for line in text.splitlines() if line.startswith("| ")]
    header_widths = {line.count(" | ") for line in table_lines if "---" not in line}
    # A `|` inside a value is escaped, so no row grows an extra column.
    for line in table_lines:
        assert line.replace("\\|", "").count("|") - 2 in {w for w in header_widths} or "---" in line


def _many_gates(signed: Signed, n: int) -> RenderInput:
    extra = [
        item(f"g{i}[{HOSTILE}]", f"gate-{i}", "compare", "passed", [check("value", 0.5, "<=", 1.0, "pass")], {})
        for i in range(n)
    ]
    src = load_input(signed.envelope)
    return RenderInput(src.report | with_items(src.report, extra), src.signature, src.source, src.source_sha256)


@pytest.mark.parametrize("budget", [20_000, 200_000])
def test_summary_fits_its_budget_and_says_what_was_left_out(signed: Signed, budget: int) -> None:
    text = render_markdown(_many_gates(signed, 3000), budget=budget)
    assert len(text.encode()) <= budget
    assert "omitted to stay under GitHub's size limit" in text or "Summary truncated" in text
    assert text.splitlines()[0].startswith("## ")


def test_default_budget_is_under_the_step_summary_limit(signed: Signed) -> None:
    text = render_markdown(_many_gates(signed, 8000))
    assert len(text.encode()) < STEP_SUMMARY_LIMIT


def test_cli_md_goes_to_stdout(signed: Signed, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["render", str(signed.envelope), "--key", str(signed.public_key), "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("## ❌ Qualification: **FAIL**")
    out = tmp_path / "summary.md"
    assert main(["render", str(signed.report_path), "-o", str(out)]) == 0  # format follows the suffix
    assert out.read_text().startswith("## ") and "UNSIGNED" in out.read_text().splitlines()[0]
