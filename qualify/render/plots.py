"""Inline SVG plots for the loss, accuracy and performance gates, drawn from item measurements.

An item that did not run gets an explicit "not run" mark in its slot and never a coloured bar: a
skipped measurement must not look like a good one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qualify.render.fmt import as_dict, as_float, as_list, as_text, number
from qualify.render.svg import Canvas, Scale, nice_ticks
from qualify.render.view import item_status, layout_sort_key, measurements

SELECTED_LAYOUT = "K16/V8"
REFERENCE_LAYOUT = "K16/V16"
ACCURACY_AXIS = (98.0, 100.25)
ACCURACY_LINES = (99.0, 99.9)


def layout_class(layout: str) -> str:
    """CSS class of a layout's bar: the colour names the layout (selected green, K8 keys red), not its result."""
    if layout == SELECTED_LAYOUT:
        return "bar-selected"
    if layout.startswith("K8"):
        return "bar-keyquant"
    if layout == REFERENCE_LAYOUT:
        return "bar-reference"
    return "bar-other"


def _not_run_label(item: dict[str, Any]) -> str:
    status = item_status(item)
    return "error" if status == "error" else "not run" if status == "skipped" else "no data"


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _y_axis(c: Canvas, scale: Scale, ticks: list[float], x0: float, x1: float, fmt: str = "{:g}") -> None:
    for t in ticks:
        y = scale(t)
        c.line(x0, y, x1, y, "grid")
        c.text(x0 - 6, y + 4, fmt.format(t), "tick", anchor="end")


# --- loss increase ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LossBar:
    layout: str
    value: float | None
    low: float | None
    high: float | None
    limit: float | None
    control: bool


def _loss_bars(item: dict[str, Any]) -> list[_LossBar]:
    bars = []
    for entry in as_list(measurements(item).get("layouts")):
        if not isinstance(entry, dict):
            continue

        def pct(key: str, entry: dict[str, Any] = entry) -> float | None:
            v = as_float(entry.get(key))
            return None if v is None else v * 100

        bars.append(
            _LossBar(
                layout=as_text(entry.get("layout")),
                value=pct("rel_increase"),
                low=pct("ci_low"),
                high=pct("ci_high"),
                limit=pct("max_rel_increase"),
                control=entry.get("positive_control") is True,
            )
        )
    return sorted(bars, key=lambda b: layout_sort_key(b.layout))


def loss_increase_plot(items: list[dict[str, Any]]) -> str:
    """Relative eval-loss increase (%) per layout with its CI, one group per workload and checkpoint."""
    if not items:
        return ""
    groups = [(item, _loss_bars(item) if item_status(item) in ("passed", "failed") else []) for item in items]
    values = [0.0]
    for _, bars in groups:
        for b in bars:
            values += [v for v in (b.value, b.low, b.high, b.limit) if v is not None]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 1.0
    lo, hi = (lo - pad if lo < 0 else 0.0), hi + pad

    bar_w, gap, left, top, plot_h = 44, 30, 64, 34, 240
    widths = [max(len(bars), 1) * bar_w + gap for _, bars in groups]
    width = max(left + sum(widths) + 20, 600)
    c = Canvas(width, top + plot_h + 84, "Eval-loss increase vs BF16 per layout and checkpoint (%)")
    scale = Scale(lo, hi, top + plot_h, top)
    _y_axis(c, scale, nice_ticks(lo, hi), left, width - 10, "{:g} %")
    c.line(left, scale(0), width - 10, scale(0), "axis")
    c.text(12, top + plot_h / 2, "loss increase (%)", "label", anchor="middle", rotate=-90)

    x = left + gap / 2
    for (item, bars), w in zip(groups, widths, strict=True):
        m = measurements(item)
        checkpoint = as_text(m.get("checkpoint")) or as_text(item.get("name"))
        status = item_status(item)
        if not bars:
            c.rect(
                x, top, w - gap, plot_h, "not-run-area", f"{as_text(item.get('name'))}: {as_text(item.get('reason'))}"
            )
            c.text(x + (w - gap) / 2, top + plot_h / 2, _not_run_label(item), "not-run", anchor="middle")
        for i, b in enumerate(bars):
            bx = x + i * bar_w
            cx = bx + bar_w / 2
            tip = f"{b.layout}: {number(b.value)} % [CI {number(b.low)}, {number(b.high)}]"
            if b.limit is not None:
                tip += f"; bound {number(b.limit)} %"
            if b.value is not None:
                y0, y1 = scale(0), scale(b.value)
                c.rect(bx + 3, min(y0, y1), bar_w - 6, abs(y1 - y0), layout_class(b.layout), tip)
            else:
                c.text(cx, scale(0) - 4, "n/a", "not-run", anchor="middle")
            if b.low is not None and b.high is not None:
                c.error_bar_v(cx, scale(b.low), scale(b.high))
            if b.limit is not None:
                c.line(bx + 1, scale(b.limit), bx + bar_w - 1, scale(b.limit), "threshold")
            c.text(cx, top + plot_h + 14, b.layout, "tick small", anchor="middle")
            if b.control:
                c.text(cx, top + plot_h + 26, "control", "tick small", anchor="middle")
        cx = x + (w - gap) / 2
        chars = max(int(w / 7.5), 8)
        c.text(cx, top + plot_h + 44, _short(checkpoint, chars), "group", anchor="middle")
        c.text(cx, top + plot_h + 58, _short(as_text(m.get("workload")), chars), "tick", anchor="middle")
        c.text(cx, top + plot_h + 72, status, f"status-text {status}", anchor="middle")
        x += w

    legend = [("bar-selected", f"{SELECTED_LAYOUT} (selected)"), ("bar-keyquant", "K8 keys"), ("bar-reference", "BF16")]
    lx = left
    for cls, text in legend:
        c.rect(lx, 8, 12, 12, cls)
        c.text(lx + 16, 18, text, "tick")
        lx += 24 + 7 * len(text)
    c.line(lx, 14, lx + 18, 14, "threshold")
    c.text(lx + 22, 18, "bound (max increase)", "tick")
    return c.to_svg()


# --- accuracy floor --------------------------------------------------------------------------------


def _decision_class(decision: str, status: str) -> str:
    if status not in ("passed", "failed"):
        return "mark-none"
    return {"pass": "mark-pass", "fail": "mark-fail", "inconclusive": "mark-inconclusive"}.get(
        decision, "mark-pass" if status == "passed" else "mark-fail"
    )


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
        m = measurements(item)
        y = top + row * row_h + row_h / 2
        status = item_status(item)
        label = " · ".join(s for s in (as_text(m.get("task")), as_text(m.get("layout"))) if s)
        c.text(left - 8, y + 4, _short(label or as_text(item.get("name")), 34), "group", anchor="end")
        ratio = as_float(m.get("ratio"))
        if status not in ("passed", "failed") or ratio is None:
            c.rect(left, y - row_h / 2 + 3, plot_w, row_h - 6, "not-run-area", as_text(item.get("reason")))
            c.text(left + plot_w / 2, y + 4, _not_run_label(item), "not-run", anchor="middle")
            continue
        pct = ratio * 100
        low, high = as_float(m.get("ratio_ci_low")), as_float(m.get("ratio_ci_high"))
        if low is not None and high is not None:
            c.error_bar_h(y, scale(low * 100), scale(high * 100))
        floor = as_float(m.get("floor"))
        if floor is not None:
            c.line(scale(floor * 100), y - 9, scale(floor * 100), y + 9, "threshold")
        cls = _decision_class(as_text(m.get("decision")), status)
        underpowered = m.get("underpowered") is True
        tip = (
            f"{label}: {number(pct, 5)} % of BF16, CI [{number(None if low is None else low * 100, 5)}, "
            f"{number(None if high is None else high * 100, 5)}], n={as_text(m.get('n'))}, "
            f"McNemar p={number(m.get('mcnemar_p'), 3)}, decision {as_text(m.get('decision'))}"
        )
        c.circle(scale(pct), y, 5, cls + (" hollow" if underpowered else ""), tip)
        notes = []
        if not scale.contains(pct):
            notes.append(f"{'◀' if pct < lo else '▶'} {number(pct, 4)} %")
        if underpowered:
            notes.append("underpowered")
        if m.get("smoke") is True:
            notes.append("smoke")
        if notes:
            c.text(left + plot_w + 8, y + 4, ", ".join(notes), "note")
    return c.to_svg()


# --- performance non-regression --------------------------------------------------------------------


def _batch_of(item: dict[str, Any]) -> str:
    b = measurements(item).get("batch", as_dict(item.get("parameters")).get("batch"))
    return as_text(b) if b is not None else "?"


def _batch_key(b: str) -> tuple[int, float, str]:
    try:
        return (0, float(b), b)
    except ValueError:
        return (1, 0.0, b)


def perf_plots(items: list[dict[str, Any]]) -> list[str]:
    """One plot per metric: candidate/baseline ratio per batch with its CI and the threshold."""
    gate_metrics: dict[str, set[str]] = {}
    for item in items:
        if metric := _metric_of(item):
            gate_metrics.setdefault(as_text(item.get("gate_id")), set()).add(metric)
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        metric = _metric_of(item)
        if not metric:
            # A skipped item measured nothing; it belongs on its gate's plot when the gate has one metric.
            known = gate_metrics.get(as_text(item.get("gate_id")), set())
            metric = next(iter(known)) if len(known) == 1 else as_text(item.get("gate_id")) or "metric"
        by_metric.setdefault(metric, []).append(item)
    return [_perf_plot(metric, group) for metric, group in by_metric.items()]


def _metric_of(item: dict[str, Any]) -> str:
    return as_text(measurements(item).get("metric", as_dict(item.get("parameters")).get("metric")))


def _perf_plot(metric: str, items: list[dict[str, Any]]) -> str:
    batches = sorted({_batch_of(i) for i in items}, key=_batch_key)
    values = [1.0]
    for item in items:
        m = measurements(item)
        values += [
            v for v in (as_float(m.get(k)) for k in ("ratio", "ci_low", "ci_high", "threshold")) if v is not None
        ]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or 0.05
    lo, hi = lo - pad, hi + pad
    left, top, plot_h, slot = 64, 30, 200, 70
    width = max(left + slot * len(batches) + 30, 520)
    c = Canvas(width, top + plot_h + 50, f"{metric}: candidate / baseline ratio per batch")
    scale = Scale(lo, hi, top + plot_h, top)
    _y_axis(c, scale, nice_ticks(lo, hi), left, width - 10)
    c.line(left, scale(1.0), width - 10, scale(1.0), "axis")
    c.text(12, top + plot_h / 2, "ratio", "label", anchor="middle", rotate=-90)
    thresholds = sorted({t for t in (as_float(measurements(i).get("threshold")) for i in items) if t is not None})
    for t in thresholds:
        c.line(left, scale(t), width - 10, scale(t), "threshold")
    directions = sorted({as_text(measurements(i).get("direction")) for i in items} - {""})
    caption = metric
    if thresholds:
        caption += f"; threshold {', '.join(number(t) for t in thresholds)}"
    if directions:
        caption += f"; direction: {', '.join(directions)}"
    c.text(left, 16, caption, "group")
    for col, batch in enumerate(batches):
        cx = left + slot * col + slot / 2
        c.text(cx, top + plot_h + 16, f"batch {batch}", "tick", anchor="middle")
        for item in (i for i in items if _batch_of(i) == batch):
            m = measurements(item)
            ratio = as_float(m.get("ratio"))
            status = item_status(item)
            if status not in ("passed", "failed") or ratio is None:
                c.text(cx, top + plot_h / 2, _not_run_label(item), "not-run", anchor="middle")
                continue
            low, high = as_float(m.get("ci_low")), as_float(m.get("ci_high"))
            if low is not None and high is not None:
                c.error_bar_v(cx, scale(low), scale(high))
            tip = (
                f"batch {batch}: ratio {number(ratio)} CI [{number(low)}, {number(high)}], candidate "
                f"{number(m.get('candidate'))} vs baseline {number(m.get('baseline'))}, {as_text(m.get('outcome'))}"
            )
            c.circle(cx, scale(ratio), 5, _decision_class(as_text(m.get("outcome")), status), tip)
            outcome = as_text(m.get("outcome")) or status
            css = {"pass": "passed", "fail": "failed", "inconclusive": "inconclusive"}.get(outcome, status)
            c.text(cx, top + plot_h + 30, outcome, f"status-text {css}", "middle")
    return c.to_svg()
