"""A few inline-SVG drawing primitives: every string that reaches the markup goes through html.escape."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape


@dataclass(frozen=True)
class Scale:
    """Linear map from a data interval onto a pixel interval, clamped so outliers stay on the canvas."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.hi - self.lo or 1.0
        t = min(max((value - self.lo) / span, 0.0), 1.0)
        return self.start + t * (self.end - self.start)

    def contains(self, value: float) -> bool:
        return self.lo <= value <= self.hi


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = step * math.ceil(lo / step - 1e-9)
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def _f(v: float) -> str:
    return f"{v:.1f}"


@dataclass
class Canvas:
    width: int
    height: int
    title: str
    parts: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, cls: str, tip: str = "") -> None:
        self.parts.append(
            f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(max(w, 0.0))}" height="{_f(max(h, 0.0))}" '
            f'class="{escape(cls)}">{_tip(tip)}</rect>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, cls: str) -> None:
        self.parts.append(f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" class="{escape(cls)}"/>')

    def circle(self, x: float, y: float, r: float, cls: str, tip: str = "") -> None:
        self.parts.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{_f(r)}" class="{escape(cls)}">{_tip(tip)}</circle>')

    def text(self, x: float, y: float, s: str, cls: str = "", anchor: str = "start", rotate: float = 0) -> None:
        transform = f' transform="rotate({rotate:g} {_f(x)} {_f(y)})"' if rotate else ""
        self.parts.append(
            f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{escape(anchor)}" class="{escape(cls)}"{transform}>'
            f"{escape(s)}</text>"
        )

    def error_bar_v(self, x: float, y_low: float, y_high: float, cls: str = "ci") -> None:
        self.line(x, y_low, x, y_high, cls)
        self.line(x - 4, y_low, x + 4, y_low, cls)
        self.line(x - 4, y_high, x + 4, y_high, cls)

    def error_bar_h(self, y: float, x_low: float, x_high: float, cls: str = "ci") -> None:
        self.line(x_low, y, x_high, y, cls)
        self.line(x_low, y - 4, x_low, y + 4, cls)
        self.line(x_high, y - 4, x_high, y + 4, cls)

    def to_svg(self) -> str:
        return (
            f'<svg viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img" aria-label="{escape(self.title)}">'
            f"<title>{escape(self.title)}</title>{''.join(self.parts)}</svg>"
        )


def _tip(tip: str) -> str:
    return f"<title>{escape(tip)}</title>" if tip else ""
