"""The canonical form a gate kind renders into, and the hook it implements.

The page code (`render.html`, `render.markdown`) asks every registered kind's hook for figures and summary
tables and draws those; it never names a kind. A hook reads its items' measurements through the kind's
typed model (`read_measurements`) and its thresholds from the checks (`check_threshold`), never from
loose dictionary keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from qualify.render.fmt import as_float, as_list, as_text

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Figure:
    """One figure of the Plots section. `body` is trusted HTML (SVG or a table) built from escaped values."""

    id: str
    title: str
    body: str
    caption: str
    absent: str  # shown instead when `body` is empty: the report has no item this figure could draw


@dataclass(frozen=True)
class Summary:
    """A table a kind summarises over all its items, rendered in HTML and Markdown alike.

    Cells are plain text (each renderer escapes them). `replaces` names item-table titles (matched
    case-insensitively as substrings) that this summary shows already, so gate sections leave them out.
    """

    id: str
    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    absent: str
    numeric: Sequence[int] = ()
    replaces: Sequence[str] = field(default_factory=tuple)


class KindRender(Protocol):
    """A gate kind's render hook; `items` are the report's items of that kind (untrusted dictionaries)."""

    def figures(self, items: list[dict[str, Any]]) -> list[Figure]: ...

    def summaries(self, items: list[dict[str, Any]]) -> list[Summary]: ...


def read_measurements(model: type[M], item: dict[str, Any]) -> M | None:
    """The item's measurements as `model`, or None when it has none or they do not fit the model.

    A report is data from elsewhere: a tampered or foreign one still renders (its schema errors are shown
    at the top of the page), so a measurement that does not validate is drawn as "no data", never guessed.
    """
    raw = item.get("measurements")
    if not isinstance(raw, dict) or not raw:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def checks(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in as_list(item.get("checks")) if isinstance(c, dict)]


def check_threshold(item: dict[str, Any], name: str) -> float | None:
    """The threshold of the item's check called `name`: the one place a report keeps a threshold."""
    for c in checks(item):
        if as_text(c.get("name")) == name:
            return as_float(c.get("threshold"))
    return None
