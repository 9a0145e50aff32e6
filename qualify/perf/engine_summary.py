"""The engine benchmark's layout table, with ratios against the baselines users run (`qualify serve-summary
RUNS_DIR [--out summary.json]`, beside the serving streams' table: `qualify.perf.serve_tables`).

RUNS_DIR holds ``<layout>.p<process>.json`` files (`qualify.perf.engine_set` writes them when
``QUALIFY_ENGINE_RUNS_DIR`` is set; a file named ``<layout>.json`` is read as process 0). Per (batch, suffix)
and layout: medians over every repetition of every process of output tok/s, requests/s, TTFT p50 and p95, the
KV capacity, the tokens a request holds, the requests that fit and the admitted concurrency; and each layout's
ratio against each reference (the prefix-cached BF16 and FP8 layouts, else per-request injection) with a 95 %
CI: a Welch t interval over the processes' medians where both sides ran 2 or more processes
(`qualify.stats.ratio.process_t_median_ratio_ci`), the bootstrap over repetitions otherwise (said in the row).
Where the runs recorded it, each process's median host-speed probe (`qualify.serve.host_speed`) and TTFT p50,
so that a slow process is seen as the host's and not the layout's.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from qualify.perf.spec import WorkResult
from qualify.serve.layouts import LAYOUTS
from qualify.stats.ratio import process_t_median_ratio_ci

REFERENCES = ("bf16-prefix-cached", "fp8-prefix-cached", "bf16-inject")
SHOWN_REFERENCES = 2  # the first two references present in a run get columns
ORDER = tuple(LAYOUTS)  # the serving layouts in their declared order
_RUN_FILE = re.compile(r"^(?P<layout>.+?)(?:\.p(?P<process>\d+))?\.json$")


def load_runs(runs_dir: Path, implementation_set: str = "engine") -> dict[str, list[WorkResult]]:
    """Each layout's runs of one implementation set (the engine and serving sets share the folder), in process
    order; SystemExit when the folder holds none."""
    runs = find_runs(runs_dir, implementation_set)
    if not runs:
        raise SystemExit(f"{runs_dir}: no <layout>.p<process>.json run files of the {implementation_set} set")
    return runs


def find_runs(runs_dir: Path, implementation_set: str) -> dict[str, list[WorkResult]]:
    runs: dict[str, list[WorkResult]] = {}
    for path in sorted(runs_dir.glob("*.json")):
        if not _RUN_FILE.match(path.name):
            continue
        result = WorkResult.model_validate_json(path.read_text())
        if result.implementation_set == implementation_set:
            runs.setdefault(result.implementation, []).append(result)
    return {name: sorted(rs, key=lambda r: r.process) for name, rs in runs.items()}


def _groups(runs: list[WorkResult], metric: str, batch: int, suffix: int) -> list[list[float]]:
    return [list(r.cell(metric, batch, suffix).samples) for r in runs]


def ratio_ci(cand: list[list[float]], ref: list[list[float]]) -> dict[str, Any]:
    """The median ratio cand / ref with its 95 % CI over processes (bootstrap over repetitions with one each)."""
    ci = process_t_median_ratio_ci(cand, ref, n_resamples=4000, seed=0)
    return {"ratio": ci.ratio, "low": ci.low, "high": ci.high, "method": ci.method}


def references(runs: dict[str, list[WorkResult]]) -> list[str]:
    return [r for r in REFERENCES if r in runs][:SHOWN_REFERENCES]


def summarize(runs: dict[str, list[WorkResult]]) -> list[dict[str, Any]]:
    rows = []
    refs = references(runs)
    names = [n for n in ORDER if n in runs] + sorted(set(runs) - set(ORDER))
    keys = sorted({(c.batch, c.suffix) for rs in runs.values() for r in rs for c in r.cells})
    for batch, suffix in keys:
        for name in names:
            rs = runs[name]
            try:
                tok = _groups(rs, "output_tokens_per_s", batch, suffix)
                ttft = _groups(rs, "ttft_p50_ms", batch, suffix)
            except KeyError:
                continue
            cells = [r.cell("output_tokens_per_s", batch, suffix) for r in rs]
            d = cells[0].detail

            def pooled(field: str, cells: list = cells) -> float:
                return statistics.median([x for c in cells for x in c.detail[field]])

            row: dict[str, Any] = {
                "batch": batch,
                "suffix": suffix,
                "layout": name,
                "processes": len(rs),
                "method": cells[0].method,
                "output_tok_s": statistics.median([x for g in tok for x in g]),
                "requests_s": pooled("requests_per_s"),
                "ttft_p50_ms": pooled("ttft_p50_ms"),
                "ttft_p95_ms": pooled("ttft_p95_ms"),
                "kv_capacity_tokens": d["kv_capacity_tokens"],
                "kv_tokens_per_request": d["kv_tokens_per_request"],
                # Requests whose pages fit in the KV cache at once, before max_num_seqs caps them.
                "requests_that_fit": d.get("requests_that_fit", d["kv_capacity_tokens"] // d["kv_tokens_per_request"]),
                "admitted_concurrency": d["admitted_concurrency"],
                "device_memory_used_gib": round(rs[0].gpu.get("device_memory_used_bytes", 0) / 1024**3, 1),
                "engine_startup_s": [round(float(r.gpu.get("engine_startup_s", 0.0)), 1) for r in rs],
                "repetitions": sum(len(g) for g in tok),
                "per_process": [_process_facts(c) for c in cells],
            }
            for ref in refs:
                if ref != name:
                    row[f"tok_s_vs_{ref}"] = ratio_ci(tok, _groups(runs[ref], "output_tokens_per_s", batch, suffix))
                    row[f"ttft_p50_vs_{ref}"] = ratio_ci(ttft, _groups(runs[ref], "ttft_p50_ms", batch, suffix))
            rows.append(row)
    return rows


def _process_facts(cell: Any) -> dict[str, float | None]:
    """One process's median TTFT p50 and host-speed probe at this point (None where it recorded no probe)."""
    probes = cell.detail.get("host_probe_us")
    return {
        "ttft_p50_ms": statistics.median(cell.detail["ttft_p50_ms"]),
        "host_probe_us": statistics.median(probes) if probes else None,
    }


def _per_process(r: dict[str, Any]) -> str:
    parts = []
    for p in r.get("per_process", []):
        host = "-" if p["host_probe_us"] is None else f"{p['host_probe_us']:.0f}"
        parts.append(f"{p['ttft_p50_ms']:.1f}/{host}")
    return " ".join(parts) or "-"


def format_ratio(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    flat = "" if d["method"] == "process-t" else f" ({d['method']})"
    return f"{(d['ratio'] - 1) * 100:+.1f} % [{(d['low'] - 1) * 100:+.1f}, {(d['high'] - 1) * 100:+.1f}]{flat}"


def render(rows: list[dict[str, Any]]) -> str:
    refs = sorted({k.split("_vs_", 1)[1] for r in rows for k in r if "_vs_" in k}, key=REFERENCES.index)
    head = ["batch", "layout", "processes", "tok/s", "req/s", "TTFT p50 ms", "TTFT p95 ms"]
    head += [f"{m} vs {ref}" for ref in refs for m in ("tok/s", "TTFT p50")]
    head += ["KV capacity (tokens)", "KV tokens / request", "requests that fit", "admitted"]
    head += ["per process: TTFT p50 ms / host probe us"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        deltas = [format_ratio(r.get(f"{m}_vs_{ref}")) for ref in refs for m in ("tok_s", "ttft_p50")]
        cells = [
            r["batch"], r["layout"], r["processes"], f"{r['output_tok_s']:.1f}", f"{r['requests_s']:.2f}",
            f"{r['ttft_p50_ms']:.1f}", f"{r['ttft_p95_ms']:.1f}", *deltas, r["kv_capacity_tokens"],
            r["kv_tokens_per_request"], r["requests_that_fit"], r["admitted_concurrency"], _per_process(r),
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
