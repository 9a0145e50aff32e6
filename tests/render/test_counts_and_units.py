"""The first screen tallies what ran and what did not; fractions read as percentages with a matching label."""

from __future__ import annotations

import pytest
from _render_items import check, item, with_items
from _render_signed import Signed

from qualify.render.html import render_html
from qualify.render.markdown import render_markdown
from qualify.render.source import RenderInput, load_input


def _with(signed: Signed, extra: list[dict]) -> RenderInput:
    src = load_input(signed.envelope)
    return RenderInput(with_items(src.report, extra), src.signature, src.source, src.source_sha256)


def _loss_item(unit: str) -> dict:
    bound = check("K16/V8 loss increase", 0.0013, "<=", 0.005, "pass", unit=unit, ci_low=0.0004, ci_high=0.0021)
    return item("loss[K16/V8]", "loss-units", "compare", "passed", [bound], {})


@pytest.mark.parametrize("unit", ["fraction", "%"])  # "%" is how earlier reports labelled the same fractions
@pytest.mark.parametrize("render", [render_html, render_markdown])
def test_a_fraction_is_shown_as_a_percentage(signed: Signed, unit: str, render) -> None:
    page = render(_with(signed, [_loss_item(unit)]))
    assert "0.13 %" in page
    assert "0.5 %" in page  # the bound carries the same label as the observed value
    assert "0.04, 0.21" in page.replace("\\", "")  # the CI (Markdown escapes its brackets)
    assert "0.0013 %" not in page and "0.001297" not in page


@pytest.mark.parametrize("render", [render_html, render_markdown])
def test_first_screen_counts_ran_skipped_deselected_and_vacuous(signed: Signed, render) -> None:
    extra = [
        item("d[1]", "sel", "compare", "deselected", [], {}, reason="deselected by -k nothing"),
        item("d[2]", "sel", "compare", "deselected", [], {}, reason="deselected by -k nothing"),
        item(
            "v[1]",
            "vac",
            "compare",
            "incomplete",
            [check("value", 1.0, ">=", 0.9, "pass")],
            {},
            reason="vacuous: the reference scored 0 of 8",
        ),
    ]
    src = _with(signed, extra)
    c = src.report["counts"]
    page = render(src)
    ran = c["passed"] + c["failed"] + c["error"] + 1
    first_screen = page[: page.index("Gates")]
    expected = (
        f"{ran} ran ({c['passed']} passed, {c['failed']} failed, {c['error']} errors, 1 vacuous or underpowered); "
    )
    assert expected in first_screen
    assert f"{c['skipped']} skipped; 2 deselected" in first_screen
    assert "items imply" not in page  # the renderer and the plugin agree on what these imply
