"""Turning untrusted report values into numbers and short strings; shared by the HTML and Markdown renderers."""

from __future__ import annotations

import json
import math
from typing import Any

from qualify.results import FRACTION_UNITS

MISSING = "–"


def as_float(value: Any) -> float | None:
    """A finite number, or None: the report is data from elsewhere and any field may be absent or odd."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def as_text(value: Any, limit: int = 2000) -> str:
    """Any value as one bounded string (not escaped: escaping is the renderer's job)."""
    if value is None:
        return ""
    if isinstance(value, str):
        s = value
    elif isinstance(value, bool | int | float):
        s = str(value)
    else:
        s = json.dumps(value, sort_keys=True, default=str)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def number(value: Any, digits: int = 4) -> str:
    """Compact fixed-significance form of a number; non-numbers are shown as text."""
    if value is None:
        return MISSING
    if isinstance(value, bool) or not isinstance(value, int | float):
        return as_text(value, 200)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:.{digits}g}"


def percent(value: Any, digits: int = 3) -> str:
    f = as_float(value)
    return MISSING if f is None else f"{f * 100:.{digits}g} %"


def ci(low: Any, high: Any, digits: int = 4, unit: str = "") -> str:
    if as_float(low) is None and as_float(high) is None:
        return MISSING
    if unit in FRACTION_UNITS:
        return f"[{scaled(low, unit)}, {scaled(high, unit)}] %"
    return f"[{number(low, digits)}, {number(high, digits)}]"


def scaled(value: Any, unit: str, digits: int = 4) -> str:
    """A check value in the unit it is labelled with: fractions are shown as percentages (the label is then %)."""
    f = as_float(value)
    if unit in FRACTION_UNITS and f is not None:
        return f"{f * 100:.{digits}g}"
    return number(value, digits)


def with_unit(value: Any, unit: Any) -> str:
    """A check value and its label, where the label always matches the number shown (0.0013 fraction: 0.13 %)."""
    u = as_text(unit)
    label = "%" if u in FRACTION_UNITS else u
    return f"{scaled(value, u)} {label}".strip()


def byte_size(value: Any) -> str:
    f = as_float(value)
    if f is None:
        return MISSING
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(f) < 1024 or unit == "GiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.2f} {unit}"
        f /= 1024
    return MISSING  # unreachable: the loop returns at GiB
