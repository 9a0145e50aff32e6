"""Perf samples as pytest-benchmark JSON: `pytest-benchmark compare` reads two exported H200 perf reports."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _recorded import recorded

from qualify.cli import main

RECORDED = "2026-12-01-perf-h200-process-t"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    into = tmp_path_factory.mktemp("recorded")
    return {run: recorded(f"{RECORDED}/{run}.json", into) for run in ("run1", "run2")}


@pytest.fixture(scope="module")
def exported(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bench")
    out = {}
    for run, path in runs.items():
        out[run] = folder / f"{run}.json"
        assert main(["benchmark-json", str(path), "-o", str(out[run])]) == 0
    return out


def test_each_measured_side_is_one_benchmark_in_seconds_per_round(
    runs: dict[str, Path], exported: dict[str, Path]
) -> None:
    report = json.loads(runs["run1"].read_text())
    doc = json.loads(exported["run1"].read_text())
    assert doc["commit_info"]["id"] and doc["machine_info"]["gpu"] == ["NVIDIA H200"]
    benches = {b["name"]: b for b in doc["benchmarks"]}
    item = next(i for i in report["items"] if i["name"] == "perf-shared-vs-inject[decode_tokens_per_s-16-128]")
    m = item["measurements"]
    cand = benches["decode_tokens_per_s[fused-k16v8-b16-s128]"]
    pooled = [x for g in m["candidate_process_samples"] for x in g]
    assert cand["stats"]["rounds"] == len(pooled) == 15
    # tok/s of a batch of 16 -> seconds per decode step; the median maps through the monotone conversion.
    assert cand["stats"]["median"] == pytest.approx(16 / statistics.median(pooled), rel=1e-12)
    assert cand["extra_info"]["process_samples"] == m["candidate_process_samples"]
    assert cand["extra_info"]["measured_unit"] == "tok/s" and item["name"] in cand["extra_info"]["items"]
    ttft = benches["ttft_proxy_ms[flashinfer-inject-bf16-b1-s512]"]
    assert ttft["stats"]["min"] == pytest.approx(min(x / 1e3 for g in ttft["extra_info"]["process_samples"] for x in g))
    # One benchmark per measured implementation and cell, however many items share it.
    assert len(benches) == len(doc["benchmarks"])


def test_pytest_benchmark_compare_reads_two_exported_runs(exported: dict[str, Path], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(exported["run1"]), str(exported["run2"]),
         "--group-by=group", "--columns=min,median,max,rounds"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("decode_tokens_per_s[fused-k16v8-b64-s128]")]
    assert len(rows) == 2 and any("run1" in r for r in rows) and any("run2" in r for r in rows), proc.stdout[:3000]


def test_refusals_are_one_line_and_write_nothing(
    runs: dict[str, Path], exported: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = exported["run1"].read_bytes()
    assert main(["benchmark-json", str(runs["run1"]), "-o", str(exported["run1"])]) == 4
    assert exported["run1"].read_bytes() == before
    no_perf = tmp_path / "loss.json"
    no_perf.write_text(json.dumps({"items": [{"kind": "loss_increase", "name": "x"}]}))
    assert main(["benchmark-json", str(no_perf), "-o", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("the report has no perf_nonregression item with samples to export")
    assert not (tmp_path / "b.json").exists()


def test_run_with_benchmark_json_says_when_no_perf_item_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gate = tmp_path / "g.yaml"
    gate.write_text(
        textwrap.dedent(
            """\
            suite: s
            version: 1
            gates:
              - {id: b, kind: compare, requires: [cpu], limit: 1.0, value: 0.5}
            """
        )
    )
    target = tmp_path / "bench.json"
    assert main(["run", str(gate), "--out", str(tmp_path / "o"), "--benchmark-json", str(target)]) == 0
    assert f"{target}: not written: no perf or engine item ran" in capsys.readouterr().err
    assert not target.exists()
    target.write_text("{}")
    assert main(["run", str(gate), "--out", str(tmp_path / "o2"), "--benchmark-json", str(target)]) == 4
    assert not (tmp_path / "o2").exists() or not any((tmp_path / "o2").iterdir())
