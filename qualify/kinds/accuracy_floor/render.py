"""How `accuracy_floor` items appear on the sign-off page: score ratio against BF16 with the floors."""

from __future__ import annotations

from typing import Any

from qualify.kinds.accuracy_floor.measurements import AccuracyFloorMeasurements
from qualify.render.blocks import Figure, Summary, checks, read_measurements
from qualify.render.fmt import as_float, as_text, number
from qualify.render.plot_parts import decision_class, not_run_label, short
from qualify.render.svg import Canvas, Scale, nice_ticks
from qualify.render.view import item_status

ACCURACY_AXIS = (98.0, 100.25)
ACCURACY_LINES = (99.0, 99.9)


def _floors(item: dict[str, Any]) -> list[float]:
    """The item's floors: the thresholds of its checks (the one place the report states them)."""
    return [f for f in (as_float(c.get("threshold")) for c in checks(item)) if f is not None]


def _outcome(item: dict[str, Any]) -> str:
    """The worst check outcome of the item (a failed floor outranks an inconclusive one)."""
    outcomes = {as_text(c.get("outcome")) for c in checks(item)}
    return next((o for o in ("fail", "inconclusive", "pass") if o in outcomes), "")


def accuracy_plot(items: list[dict[str, Any]]) -> str:
    """Score as a percentage of BF16 on a fixed 98-100.25 % axis, with the 99 % and 99.9 % lines."""
    if not items:
        return ""
    left, right_pad, top, row_h = 230, 130, 34, 28
    plot_w = 440
    width = left + plot_w + right_pad
    height = top + row_h * len(items) + 30
    c = Canvas(width, height, "Accuracy as a percentage of BF16 (98-100.25 %)")
    lo, hi = ACCURACY_AXIS
    scale = Scale(lo, hi, left, left + plot_w)
    for t in nice_ticks(lo, hi, 9):
        c.line(scale(t), top - 4, scale(t), height - 26, "grid")
        c.text(scale(t), height - 12, f"{t:g}", "tick", anchor="middle")
    for t in ACCURACY_LINES:
        c.line(scale(t), top - 10, scale(t), height - 26, "ref-line")
        c.text(scale(t), top - 14, f"{t:g} %", "tick", anchor="middle")

    for row, item in enumerate(items):
        m = read_measurements(AccuracyFloorMeasurements, item)
        y = top + row * row_h + row_h / 2
        status = item_status(item)
        label = " · ".join(s for s in (m.task, m.layout) if s) if m else ""
        c.text(left - 8, y + 4, short(label or as_text(item.get("name")), 34), "group", anchor="end")
        ratio = as_float(m.ratio) if m else None
        if m is None or status not in ("passed", "failed") or ratio is None:
            c.rect(left, y - row_h / 2 + 3, plot_w, row_h - 6, "not-run-area", as_text(item.get("reason")))
            c.text(left + plot_w / 2, y + 4, not_run_label(item), "not-run", anchor="middle")
            continue
        pct = ratio * 100
        low, high = as_float(m.ratio_ci_low), as_float(m.ratio_ci_high)
        if low is not None and high is not None:
            c.error_bar_h(y, scale(low * 100), scale(high * 100))
        for floor in _floors(item):
            c.line(scale(floor * 100), y - 9, scale(floor * 100), y + 9, "threshold")
        outcome = _outcome(item)
        cls = decision_class(outcome, status)
        tip = (
            f"{label}: {number(pct, 5)} % of BF16, CI [{number(None if low is None else low * 100, 5)}, "
            f"{number(None if high is None else high * 100, 5)}], n={m.n}, "
            f"McNemar p={number(m.mcnemar_p, 3)}, decision rule {m.decision}, outcome {outcome or status}"
        )
        c.circle(scale(pct), y, 5, cls + (" hollow" if m.underpowered else ""), tip)
        notes = []
        if not scale.contains(pct):
            notes.append(f"{'◀' if pct < lo else '▶'} {number(pct, 4)} %")
        if m.underpowered:
            notes.append("underpowered")
        if m.smoke:
            notes.append("smoke")
        if notes:
            c.text(left + plot_w + 8, y + 4, ", ".join(notes), "note")
    return c.to_svg()


class AccuracyFloorRender:
    def figures(self, items: list[dict[str, Any]]) -> list[Figure]:
        return [
            Figure(
                id="plot-accuracy",
                title="Accuracy as a percentage of BF16",
                body=accuracy_plot(items),
                caption=(
                    "Dots: score ratio with its CI on a 98-100.25 % axis; blue lines at 99 % and 99.9 %; red ticks: "
                    "the item's floors. A hollow dot is an underpowered comparison."
                ),
                absent="No accuracy_floor items in this report.",
            )
        ]

    def summaries(self, items: list[dict[str, Any]]) -> list[Summary]:
        return []


RENDER = AccuracyFloorRender()
