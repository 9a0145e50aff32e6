"""The suite's own CPU costs as pytest-benchmark tests: compiling the shipped gates, linting a large gate file,
signing a report of realistic size.

Under `nox -s tests` (and plain `pytest tests`) each runs once as an ordinary test (benchmarking disabled by
tests/conftest.py). `nox -s bench` times them, saves the run under `.benchmarks/` and compares it with the
previous run saved on the same machine (`--benchmark-compare`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recorded import recorded
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from qualify.compile import compile_gate_file
from qualify.registry import default_registry
from qualify.signing import sign_report

ROOT = Path(__file__).parents[2]
RECORDED_REPORT = "2026-11-29-numerics-h200/numerics-h200.json"  # 0.37 MB canonical, 115 items


def test_compile_the_numerics_gates(benchmark) -> None:
    registry = default_registry()
    compiled = benchmark(compile_gate_file, ROOT / "gates" / "kernel_numerics.yaml", registry)
    assert len({i.gate_id for i in compiled.items}) >= 9 and len(compiled.items) > 150  # envelope cells included


def test_lint_a_gate_file_of_1500_gates(benchmark, tmp_path: Path) -> None:
    lines = ["suite: big", "version: 1", "gates:"]
    lines += [f"  - {{id: g{i}, kind: compare, requires: [cpu], limit: 1.0, value: {i / 4000}}}" for i in range(1500)]
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n")
    registry = default_registry()
    compiled = benchmark(compile_gate_file, path, registry)
    assert len(compiled.items) == 1500  # 18,000 YAML nodes, near the 20,000 limit


def test_sign_a_recorded_report(benchmark, tmp_path: Path) -> None:
    report = json.loads(recorded(RECORDED_REPORT, tmp_path).read_text())
    key = Ed25519PrivateKey.generate()
    report_bytes, envelope = benchmark(sign_report, report, [], key)
    assert len(report_bytes) > 300_000 and json.loads(envelope)["signatures"]


@pytest.fixture(autouse=True)
def _kinds_installed() -> None:
    if "compare" not in default_registry():
        pytest.skip("the test kind `compare` is not installed (pip install -e tests/plugins/qualify_fake_kind)")
