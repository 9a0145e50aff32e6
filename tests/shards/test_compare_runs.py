"""scripts/compare_runs.py: a serial run and a `--gpus` run of the same gates agree; a changed status, a missing
item or a different verdict is a disagreement (exit 1); an unreadable report is exit 2 with its path."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qualify.cli import main

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_runs.py"


def _compare(a: Path, b: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), *extra], capture_output=True, text=True)


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    values = sorted(v / 1000 for v in random.sample(range(10, 990), 6))
    gate = {"id": "a", "kind": "compare", "requires": ["cpu"], "limit": values[3], "matrix": {"value": values}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"suite": "s", "version": 1, "gates": [gate]}, sort_keys=False))
    for name, extra in (("serial", []), ("spread", ["--gpus", "auto"])):
        main(["run", str(path), "--out", str(tmp_path / name), "--name", name, *extra])
    return tmp_path / "serial" / "serial.json", tmp_path / "spread" / "spread.json"


def test_a_spread_run_agrees_with_the_serial_one(runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = _compare(*runs, "--json", str(tmp_path / "c.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "c.json").read_text())
    assert result["agree"] and result["items"] == 6 and result["same_observed_values"] == 6
    assert result["gpus_of_b"] == ["0", "1"] and result["verdict"] == ["FAIL", "FAIL"]
    assert out.stdout.rstrip().endswith("AGREE")


def test_a_changed_status_or_a_lost_item_disagrees(runs: tuple[Path, Path], tmp_path: Path) -> None:
    serial, spread = runs
    report = json.loads(spread.read_text())
    flipped = next(i for i in report["items"] if i["status"] == "failed")
    flipped["status"] = "passed"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(report))
    out = _compare(serial, changed)
    assert out.returncode == 1 and f"{flipped['name']}: failed vs passed" in out.stdout
    report["items"] = report["items"][1:]
    changed.write_text(json.dumps(report))
    lost = _compare(serial, changed)
    assert lost.returncode == 1 and "only in a:" in lost.stdout


def test_a_verdict_or_counts_alone_differing_disagrees(runs: tuple[Path, Path], tmp_path: Path) -> None:
    serial, spread = runs
    for field, value in (("verdict", "PASS"), ("counts", {"passed": 6, "total": 6})):
        report = json.loads(spread.read_text())
        report[field] = value
        changed = tmp_path / f"{field}.json"
        changed.write_text(json.dumps(report))
        assert _compare(serial, changed).returncode == 1, field


def test_items_of_the_same_name_in_two_gate_files_are_not_merged(runs: tuple[Path, Path], tmp_path: Path) -> None:
    # Two gate files may both have an item `a[0.1]`: swapping the statuses of such a pair keeps the counts.
    serial, _ = runs
    base = json.loads(serial.read_text())
    x, y = base["items"][0], dict(base["items"][0])
    y["gate_file"] = "other.yaml"
    y["status"] = "passed" if x["status"] == "failed" else "failed"
    a = {**base, "items": [x, y]}
    b = {**base, "items": [{**x, "status": y["status"]}, {**y, "status": x["status"]}]}
    paths = []
    for name, report in (("a", a), ("b", b)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report))
    out = _compare(*paths)
    assert out.returncode == 1 and out.stdout.count("status differs") == 2
    # The same item twice in one report is itself a disagreement.
    paths[1].write_text(json.dumps({**base, "items": [x, x]}))
    assert "twice in b" in _compare(paths[0], paths[1]).stdout


@pytest.mark.parametrize(
    "text", ["{not json", '{"items": []}', '{"items": [{"name": "a"}], "verdict": "PASS", "counts": {}}']
)
def test_an_unreadable_report_is_exit_2_naming_it(runs: tuple[Path, Path], tmp_path: Path, text: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    out = _compare(runs[0], bad)
    assert out.returncode == 2 and str(bad) in out.stderr and out.stdout == ""
