"""How `loss_increase` items appear on the sign-off page: the loss-increase plot and the raw payload table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qualify.kinds.loss_increase.measurements import LossIncreaseMeasurements, bound_check_name
from qualify.quant.layouts import Layout, layout_order
from qualify.render.blocks import Figure, Summary, check_threshold, read_measurements
from qualify.render.fmt import as_float, as_text, byte_size, number
from qualify.render.plot_parts import not_run_label, short, y_axis
from qualify.render.svg import Canvas, Scale, nice_ticks
from qualify.render.view import item_status

SELECTED_LAYOUT = Layout.K16_V8.value
REFERENCE_LAYOUT = Layout.K16_V16.value
PAYLOAD_HEADERS = ("model", "layout", "bytes / token", "context bytes", "cartridge bytes", "capacity ratio")


def layout_class(layout: str) -> str:
    """CSS class of a layout's bar: the colour names the layout (selected green, FP8 keys red), not its result."""
    if layout == SELECTED_LAYOUT:
        return "bar-selected"
    try:
        parsed = Layout(layout)
    except ValueError:
        return "bar-other"
    if parsed.keys_fp8:
        return "bar-keyquant"
    return "bar-reference" if layout == REFERENCE_LAYOUT else "bar-other"


@dataclass(frozen=True)
class _LossBar:
    layout: str
    value: float | None
    low: float | None
    high: float | None
    limit: float | None
    control: bool


def _pct(value: float | None) -> float | None:
    f = as_float(value)
    return None if f is None else f * 100


def _loss_bars(item: dict[str, Any], m: LossIncreaseMeasurements) -> list[_LossBar]:
    bars = [
        _LossBar(
            layout=row.layout,
            value=_pct(row.rel_increase),
            low=_pct(row.ci_low),
            high=_pct(row.ci_high),
            limit=_pct(check_threshold(item, bound_check_name(row.layout))),
            control=row.positive_control,
        )
        for row in m.layouts
    ]
    return sorted(bars, key=lambda b: layout_order(b.layout))


def loss_increase_plot(items: list[dict[str, Any]]) -> str:
    """Relative eval-loss increase (%) per layout with its CI, one group per workload and checkpoint."""
    if not items:
        return ""
    groups = []
    for item in items:
        m = read_measurements(LossIncreaseMeasurements, item) if item_status(item) in ("passed", "failed") else None
        groups.append((item, m, _loss_bars(item, m) if m is not None else []))
    values = [0.0]
    for _, _, bars in groups:
        for b in bars:
            values += [v for v in (b.value, b.low, b.high, b.limit) if v is not None]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 1.0
    lo, hi = (lo - pad if lo < 0 else 0.0), hi + pad

    bar_w, gap, left, top, plot_h = 44, 30, 64, 34, 240
    widths = [max(len(bars), 1) * bar_w + gap for _, _, bars in groups]
    width = max(left + sum(widths) + 20, 600)
    c = Canvas(width, top + plot_h + 84, "Eval-loss increase vs BF16 per layout and checkpoint (%)")
    scale = Scale(lo, hi, top + plot_h, top)
    y_axis(c, scale, nice_ticks(lo, hi), left, width - 10, "{:g} %")
    c.line(left, scale(0), width - 10, scale(0), "axis")
    c.text(12, top + plot_h / 2, "loss increase (%)", "label", anchor="middle", rotate=-90)

    x = left + gap / 2
    for (item, m, bars), w in zip(groups, widths, strict=True):
        checkpoint = (m.checkpoint if m else "") or as_text(item.get("name"))
        status = item_status(item)
        if not bars:
            c.rect(
                x, top, w - gap, plot_h, "not-run-area", f"{as_text(item.get('name'))}: {as_text(item.get('reason'))}"
            )
            c.text(x + (w - gap) / 2, top + plot_h / 2, not_run_label(item), "not-run", anchor="middle")
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
        c.text(cx, top + plot_h + 44, short(checkpoint, chars), "group", anchor="middle")
        c.text(cx, top + plot_h + 58, short(m.workload if m else "", chars), "tick", anchor="middle")
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


def payload_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    """The raw-payload/capacity rows of every item, each distinct row once, as text cells.

    The same model and layouts repeat across checkpoints and workloads; the table exists to show the byte
    arithmetic, so repeating identical rows would only bury it.
    """
    seen: set[tuple[str, str]] = set()
    rows: list[tuple[str, str, list[str]]] = []
    for item in items:
        m = read_measurements(LossIncreaseMeasurements, item)
        for p in m.payload if m else []:
            cells = [
                m.model_id,
                p.layout,
                number(p.bytes_per_token),
                f"{number(p.context_bytes)} ({byte_size(p.context_bytes)})",
                f"{number(p.cartridge_bytes)} ({byte_size(p.cartridge_bytes)})",
                number(p.capacity_ratio),
            ]
            key = (m.model_id, "\x1f".join(cells))
            if key not in seen:
                seen.add(key)
                rows.append((m.model_id, p.layout, cells))
    return [cells for _, _, cells in sorted(rows, key=lambda r: (r[0], layout_order(r[1])))]


class LossIncreaseRender:
    def figures(self, items: list[dict[str, Any]]) -> list[Figure]:
        return [
            Figure(
                id="plot-loss",
                title="Eval-loss increase per layout and checkpoint",
                body=loss_increase_plot(items),
                caption=(
                    "Bars: relative loss increase against BF16 with its confidence interval; dashed red: each "
                    "layout's bound. K16/V8 (the selected layout) is green and key-quantizing layouts red whatever "
                    "they measured."
                ),
                absent="No loss_increase items in this report.",
            )
        ]

    def summaries(self, items: list[dict[str, Any]]) -> list[Summary]:
        return [
            Summary(
                id="payload",
                title="Raw payload and capacity",
                headers=PAYLOAD_HEADERS,
                rows=payload_rows(items),
                absent="No loss_increase payload rows in this report.",
                numeric=(2, 3, 4, 5),
                replaces=("payload",),
            )
        ]


RENDER = LossIncreaseRender()
