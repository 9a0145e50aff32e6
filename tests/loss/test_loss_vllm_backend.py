"""`loss_increase` with `backend: vllm` on CPU: the serving processes are replaced by recorded-style score
documents, so what is checked is the plumbing around them: which process serves which layout, the paired
statistics, and that the gate's checks, positive control and report come out as for the CPU backend."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from qualify.cli import main
from qualify.loss.data import load_eval_set
from qualify.loss.evaluate import LossResult
from qualify.serve import score_processes

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "fifa_world_cup"
ITEMS = load_eval_set(FIXTURES / "eval_set.json").items
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "num_attention_heads": 9,
           "num_key_value_heads": 3, "num_hidden_layers": 30, "vocab_size": 49152}  # fmt: skip


def _doc(run: score_processes.ScoringRun, shift: float, kl_shift: float) -> dict:
    """Every answer token at -1 - shift nats; the top-2 (gold, another token) move apart by kl_shift."""
    items = []
    for i in ITEMS:
        answer = [t for t, m in zip(i.input_ids, i.answer_mask, strict=True) if m]
        tops = [{str(t): -1.0 - shift, "7": -2.0 - kl_shift} for t in answer]
        items.append({"id": i.id, "gold": [-1.0 - shift] * len(answer), "tops": tops})
    return {
        "label": run.label,
        "layout": run.layout,
        "fake_quant": run.fake_quant,
        "enforce_eager": False,
        "top_k": 2,
        "items": items,
    }


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, str | None, str]]:
    """Fake serving processes (a child process copies each layout's prepared document into place): each layout's
    loss shift per token, and a record of what was started."""
    shift = {("bf16-inject", None): 0.0, ("shared-k16v16", None): 0.0, ("shared-k16v8", None): 0.001,
             ("bf16-inject", "K8/V16"): 0.002, ("bf16-inject", "K8/V8"): 0.003,
             ("bf16-inject", "K4/V16"): 0.3}  # fmt: skip
    started: list[tuple[str, str | None, str]] = []

    def command(run: score_processes.ScoringRun, inputs: score_processes.ScoringInputs, out: Path,
                memory_share: float) -> list[str]:  # fmt: skip
        started.append((run.layout, run.fake_quant, inputs.scaling.value))
        s = shift[(run.layout, run.fake_quant)]
        prepared = tmp_path / f"prepared-{len(started)}.json"
        prepared.write_text(json.dumps(_doc(run, s, 3 * s)))
        return [sys.executable, "-c", "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])", str(prepared),
                str(out)]  # fmt: skip

    monkeypatch.setattr(score_processes, "scoring_command", command)
    return started


def _gate(tmp_path: Path, bounds: str, extra: str = "") -> Path:
    model = tmp_path / "smollm2"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(SMOLLM2))
    (model / "model.safetensors").write_bytes(random.randbytes(64))
    p = tmp_path / "loss.yaml"
    p.write_text(f"""
suite: loss-vllm-test
version: 1
workloads:
  w:
    model: {{source: path, path: {model}}}
    cartridges: {{run1: {FIXTURES / "run1.pt"}}}
    eval_set: {FIXTURES / "eval_set.json"}
gates:
  - id: loss-served
    kind: loss_increase
    backend: vllm
    workload: w
    checkpoint: run1
    n_resamples: 500
    max_rel_increase: {bounds}
    positive_control: {{layout: K4/V16, metric: kl_mean, minimum: 0.01}}
{extra}""")
    return p


def test_each_layout_is_served_as_it_ships_and_decided_as_on_cpu(tmp_path: Path, served: list) -> None:
    path = _gate(tmp_path, "{K16/V16: 0.002, K16/V8: 0.005, K8/V16: 0.005, K8/V8: 0.005}")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--name", "r"]) == 0
    # The BF16 reference by injection, K16/V* by the shared path, FP8/FP4 keys by fake-quantized injection.
    assert served == [("bf16-inject", None, "none"), ("shared-k16v16", None, "none"), ("shared-k16v8", None, "none"),
                      ("bf16-inject", "K8/V16", "none"), ("bf16-inject", "K8/V8", "none"),
                      ("bf16-inject", "K4/V16", "none")]  # fmt: skip
    item = json.loads((out / "r.json").read_text())["items"][0]
    assert item["status"] == "passed"
    layouts = {x["layout"]: x for x in item["measurements"]["layouts"]}
    tokens = sum(i.num_answer_tokens for i in ITEMS)
    assert item["measurements"]["reference"]["n_tokens"] == tokens
    assert layouts["K8/V8"]["rel_increase"] == pytest.approx(0.003)
    assert layouts["K16/V16"]["rel_increase"] == 0.0 and layouts["K16/V16"]["kl_mean"] == 0.0
    assert layouts["K4/V16"]["positive_control"] and layouts["K4/V16"]["kl_mean"] > 0.01
    assert item["parameters"]["device"] == "cuda (vLLM)" and item["parameters"]["backend"] == "vllm"


def test_a_layout_over_its_bound_fails(tmp_path: Path, served: list) -> None:
    path = _gate(tmp_path, "{K16/V8: 0.0005}")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--name", "r"]) == 1
    item = json.loads((out / "r.json").read_text())["items"][0]
    assert item["status"] == "failed"


def test_lint_refuses_what_the_serving_backend_cannot_do(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _gate(tmp_path, "{K16/V8: 0.005}", "    max_items: 10\n")
    assert main(["lint", str(path)]) == 2
    assert "backend vllm scores the whole eval set; drop max_items" in capsys.readouterr().err


def _cpu_result(scale: float) -> LossResult:
    """A CPU evaluation whose per-item NLLs are the fake reference's times `scale` (each item's own noise)."""
    ids = tuple(i.id for i in ITEMS)
    tokens = np.array([i.num_answer_tokens for i in ITEMS], dtype=np.int64)
    noise = np.random.default_rng(random.randrange(2**32)).normal(0.0, 1e-4, len(ITEMS))
    nll = tokens * 1.0 * (scale + noise)
    return LossResult(float(nll.sum() / tokens.sum()), len(ids), int(tokens.sum()), ids, nll, tokens)


@pytest.mark.parametrize(("scale", "status"), [(1.002, "passed"), (0.97, "failed"), (1.03, "failed")])
def test_the_served_reference_must_match_the_cpu_evaluation(
    tmp_path: Path, served: list, monkeypatch: pytest.MonkeyPatch, scale: float, status: str
) -> None:
    from qualify.kinds.loss_increase import runner

    calls = []

    def cpu_loss(*args: object) -> object:
        calls.append(args)
        return runner._CpuLoss(_cpu_result(scale), "float32", 0.5)

    monkeypatch.setattr(runner, "_cpu_loss", cpu_loss)
    path = _gate(tmp_path, "{K16/V8: 0.005}", "    cpu_reference: {tolerance: 0.01}\n    engines_at_once: 3\n")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--name", "r"]) == (0 if status == "passed" else 1)
    item = json.loads((out / "r.json").read_text())["items"][0]
    assert item["status"] == status and len(calls) == 1
    check = next(c for c in item["checks"] if c["name"].startswith("served BF16 loss agrees with the CPU"))
    assert check["observed"] == pytest.approx(1 / scale - 1, abs=1e-3) and check["threshold"] == 0.01
    assert check["passed"] == (status == "passed")
    agreement = item["measurements"]["cpu_reference"]
    assert agreement["served_loss"] == pytest.approx(1.0) and agreement["cpu_loss"] == pytest.approx(scale, abs=1e-3)
    assert agreement["ci_low"] <= agreement["ratio"] <= agreement["ci_high"]
    runs = item["measurements"]["served_runs"]
    assert [r["label"] for r in runs] == ["bf16-inject", "shared-k16v8", "bf16-inject+K4/V16"]
    assert all(r["engines_at_once"] == 3 and r["gpu_memory_utilization"] == pytest.approx(0.3) for r in runs)


def test_without_cpu_reference_no_cpu_evaluation_runs(
    tmp_path: Path, served: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qualify.kinds.loss_increase import runner

    monkeypatch.setattr(runner, "_cpu_loss", lambda *a: pytest.fail("the CPU evaluation ran"))
    out = tmp_path / "out"
    assert main(["run", str(_gate(tmp_path, "{K16/V8: 0.005}")), "--out", str(out), "--name", "r"]) == 0
    item = json.loads((out / "r.json").read_text())["items"][0]
    assert item["measurements"]["cpu_reference"] is None
    assert not any("CPU" in c["name"] for c in item["checks"])


def test_lint_keeps_the_serving_fields_to_the_serving_backend(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _gate(tmp_path, "{K16/V8: 0.005}", "    cpu_reference: {tolerance: 0.01}\n    engines_at_once: 2\n")
    path.write_text(path.read_text().replace("backend: vllm", "backend: hf"))
    assert main(["lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert "engines_at_once applies to backend: vllm only" in err and "cpu_reference applies to backend: vllm" in err
