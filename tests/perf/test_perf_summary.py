"""`qualify perf-summary`: the comparison table and the run-to-run check of two reports, on reports
written by the process-level comparison and on one written before processes were recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from _seeding import seeded_rng

from qualify.cli import main
from qualify.kinds.perf_nonregression.summary import ci_label, run_to_run, table_rows
from qualify.perf.compare import CellKey, Side, compare_cell
from qualify.perf.metrics import metric

TOK = metric("decode_tokens_per_s")


def measured(rng: np.random.Generator, ratio: float, drift: float = 0.01) -> dict[str, Any]:
    def side(name: str, centre: float) -> Side:
        groups = [list(centre * (1 + drift * rng.standard_normal()) * (1 + 0.002 * rng.standard_normal(5)))
                  for _ in range(3)]  # fmt: skip
        return Side(name=name, groups=groups)

    cell = compare_cell(
        CellKey(TOK, 16, 128), side("fused", 100 * ratio), side("inject", 100), 1.0,
        confidence=0.95, n_resamples=2000, seed=int(rng.integers(1 << 31)), strict=False,
    )  # fmt: skip
    return cell.measurements


def report(items: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "verdict": "PASS",
        "items": [
            {"name": k, "kind": "perf_nonregression", "status": "passed", "measurements": m} for k, m in items.items()
        ],
    }


def test_run_to_run_reads_the_process_level_cis_and_flags_a_moved_ratio(tmp_path: Path) -> None:
    rng = seeded_rng()
    first = measured(rng, 1.5)
    same = dict(first)  # the same cell, the same numbers
    moved = dict(first, ratio=first["ci_high"] * 1.05)  # run 2's ratio outside run 1's CI
    pairs = run_to_run(report({"a": first, "b": first}), report({"a": same, "b": moved}))
    assert [(p.item, p.consistent) for p in pairs] == [("a", True), ("b", False)]
    assert pairs[1].a_in_b and not pairs[1].b_in_a
    paths = []
    for name, r in (("r1", report({"a": first})), ("r2", report({"a": same}))):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(r))
    assert main(["perf-summary", *(str(p) for p in paths)]) == 0
    (tmp_path / "r3.json").write_text(json.dumps(report({"a": moved})))
    assert main(["perf-summary", str(paths[0]), str(tmp_path / "r3.json")]) == 1


def test_the_table_shows_processes_x_repetitions_also_for_an_old_report() -> None:
    m = measured(seeded_rng(), 1.5)
    old = {k: v for k, v in m.items() if not k.endswith("_process_samples") and k != "processes"}
    old["candidate_samples"], old["baseline_samples"] = m["candidate_samples"][:5], m["baseline_samples"][:5]
    del old["ci_method"]
    rows = table_rows(report({"new": m, "old": old}))
    assert rows[0][9] == "3x5 / 3x5" and rows[1][9] == "1x5 / 1x5"
    assert rows[0][8] == f"t df {m['ci_df']:.2g}" and rows[1][8] == "-"
    assert ci_label({"ci_method": "two-level-bootstrap", "ci_fallback": "the baseline has one process"}) == (
        "2-level boot*"
    )
    assert ci_label({"ci_method": "flat-bootstrap"}) == "flat boot"
    skipped = table_rows({"items": [{"name": "s", "kind": "perf_nonregression", "status": "skipped", "reason": "r"}]})
    assert len(skipped[0]) == len(rows[0])
