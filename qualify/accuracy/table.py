"""The "ordinary benchmarks" table: what a standard accuracy benchmark says about each KV layout."""

from __future__ import annotations

from collections.abc import Mapping

from qualify.results import Table

TITLE = "Ordinary benchmarks"


def _points(x: float) -> float:
    return round(100.0 * x, 3)


def ordinary_benchmarks_table(
    *,
    task_id: str,
    metric: str,
    n: int,
    reference_layout: str,
    reference_score: float,
    layout_scores: Mapping[str, float],
    min_resolvable_drop: float,
    underpowered: bool,
) -> Table:
    """One row per task: reference score, each layout's score and its delta (points), and what n can resolve.

    The last column is what reviewers need next to the deltas: a delta smaller than the resolvable drop is not
    evidence of anything, in either direction.
    """
    columns = ["task", "metric", "n", f"{reference_layout} (reference) %"]
    row: list[object] = [task_id, metric, n, _points(reference_score)]
    for layout, score in layout_scores.items():
        columns += [f"{layout} %", f"Δ {layout} (points)"]
        row += [_points(score), round(_points(score) - _points(reference_score), 3)]
    columns += ["resolvable drop (points)", "power"]
    row += [_points(min_resolvable_drop), "underpowered (smoke)" if underpowered else "powered"]
    return Table(title=TITLE, columns=columns, rows=[row])
