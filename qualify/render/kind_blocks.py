"""Ask every registered gate kind's render hook for its figures and summaries of one report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qualify.registry import GateKindRegistry, default_registry
from qualify.render import view
from qualify.render.blocks import Figure, KindRender, Summary


@dataclass(frozen=True)
class KindBlocks:
    figures: list[Figure]
    summaries: list[Summary]

    def replaced_tables(self) -> list[str]:
        """Item-table titles a summary with rows shows already (an empty summary replaces nothing)."""
        return [r for s in self.summaries if s.rows for r in s.replaces]


def kind_blocks(report: dict[str, Any], registry: GateKindRegistry | None = None) -> KindBlocks:
    """Figures and summaries of every registered kind with a render hook, in kind-name order.

    Every hook is asked, with or without items, so the page says "no items of this kind" rather than
    silently leaving a figure out.
    """
    registry = default_registry() if registry is None else registry
    figures: list[Figure] = []
    summaries: list[Summary] = []
    for spec in registry:
        hook: KindRender | None = spec.load_render()
        if hook is None:
            continue
        items = view.items_of_kind(report, spec.name)
        figures += hook.figures(items)
        summaries += hook.summaries(items)
    return KindBlocks(figures, summaries)
