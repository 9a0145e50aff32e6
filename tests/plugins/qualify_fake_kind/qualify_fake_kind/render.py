"""How `compare` items appear on the sign-off page: one summary table of value against limit.

A render hook reads measurements through the kind's typed model and thresholds from the checks (the one
place a report keeps them), so a report whose measurements do not fit the model shows "no data", never a guess.
"""

from __future__ import annotations

from typing import Any

from qualify.render.blocks import Figure, Summary, check_threshold, read_measurements
from qualify.render.fmt import as_text, number
from qualify.render.view import item_status
from qualify_fake_kind import CompareMeasurements


class CompareRender:
    def figures(self, items: list[dict[str, Any]]) -> list[Figure]:
        return []

    def summaries(self, items: list[dict[str, Any]]) -> list[Summary]:
        rows = []
        for item in items:
            m = read_measurements(CompareMeasurements, item)
            limit = check_threshold(item, "value")
            rows.append(
                [
                    as_text(item.get("name")),
                    number(m.value) if m is not None else "no data",
                    number(limit) if limit is not None else "-",
                    item_status(item),
                ]
            )
        return [
            Summary(
                id="compare-values",
                title="compare: value against limit",
                headers=["item", "value", "limit", "status"],
                rows=rows,
                absent="No compare items in this report.",
                numeric=(1, 2),
            )
        ]


RENDER = CompareRender()
