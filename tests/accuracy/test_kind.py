from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from qualify.compile import GateFileErrors, compile_gate_file
from qualify.kinds.accuracy_floor.params import AccuracyFloorParams
from qualify.registry import default_registry

GATE = """\
suite: test
version: 1
workloads:
  cpu:
    model: {{source: pypi-gguf}}
gates:
  - id: acc
    kind: accuracy_floor
    workload: cpu
    floors: [{floor}]
    decision: point
{extra}
    matrix:
      task:
        - {{id: mmlu, name: cq_mmlu, n: {n}, expected_reference_score: {p}}}
      layout: [K16/V8, K8/V8]
"""


def _write(tmp_path: Path, **fields: object) -> Path:
    values = {"floor": 0.99, "n": 40, "p": 0.3, "extra": ""} | fields
    path = tmp_path / "acc.yaml"
    path.write_text(GATE.format(**values))
    return path


def test_lint_rejects_an_underpowered_floor(tmp_path: Path) -> None:
    with pytest.raises(GateFileErrors) as info:
        compile_gate_file(_write(tmp_path), default_registry())
    text = info.value.diagnostics()
    assert "finer than the gate can resolve" in text
    assert "allow_underpowered" in text
    assert "acc.yaml:" in text  # located in the file


def test_allow_underpowered_turns_the_error_into_a_smoke_gate(tmp_path: Path) -> None:
    extra = textwrap.indent("allow_underpowered: true", "    ")
    compiled = compile_gate_file(_write(tmp_path, extra=extra), default_registry())
    assert [i.name for i in compiled.items] == ["acc[mmlu-K16/V8]", "acc[mmlu-K8/V8]"]
    params = compiled.items[0].params
    assert isinstance(params, AccuracyFloorParams)
    assert params.task.n == 40 and params.layout == "K16/V8"


def test_a_powered_floor_needs_no_waiver(tmp_path: Path) -> None:
    # Full MMLU with a discordance measured in a pilot run resolves a 1 % floor on a 77 % model.
    extra = textwrap.indent("assumed_discordance: 0.02", "    ")
    path = _write(tmp_path, n="null", p=0.77, extra=extra)
    assert len(compile_gate_file(path, default_registry()).items) == 2


def test_vllm_backend_refuses_mixed_layouts(tmp_path: Path) -> None:
    extra = textwrap.indent("allow_underpowered: true\nbackend: vllm", "    ")
    with pytest.raises(GateFileErrors, match="kv_cache_dtype sets K and V together"):
        compile_gate_file(_write(tmp_path, extra=extra), default_registry())


def test_shipped_gate_file_lints(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    compiled = compile_gate_file(root / "gates" / "slow" / "accuracy.yaml", default_registry())
    names = {i.name for i in compiled.items}
    assert {"accuracy-smoke[mmlu-K8/V8]", "accuracy-smoke[gsm8k-K16/V8]"} <= names


def test_default_gate_set_holds_no_smoke_accuracy_gate() -> None:
    """`qualify run` with no files takes gates/*.yaml; an underpowered smoke gate there could never PASS."""
    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "gates").glob("*.yaml")):
        for item in compile_gate_file(path, default_registry()).items:
            assert not getattr(item.params, "allow_underpowered", False), f"{path.name}: {item.name} is a smoke test"
