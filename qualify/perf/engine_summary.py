"""The four-layout table of the engine-level benchmark, with deltas against bf16-inject and global-fp8.

    qualify serve-summary RUNS_DIR [--out summary.json]

RUNS_DIR holds one ``<layout>.json`` per layout (`qualify.perf.engine_set` writes them when
``QUALIFY_ENGINE_RUNS_DIR`` is set). Per (batch, suffix): medians over repetitions of output tok/s, request/s,
TTFT p50 and p95, the KV capacity and admitted concurrency, and each layout's ratio against the two references
with a 95 % bootstrap CI (`qualify.stats.ratio.median_ratio_ci`).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from qualify.perf.spec import WorkResult
from qualify.serve.layouts import LAYOUTS
from qualify.stats.ratio import median_ratio_ci

REFERENCES = ("bf16-inject", "global-fp8")
ORDER = tuple(LAYOUTS)  # the serving layouts in their declared order


def load_runs(runs_dir: Path) -> dict[str, WorkResult]:
    runs = {}
    for path in sorted(runs_dir.glob("*.json")):
        result = WorkResult.model_validate_json(path.read_text())
        runs[result.implementation] = result
    if not runs:
        raise SystemExit(f"{runs_dir}: no <layout>.json run files")
    return runs


def _delta(cand: list[float], ref: list[float]) -> dict[str, float]:
    ci = median_ratio_ci(cand, ref, n_resamples=4000, seed=0)
    return {"ratio": ci.ratio, "low": ci.low, "high": ci.high}


def summarize(runs: dict[str, WorkResult]) -> list[dict[str, Any]]:
    rows = []
    names = [n for n in ORDER if n in runs] + sorted(set(runs) - set(ORDER))
    keys = sorted({(c.batch, c.suffix) for r in runs.values() for c in r.cells})
    for batch, suffix in keys:
        for name in names:
            r = runs[name]
            try:
                tok = r.cell("output_tokens_per_s", batch, suffix)
                ttft = r.cell("ttft_p50_ms", batch, suffix)
            except KeyError:
                continue
            d = tok.detail
            row: dict[str, Any] = {
                "batch": batch,
                "suffix": suffix,
                "layout": name,
                "output_tok_s": statistics.median(tok.samples),
                "requests_s": statistics.median(d["requests_per_s"]),
                "ttft_p50_ms": statistics.median(d["ttft_p50_ms"]),
                "ttft_p95_ms": statistics.median(d["ttft_p95_ms"]),
                "kv_capacity_tokens": d["kv_capacity_tokens"],
                "kv_tokens_per_request": d["kv_tokens_per_request"],
                # Requests whose pages fit in the KV cache at once, before max_num_seqs caps them.
                "requests_that_fit": d["kv_capacity_tokens"] // d["kv_tokens_per_request"],
                "admitted_concurrency": d["admitted_concurrency"],
                "device_memory_used_gib": round(r.gpu.get("device_memory_used_bytes", 0) / 1024**3, 1),
                "repetitions": len(tok.samples),
            }
            for ref in REFERENCES:
                if ref in runs and ref != name:
                    rt, rf = (
                        runs[ref].cell("output_tokens_per_s", batch, suffix),
                        runs[ref].cell("ttft_p50_ms", batch, suffix),
                    )
                    row[f"tok_s_vs_{ref}"] = _delta(tok.samples, rt.samples)
                    row[f"ttft_p50_vs_{ref}"] = _delta(ttft.samples, rf.samples)
            rows.append(row)
    return rows


def _pct(d: dict[str, float] | None) -> str:
    if not d:
        return "-"
    return f"{(d['ratio'] - 1) * 100:+.2f} % [{(d['low'] - 1) * 100:+.1f}, {(d['high'] - 1) * 100:+.1f}]"


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        "| batch | layout | tok/s | req/s | TTFT p50 ms | TTFT p95 ms | tok/s vs bf16-inject | TTFT p50 vs bf16-inject "
        "| tok/s vs global-fp8 | TTFT p50 vs global-fp8 | KV capacity (tokens) | KV tokens / request "
        "| requests that fit | admitted |"
    )
    lines = [head, "|" + " --- |" * 14]
    for r in rows:
        deltas = [_pct(r.get(f"{m}_vs_{ref}")) for ref in REFERENCES for m in ("tok_s", "ttft_p50")]
        cells = [
            r["batch"], r["layout"], f"{r['output_tok_s']:.1f}", f"{r['requests_s']:.2f}", f"{r['ttft_p50_ms']:.1f}",
            f"{r['ttft_p95_ms']:.1f}", *deltas, r["kv_capacity_tokens"], r["kv_tokens_per_request"],
            r["requests_that_fit"], r["admitted_concurrency"],
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def summary_command(runs_dir: Path, out: Path | None = None) -> int:
    """`qualify serve-summary`: print the table of RUNS_DIR's runs; with `out`, also write its rows as JSON."""
    rows = summarize(load_runs(runs_dir))
    print(render(rows))
    if out:
        out.write_text(json.dumps(rows, indent=1))
    return 0
