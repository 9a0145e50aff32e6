"""`accuracy_floor` with `backend: served` on CPU: the eval set's yes/no questions answered behind the cartridge from
the serving path's scores. The scoring processes are stand-ins that copy prepared score documents into place (as
in tests/loss/test_loss_vllm_backend.py), so what is checked is which layout is served by what, that the floor
reads the scores the loss gate of the same run already made (no engine of its own), and the verdicts."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from qualify.cli import main
from qualify.loss.data import load_eval_set
from qualify.serve import score_processes
from qualify.serve.yes_no import answer_tokens

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "fifa_world_cup"
ITEMS = load_eval_set(FIXTURES / "eval_set.json").items
GOLD = answer_tokens(ITEMS)
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "num_attention_heads": 9,
           "num_key_value_heads": 3, "num_hidden_layers": 30, "vocab_size": 49152}  # fmt: skip


def _doc(run: score_processes.ScoringRun, wrong: set[str]) -> dict:
    """Every answer token at -1 nats; at a yes/no item's first answer position the other answer sits below the
    gold one, or above it for the items in `wrong`. The FP4-key control moves the runner-up token (KL > 0)."""
    runner_up = -4.0 if run.fake_quant == "K4/V16" else -2.0
    pair = sorted(set(GOLD.values()))
    items = []
    for i in ITEMS:
        answer = [t for t, m in zip(i.input_ids, i.answer_mask, strict=True) if m]
        tops = [{str(t): -1.0, "7": runner_up} for t in answer]
        if i.id in GOLD:
            other = pair[1] if GOLD[i.id] == pair[0] else pair[0]
            tops[0][str(other)] = -0.5 if i.id in wrong else -1.5
        items.append({"id": i.id, "gold": [-1.0] * len(answer), "tops": tops})
    return {"label": run.label, "layout": run.layout, "fake_quant": run.fake_quant, "enforce_eager": False,
            "top_k": 3, "cartridge_sha256": "c" * 64, "items": items}  # fmt: skip


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Stand-in scoring processes; the reference answers 14 of the 27 questions, K16/V8 loses `K16V8_LOST` of those
    and K8/V8 all of them. Returns the labels of the runs started, in order."""
    ids = sorted(GOLD)
    random.Random(random.randrange(2**32)).shuffle(ids)
    ref_wrong = set(ids[:13])
    right = [x for x in ids if x not in ref_wrong]
    wrong = {"bf16-inject": ref_wrong, "shared-k16v16": ref_wrong, "shared-k16v8": ref_wrong | set(right[:1]),
             "bf16-inject+K8/V16": ref_wrong, "bf16-inject+K8/V8": set(ids),
             "bf16-inject+K4/V16": set(ids)}  # fmt: skip
    labels: list[str] = []

    def command(run: score_processes.ScoringRun, inputs: score_processes.ScoringInputs, out: Path,
                memory_share: float) -> list[str]:  # fmt: skip
        labels.append(run.label)
        prepared = tmp_path / f"prepared-{len(labels)}.json"
        prepared.write_text(json.dumps(_doc(run, wrong[run.label])))
        return [sys.executable, "-c", "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])", str(prepared),
                str(out)]  # fmt: skip

    monkeypatch.setattr(score_processes, "scoring_command", command)
    return labels


def _gate(tmp_path: Path, floor_fields: str, *, with_loss: bool = True, layouts: str = "[K16/V16, K16/V8]") -> Path:
    model = tmp_path / "smollm2"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(SMOLLM2))
    (model / "model.safetensors").write_bytes(random.randbytes(64))
    loss = (
        """
  - id: loss-served
    kind: loss_increase
    backend: vllm
    workload: w
    checkpoint: run1
    n_resamples: 500
    engines_at_once: 3
    max_rel_increase: {K16/V16: 0.002, K16/V8: 0.005, K8/V16: 0.005, K8/V8: 0.005}
    positive_control: {layout: K4/V16, metric: kl_mean, minimum: 0.01}
"""
        if with_loss
        else ""
    )
    p = tmp_path / "served.yaml"
    p.write_text(f"""
suite: floor-served-test
version: 1
workloads:
  w:
    model: {{source: path, path: {model}}}
    cartridges: {{run1: {FIXTURES / "run1.pt"}}}
    eval_set: {FIXTURES / "eval_set.json"}
gates:{loss}
  - id: floor-served
    kind: accuracy_floor
    backend: served
    workload: w
    task: {{id: boolq-fifa, name: cartridge_yes_no, n: 27, expected_reference_score: 0.52}}
    decision: ci_lower
    n_resamples: 500
    table_layouts: [K8/V16, K8/V8]
    engines_at_once: 2
{floor_fields}
    matrix:
      checkpoint: [run1]
      layout: {layouts}
""")
    return p


def _items(out: Path) -> dict[str, dict]:
    return {i["name"]: i for i in json.loads((out / "r.json").read_text())["items"]}


def test_the_floor_reads_the_loss_gates_scores_and_is_never_a_pass_at_27_questions(
    tmp_path: Path, started: list[str]
) -> None:
    path = _gate(tmp_path, "    floors: [0.99, 0.999]\n    allow_underpowered: true")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--name", "r"]) == 0  # INCOMPLETE, without --strict
    # The six layouts the loss gate served, each once; the floor's cells started nothing more.
    assert sorted(started) == sorted(["bf16-inject", "shared-k16v16", "shared-k16v8", "bf16-inject+K8/V16",
                                      "bf16-inject+K8/V8", "bf16-inject+K4/V16"])  # fmt: skip
    items = _items(out)
    same, fp8v = items["floor-served[run1-K16/V16]"], items["floor-served[run1-K16/V8]"]
    # No question lost: nothing shown at n = 27 (INCOMPLETE). One lost: the CI straddles the floor, which 27
    # questions cannot decide (INCOMPLETE, inconclusive), never a FAIL on what may be noise.
    assert same["status"] == "incomplete" and fp8v["status"] == "incomplete"
    assert [c["outcome"] for c in fp8v["checks"]] == ["inconclusive", "inconclusive"]
    assert "inconclusive at this n" in fp8v["reason"]
    for item in (same, fp8v):
        m = item["measurements"]
        assert m["backend"] == "served" and m["n"] == 27 and m["underpowered"]
        assert m["reference_score"] == pytest.approx(14 / 27)
        assert m["served"]["checkpoint"] == "run1"
        assert m["served"]["runs"]["BF16 (injection)"]["served_as"] == "bf16-inject"
        assert m["served"]["runs"]["K8/V8"]["served_as"] == "bf16-inject+K8/V8"
        assert m["scores"]["K8/V8"] == 0.0
    assert same["measurements"]["served"]["runs"]["K16/V16"]["served_as"] == "shared-k16v16"
    assert fp8v["measurements"]["served"]["runs"]["K16/V8"]["served_as"] == "shared-k16v8"
    assert fp8v["measurements"]["score"] == pytest.approx(13 / 27)
    assert fp8v["measurements"]["discordant"] == {"ref_only": 1, "cand_only": 0}
    assert "underpowered" in same["reason"]
    assert json.loads((out / "r.json").read_text())["verdict"] == "INCOMPLETE"


def test_alone_the_floor_serves_only_what_it_compares(tmp_path: Path, started: list[str]) -> None:
    path = _gate(tmp_path, "    floors: [0.99]\n    allow_underpowered: true", with_loss=False, layouts="[K16/V8]")
    out = tmp_path / "out"
    main(["run", str(path), "--out", str(out), "--name", "r"])
    assert _items(out)["floor-served[run1-K16/V8]"]["measurements"]["reference_layout"] == "BF16 (injection)"
    assert sorted(started) == sorted(["bf16-inject", "shared-k16v8", "bf16-inject+K8/V16", "bf16-inject+K8/V8"])


def test_a_layout_shown_below_its_floor_fails_however_few_the_questions(tmp_path: Path, started: list[str]) -> None:
    path = _gate(tmp_path, "    floors: [0.99]\n    allow_underpowered: true", with_loss=False, layouts="[K8/V8]")
    path.write_text(path.read_text().replace("table_layouts: [K8/V16, K8/V8]", "table_layouts: []"))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--name", "r"]) == 1
    item = _items(out)["floor-served[run1-K8/V8]"]
    assert item["status"] == "failed" and item["measurements"]["score"] == 0.0


def test_a_declared_n_that_is_not_the_eval_sets_is_refused(tmp_path: Path, started: list[str]) -> None:
    path = _gate(tmp_path, "    floors: [0.99]\n    allow_underpowered: true", with_loss=False)
    path.write_text(path.read_text().replace("n: 27", "n: 30"))
    out = tmp_path / "out"
    main(["run", str(path), "--out", str(out), "--name", "r"])
    item = _items(out)["floor-served[run1-K16/V16]"]
    assert item["status"] == "error" and "task.n is 30 but the eval set has 27 yes/no items" in item["reason"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("checkpoint: [run1]", "checkpoint: [nope]"), "has no cartridge 'nope'"),
        (("name: cartridge_yes_no", "name: cq_mmlu"), "backend served answers task 'cartridge_yes_no' only"),
        (
            ("decision: ci_lower", "decision: ci_lower\n    reference_layout: K16/V8"),
            "reference_layout must be K16/V16",
        ),
        (("decision: ci_lower", "decision: ci_lower\n    vllm_args: {enforce_eager: true}"), "vllm_args apply to"),
        (("backend: served", "backend: hf"), "checkpoint applies to backend: served only"),
    ],
)
def test_lint_keeps_the_served_fields_to_the_served_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture, edit: tuple[str, str], message: str
) -> None:
    path = _gate(tmp_path, "    floors: [0.99]\n    allow_underpowered: true", with_loss=False)
    path.write_text(path.read_text().replace(*edit))
    assert main(["lint", str(path)]) == 2
    assert message in capsys.readouterr().err
