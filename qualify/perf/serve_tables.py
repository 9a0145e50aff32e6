"""`qualify serve-summary`: the tables of a folder of engine-level worker results, the engine benchmark's
(`qualify.perf.engine_summary`) and the equal-memory serving streams' (`qualify.perf.serving_summary`), each where
the folder holds its runs."""

from __future__ import annotations

import json
from pathlib import Path

from qualify.perf import engine_summary, serving_summary


def summary_command(runs_dir: Path, out: Path | None = None) -> int:
    """Print the tables of RUNS_DIR's runs; with `out`, also write their rows as JSON (``{"engine": [...],
    "serving": [...]}``). SystemExit when the folder holds no run of either set."""
    engine = engine_summary.find_runs(runs_dir, "engine")
    serving = engine_summary.find_runs(runs_dir, "serving")
    if not engine and not serving:
        raise SystemExit(f"{runs_dir}: no <layout>.p<process>.json run files")
    rows = {"engine": engine_summary.summarize(engine), "serving": serving_summary.summarize(serving)}
    tables = []
    if engine:
        tables.append(engine_summary.render(rows["engine"]))
    if serving:
        tables.append(serving_summary.render(rows["serving"]))
    print("\n\n".join(tables))
    if out:
        out.write_text(json.dumps(rows, indent=1))
    return 0
