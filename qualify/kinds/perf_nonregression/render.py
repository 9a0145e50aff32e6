"""How `perf_nonregression` items appear on the sign-off page: candidate/baseline ratio per batch."""

from __future__ import annotations

from typing import Any

from qualify.kinds.perf_nonregression.measurements import PerfNonRegressionMeasurements
from qualify.render.blocks import Figure, Summary, checks, read_measurements
from qualify.render.fmt import as_dict, as_float, as_text, number
from qualify.render.plot_parts import decision_class, not_run_label, y_axis
from qualify.render.svg import Canvas, Scale, nice_ticks
from qualify.render.view import item_status


def _measured(item: dict[str, Any]) -> PerfNonRegressionMeasurements | None:
    return read_measurements(PerfNonRegressionMeasurements, item)


def threshold(item: dict[str, Any]) -> float | None:
    """The item's ratio threshold: its (single) check's."""
    return next((t for t in (as_float(c.get("threshold")) for c in checks(item)) if t is not None), None)


def _batch_of(item: dict[str, Any]) -> str:
    m = _measured(item)
    # A skipped item has no measurements; its parameters still say which batch it is.
    b = m.batch if m else as_dict(item.get("parameters")).get("batch")
    return as_text(b) if b is not None else "?"


def _batch_key(b: str) -> tuple[int, float, str]:
    try:
        return (0, float(b), b)
    except ValueError:
        return (1, 0.0, b)


def _metric_of(item: dict[str, Any]) -> str:
    m = _measured(item)
    return m.metric if m else as_text(as_dict(item.get("parameters")).get("metric"))


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


def _perf_plot(metric: str, items: list[dict[str, Any]]) -> str:
    batches = sorted({_batch_of(i) for i in items}, key=_batch_key)
    measured = [(i, _measured(i)) for i in items]
    values = [1.0]
    for item, m in measured:
        candidates = (m.ratio, m.ci_low, m.ci_high) if m else ()
        values += [v for v in (*(as_float(x) for x in candidates), threshold(item)) if v is not None]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or 0.05
    lo, hi = lo - pad, hi + pad
    left, top, plot_h, slot = 64, 30, 200, 70
    width = max(left + slot * len(batches) + 30, 520)
    c = Canvas(width, top + plot_h + 50, f"{metric}: candidate / baseline ratio per batch")
    scale = Scale(lo, hi, top + plot_h, top)
    y_axis(c, scale, nice_ticks(lo, hi), left, width - 10)
    c.line(left, scale(1.0), width - 10, scale(1.0), "axis")
    c.text(12, top + plot_h / 2, "ratio", "label", anchor="middle", rotate=-90)
    thresholds = sorted({t for t in (threshold(i) for i, m in measured if m) if t is not None})
    for t in thresholds:
        c.line(left, scale(t), width - 10, scale(t), "threshold")
    directions = sorted({m.direction for _, m in measured if m} - {""})
    caption = metric
    if thresholds:
        caption += f"; threshold {', '.join(number(t) for t in thresholds)}"
    if directions:
        caption += f"; direction: {', '.join(directions)}"
    c.text(left, 16, caption, "group")
    for col, batch in enumerate(batches):
        cx = left + slot * col + slot / 2
        c.text(cx, top + plot_h + 16, f"batch {batch}", "tick", anchor="middle")
        for item, m in ((i, m) for i, m in measured if _batch_of(i) == batch):
            status = item_status(item)
            ratio = as_float(m.ratio) if m else None
            if m is None or status not in ("passed", "failed") or ratio is None:
                c.text(cx, top + plot_h / 2, not_run_label(item), "not-run", anchor="middle")
                continue
            low, high = as_float(m.ci_low), as_float(m.ci_high)
            if low is not None and high is not None:
                c.error_bar_v(cx, scale(low), scale(high))
            tip = (
                f"batch {batch}: ratio {number(ratio)} CI [{number(low)}, {number(high)}], candidate "
                f"{m.candidate} ({number(m.candidate_median)} {m.unit}) vs baseline {m.baseline} "
                f"({number(m.baseline_median)} {m.unit}), {m.outcome}"
            )
            c.circle(cx, scale(ratio), 5, decision_class(m.outcome, status), tip)
            css = {"pass": "passed", "fail": "failed", "inconclusive": "inconclusive"}.get(m.outcome, status)
            c.text(cx, top + plot_h + 30, m.outcome, f"status-text {css}", "middle")
    return c.to_svg()


class PerfNonRegressionRender:
    def figures(self, items: list[dict[str, Any]]) -> list[Figure]:
        return [
            Figure(
                id="plot-perf",
                title="Performance ratio per batch",
                body="".join(perf_plots(items)),
                caption="Dots: candidate/baseline ratio with its CI; dashed red: the threshold.",
                absent="No perf_nonregression items in this report.",
            )
        ]

    def summaries(self, items: list[dict[str, Any]]) -> list[Summary]:
        return []


RENDER = PerfNonRegressionRender()
