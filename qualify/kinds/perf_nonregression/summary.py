"""The perf comparison table of a report, and the run-to-run check of two reports.

qualify perf-summary REPORT.json                 # the table
qualify perf-summary RUN1.json RUN2.json         # both, then: is each run's ratio inside the
                                                 # other's CI? (exit 1 when some are not)

Reads plain report JSON of any report version (the threshold is read from the item's check, where
every version records it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.failure import format_table
from qualify.kinds.perf_nonregression.render import threshold

COLUMNS = [
    "item", "status", "candidate", "baseline", "cand median", "base median", "ratio", "CI", "CI method",
    "procs x reps", "thr", "decision",
]  # fmt: skip


def _g(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, int | float) else "-"


def layout(m: dict[str, Any], side: str) -> str:
    """'3x5' for a side measured in 3 processes of 5 repetitions; '1x5' for a report without processes."""
    groups = m.get(f"{side}_process_samples")
    if not isinstance(groups, list) or not groups:
        flat = m.get(f"{side}_samples")
        groups = [flat] if isinstance(flat, list) and flat else []
    if not groups:
        return "-"
    reps = sorted({len(g) for g in groups})
    return f"{len(groups)}x{reps[0]}" + (f"-{reps[-1]}" if len(reps) > 1 else "")


def ci_label(m: dict[str, Any]) -> str:
    """How the CI was taken, short: 't df 3.2' (process-level Welch t), '2-level boot', 'flat boot'; a fallback
    from process-t is marked with '*' (its reason is in the item's statistic and `ci_fallback`)."""
    method = str(m.get("ci_method") or "")
    df = m.get("ci_df")
    if method == "process-t":
        label = f"t df {df:.2g}" if isinstance(df, int | float) else "t"
    elif method.startswith("two-level"):
        label = "2-level boot"
    elif method.startswith("flat"):
        label = "flat boot"
    else:
        return "-"  # a report written before the method was recorded
    return label + ("*" if m.get("ci_fallback") else "")


def perf_items(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in report.get("items", []) if i.get("kind") == "perf_nonregression"]


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for item in perf_items(report):
        m = item.get("measurements") or {}
        if "ratio" not in m:
            rows.append([item["name"], item["status"], *(["-"] * 9), (item.get("reason") or "")[:60]])
            continue
        op = ">=" if m.get("direction") == "higher" else "<="
        rows.append(
            [
                item["name"],
                item["status"],
                str(m.get("candidate")),
                str(m.get("baseline")),
                f"{_g(m.get('candidate_median'))} {m.get('unit', '')}",
                f"{_g(m.get('baseline_median'))} {m.get('unit', '')}",
                _g(m.get("ratio")),
                f"[{_g(m.get('ci_low'))}, {_g(m.get('ci_high'))}]",
                ci_label(m),
                f"{layout(m, 'candidate')} / {layout(m, 'baseline')}",
                f"{op} {_g(threshold(item))}",
                str(m.get("decision")),
            ]
        )
    return rows


@dataclass(frozen=True)
class RunToRun:
    item: str
    ratio_a: float
    ci_a: tuple[float, float]
    ratio_b: float
    ci_b: tuple[float, float]

    @property
    def a_in_b(self) -> bool:
        return self.ci_b[0] <= self.ratio_a <= self.ci_b[1]

    @property
    def b_in_a(self) -> bool:
        return self.ci_a[0] <= self.ratio_b <= self.ci_a[1]

    @property
    def consistent(self) -> bool:
        return self.a_in_b and self.b_in_a


def run_to_run(a: dict[str, Any], b: dict[str, Any]) -> list[RunToRun]:
    """Items measured in both runs, matched by name (release items are skipped: their baseline differs)."""
    measured_b = {i["name"]: i["measurements"] for i in perf_items(b) if "ratio" in (i.get("measurements") or {})}
    out = []
    for item in perf_items(a):
        ma = item.get("measurements") or {}
        mb = measured_b.get(item["name"])
        if "ratio" not in ma or mb is None or str(ma.get("baseline", "")).startswith("release"):
            continue
        out.append(
            RunToRun(
                item=item["name"],
                ratio_a=ma["ratio"],
                ci_a=(ma["ci_low"], ma["ci_high"]),
                ratio_b=mb["ratio"],
                ci_b=(mb["ci_low"], mb["ci_high"]),
            )
        )
    return out


def run_to_run_rows(pairs: Sequence[RunToRun]) -> list[list[str]]:
    return [
        [
            p.item,
            _g(p.ratio_a),
            f"[{_g(p.ci_a[0])}, {_g(p.ci_a[1])}]",
            _g(p.ratio_b),
            f"[{_g(p.ci_b[0])}, {_g(p.ci_b[1])}]",
            "yes" if p.a_in_b else "NO",
            "yes" if p.b_in_a else "NO",
        ]
        for p in pairs
    ]


def summarize(paths: Sequence[Path]) -> int:
    """Print the table of each report (one or two) and, for two, the run-to-run check; the exit status."""
    loaded = [json.loads(p.read_text()) for p in paths]
    for path, report in zip(paths, loaded, strict=True):
        print(f"\n{path}  verdict {report.get('verdict')}")
        print(format_table(COLUMNS, table_rows(report)))
    if len(loaded) == 1:
        return 0
    pairs = run_to_run(*loaded)
    print("\nrun-to-run: is each run's ratio inside the other run's CI?")
    cols = ["item", "ratio 1", "CI 1", "ratio 2", "CI 2", "r1 in CI2", "r2 in CI1"]
    print(format_table(cols, run_to_run_rows(pairs)))
    bad = [p.item for p in pairs if not p.consistent]
    print(f"{len(pairs) - len(bad)}/{len(pairs)} items consistent" + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad or not pairs else 0
