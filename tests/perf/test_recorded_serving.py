"""The recorded equal-memory serving run (results/2026-12-02-serving-h200): its README's table is what
`qualify serve-summary` makes of the worker results beside it, and the run's decisions are in its signed report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recorded import RESULTS, recorded

from qualify.perf.engine_summary import find_runs
from qualify.perf.serving_summary import summarize

RUN = "2026-12-02-serving-h200"
CAND, REF = "shared-k16v8-live-fp8", "bf16-prefix-cached"


def _row(rows: list[dict], stream: str, layout: str) -> dict:
    return next(r for r in rows if r["stream"] == stream and r["layout"] == layout)


def test_the_readme_table_is_what_the_worker_results_give() -> None:
    rows = summarize(find_runs(RESULTS / RUN / "engine_runs", "serving"))
    closed, poisson = _row(rows, "closed", CAND), _row(rows, "poisson24", CAND)
    assert closed["processes"] == _row(rows, "closed", REF)["processes"] == 5
    assert _row(rows, "closed", REF)["completed_requests_per_s"] == pytest.approx(52.93, abs=0.005)
    assert closed["completed_requests_per_s"] == pytest.approx(114.18, abs=0.005)
    ratio = closed[f"completed_requests_per_s_vs_{REF}"]
    assert (ratio["ratio"], ratio["low"], ratio["high"]) == pytest.approx((2.157, 2.014, 2.311), abs=5e-4)
    itl = poisson[f"itl_p95_ms_vs_{REF}"]
    assert (itl["low"], itl["high"]) == pytest.approx((0.667, 0.906), abs=5e-4)
    # Measured admission: both layouts' schedulers ran every client at the peak, the shared path more on average.
    assert closed["scheduler_running_peak"] == _row(rows, "closed", REF)["scheduler_running_peak"] == 256
    assert closed["scheduler_running_mean"] == pytest.approx(189.4, abs=0.05)
    assert _row(rows, "closed", REF)["scheduler_running_mean"] == pytest.approx(152.4, abs=0.05)
    assert (closed["requests_that_fit"], _row(rows, "closed", REF)["requests_that_fit"]) == (202, 137)


def test_the_signed_report_decides_the_goals_as_the_readme_says(tmp_path: Path) -> None:
    report = json.loads(recorded(f"{RUN}/engine-graphs-h200.json", tmp_path).read_text())
    outcome = {it["name"]: [c["outcome"] for c in it["checks"]] for it in report["items"] if "serving-" in it["name"]}
    assert outcome == {
        "serving-closed-loop-vs-prefix-cached[completed_requests_per_s-256-64-closed]": ["pass"],
        "serving-closed-loop-vs-prefix-cached[itl_p95_ms-256-64-closed]": ["pass"],
        "serving-poisson-vs-prefix-cached[itl_p95_ms-256-64-poisson24]": ["pass"],
        "serving-poisson-vs-prefix-cached[stream_ttft_p95_ms-256-64-poisson24]": ["inconclusive"],
    }
    assert report["coverage"]["unqualified"] == [] and report["verdict"] == "FAIL"
