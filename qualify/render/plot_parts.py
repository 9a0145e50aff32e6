"""Pieces the kinds' SVG plots share: axes, labels for items that did not run, decision colours.

An item that did not run gets an explicit "not run" mark in its slot and never a coloured bar: a
skipped measurement must not look like a good one.
"""

from __future__ import annotations

from typing import Any

from qualify.render.svg import Canvas, Scale
from qualify.render.view import item_status


def not_run_label(item: dict[str, Any]) -> str:
    status = item_status(item)
    return "error" if status == "error" else "not run" if status in ("skipped", "deselected") else "no data"


def short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def y_axis(c: Canvas, scale: Scale, ticks: list[float], x0: float, x1: float, fmt: str = "{:g}") -> None:
    for t in ticks:
        y = scale(t)
        c.line(x0, y, x1, y, "grid")
        c.text(x0 - 6, y + 4, fmt.format(t), "tick", anchor="end")


def decision_class(decision: str, status: str) -> str:
    if status not in ("passed", "failed"):
        return "mark-none"
    return {"pass": "mark-pass", "fail": "mark-fail", "inconclusive": "mark-inconclusive"}.get(
        decision, "mark-pass" if status == "passed" else "mark-fail"
    )
