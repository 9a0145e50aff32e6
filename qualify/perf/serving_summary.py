"""The equal-memory serving table (issue 16, item 7): per stream, clients and layout, the stream metrics pooled
over every repetition of every process, what the layout admitted, and its ratios against BF16 prefix caching.

Read by `qualify serve-summary` beside the engine table (`qualify.perf.engine_summary`) from the same folder of
worker results (``serving-<layout>.p<process>.json``, written by `qualify.perf.serving_set`). The CIs are those of
the engine table: a Welch t interval over the processes' medians where both sides ran 2 or more processes.
"""

from __future__ import annotations

import statistics
from typing import Any

from qualify.perf.engine_summary import ORDER, format_ratio, ratio_ci
from qualify.perf.spec import WorkResult

REFERENCE = "bf16-prefix-cached"
# (metric, column) pooled as the median over every repetition of every process.
COLUMNS = (
    ("completed_requests_per_s", "req/s"),
    ("stream_output_tokens_per_s", "output tok/s"),
    ("itl_p50_ms", "ITL p50 ms"),
    ("itl_p95_ms", "ITL p95 ms"),
    ("stream_ttft_p50_ms", "TTFT p50 ms"),
    ("stream_ttft_p95_ms", "TTFT p95 ms"),
)
RATIOS = ("completed_requests_per_s", "itl_p95_ms", "stream_ttft_p95_ms")  # against the reference, with CIs


def _groups(runs: list[WorkResult], metric: str, key: tuple[int, int, str | None]) -> list[list[float]]:
    return [list(r.cell(metric, *key).samples) for r in runs]


def _pooled(rs: list[WorkResult], key: tuple[int, int, str | None], field: str) -> float:
    """The median over every timed stream of every process of a per-stream detail; NaN where the workers did not
    record it (results from before the scheduler probe)."""
    values = [x for r in rs for x in r.cell(COLUMNS[0][0], *key).detail.get(field, [])]
    return statistics.median(values) if values else float("nan")


def summarize(runs: dict[str, list[WorkResult]]) -> list[dict[str, Any]]:
    rows = []
    names = [n for n in ORDER if n in runs] + sorted(set(runs) - set(ORDER))
    keys = sorted({(c.batch, c.suffix, c.stream) for rs in runs.values() for r in rs for c in r.cells},
                  key=lambda k: (k[2] or "", k[0], k[1]))  # fmt: skip
    for key in keys:
        for name in names:
            rs = runs[name]
            try:
                groups = {m: _groups(rs, m, key) for m, _ in COLUMNS}
            except KeyError:
                continue
            d = rs[0].cell(COLUMNS[0][0], *key).detail
            row: dict[str, Any] = {
                "stream": key[2], "clients": key[0], "suffix": key[1], "layout": name, "processes": len(rs),
                "stream_label": d.get("stream", ""),
                **{m: statistics.median([x for g in groups[m] for x in g]) for m, _ in COLUMNS},
                "admitted_concurrency": d["admitted_concurrency"], "requests_that_fit": d["requests_that_fit"],
                "kv_capacity_tokens": d["kv_capacity_tokens"], "kv_tokens_per_request": d["kv_tokens_per_request"],
                "peak_in_engine": _pooled(rs, key, "peak_in_engine"),
                "scheduler_running_peak": _pooled(rs, key, "scheduler_running_peak"),
                "scheduler_running_mean": _pooled(rs, key, "scheduler_running_mean"),
            }  # fmt: skip
            if name != REFERENCE and REFERENCE in runs:
                for m in RATIOS:
                    row[f"{m}_vs_{REFERENCE}"] = ratio_ci(groups[m], _groups(runs[REFERENCE], m, key))
            rows.append(row)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    head = ["stream", "clients", "layout", "processes", *(c for _, c in COLUMNS)]
    head += [f"{c} vs {REFERENCE}" for m, c in COLUMNS if m in RATIOS]
    head += [
        "admitted (computed)",
        "running peak / mean (measured)",
        "peak in engine",
        "requests that fit",
        "KV capacity (tokens)",
        "KV tokens / request",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r["stream"] or "-", r["clients"], r["layout"], r["processes"]]
        cells += [f"{r[m]:.2f}" if m == "completed_requests_per_s" else f"{r[m]:.1f}" for m, _ in COLUMNS]
        cells += [format_ratio(r.get(f"{m}_vs_{REFERENCE}")) for m, _ in COLUMNS if m in RATIOS]
        running = f"{r['scheduler_running_peak']:.0f} / {r['scheduler_running_mean']:.1f}"
        cells += [r["admitted_concurrency"], running, f"{r['peak_in_engine']:.0f}", r["requests_that_fit"],
                  r["kv_capacity_tokens"], r["kv_tokens_per_request"]]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
