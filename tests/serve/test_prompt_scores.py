"""qualify.serve.prompt_scores on CPU: answer positions from prompt log-probabilities, the coarsened KL bound,
the paired comparison, and the command's refusals (what needs vLLM runs in test_vllm_loss_real.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from qualify.cli import main
from qualify.errors import QualifyError
from qualify.serve.prompt_scores import ItemScores, coarse_kl, compare_scores, item_scores

FIFA = Path(__file__).resolve().parents[2] / "fixtures" / "fifa_world_cup"


def _log_softmax(x: np.ndarray) -> np.ndarray:
    return x - np.log(np.exp(x - x.max()).sum()) - x.max()


def _top(lp: np.ndarray, k: int) -> dict[int, float]:
    return {int(t): float(lp[t]) for t in np.argsort(-lp)[:k]}


def test_answer_positions_are_read_from_the_prompt_tail() -> None:
    ids, mask = [5, 6, 7, 8], [0, 0, 1, 1]
    # An inject prompt: 3 placeholder positions (no entries: loaded by the connector), then the item.
    entries = [None, None, None, None, {6: -0.5, 9: -1.0}, {7: -0.1, 6: -3.0}, {1: -0.2, 8: -2.5}]
    s = item_scores("x", ids, mask, entries)
    assert s.gold == [-0.1, -2.5] and s.tops[1] == {1: -0.2, 8: -2.5}
    # A shared prompt is the item alone (vLLM gives none for its first token).
    assert item_scores("x", ids, mask, entries[3:]).gold == s.gold


def test_a_missing_answer_entry_is_refused_naming_the_item() -> None:
    with pytest.raises(QualifyError, match=r"boolq-07.*position 3"):
        item_scores("boolq-07", [5, 6, 7, 8], [0, 0, 1, 1], [None, {6: -1.0}, {7: -0.1}, None])
    with pytest.raises(QualifyError, match="first token is an answer token"):
        item_scores("boolq-07", [5, 6], [1, 1], [None, {6: -1.0}])
    with pytest.raises(QualifyError, match="boolq-07: 2 prompt log-probabilities"):
        item_scores("boolq-07", [5, 6, 7, 8], [0, 0, 1, 1], [None, {6: -1.0}])


def test_the_coarsened_kl_is_a_lower_bound_of_the_full_kl() -> None:
    rng = np.random.default_rng(random.randint(0, 2**32 - 1))
    for _ in range(50):
        vocab, k = int(rng.integers(8, 200)), int(rng.integers(2, 8))
        p = _log_softmax(rng.normal(size=vocab) * rng.uniform(0.5, 4))
        q = _log_softmax(np.log(np.exp(p)) + rng.normal(size=vocab) * rng.uniform(0, 1))
        full = float((np.exp(p) * (p - q)).sum())
        bound = coarse_kl(_top(p, k), _top(q, k))
        assert 0.0 <= bound <= full + 1e-9
    same = _top(p, 5)
    assert coarse_kl(same, same) == pytest.approx(0.0, abs=1e-12)


def test_a_rest_within_rounding_of_zero_does_not_inflate_the_bound() -> None:
    # The top-2 hold all the mass but for float32 rounding; the layout's sums to a hair over 1 (rest <= 0).
    ref = {1: math.log(0.7), 2: math.log(0.3 - 1e-4)}
    lay = {1: math.log(0.7 + 2e-6), 2: math.log(0.3 - 1e-6)}
    full = 0.7 * math.log(0.7 / 0.7) + 0.3 * math.log(0.3 / 0.3)
    assert coarse_kl(ref, lay) <= full + 1e-4


def _doc(label: str, items: list[ItemScores]) -> dict:
    def one(i: ItemScores) -> dict:
        return {"id": i.id, "gold": i.gold, "tops": [{str(t): v for t, v in top.items()} for top in i.tops]}

    return {"label": label, "items": [one(i) for i in items]}


def test_the_comparison_is_paired_over_items() -> None:
    rng = random.Random()
    ref, lay = [], []
    for n in range(rng.randint(10, 30)):
        gold = [-rng.uniform(0.1, 5) for _ in range(rng.randint(1, 4))]
        tops = [{1: g, 2: g - 1.0} for g in gold]
        ref.append(ItemScores(f"i{n}", gold, tops))
        # Every answer token 0.05 nats less likely, the argmax kept.
        lay.append(ItemScores(f"i{n}", [g - 0.05 for g in gold], [{1: g - 0.05, 2: g - 1.0} for g in gold]))
    r = compare_scores(_doc("ref", ref), _doc("lay", lay), n_resamples=500)
    tokens = sum(len(i.gold) for i in ref)
    ref_nll = -sum(sum(i.gold) for i in ref)
    assert r["answer_tokens"] == tokens and r["items"] == len(ref)
    assert r["rel_increase"] == pytest.approx(0.05 * tokens / ref_nll, rel=1e-9)
    assert r["ci"][0] <= r["rel_increase"] <= r["ci"][1]
    assert r["top1_agreement"] == 1.0 and r["kl_lower_bound_per_token"] > 0.0
    assert compare_scores(_doc("ref", ref), _doc("ref", ref), n_resamples=200)["rel_increase"] == 0.0
    with pytest.raises(QualifyError, match="not scored on the reference's items"):
        compare_scores(_doc("ref", ref), _doc("lay", lay[1:]), n_resamples=200)


def test_compare_command_prints_one_row_per_layout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = [ItemScores(f"i{n}", [-1.0, -math.log(2)], [{3: -1.0}, {4: -math.log(2)}]) for n in range(6)]
    (tmp_path / "ref.json").write_text(json.dumps(_doc("bf16-inject", ref)))
    (tmp_path / "lay.json").write_text(json.dumps(_doc("shared-k16v8", ref)))
    assert main(["serve-loss", "compare", str(tmp_path / "ref.json"), str(tmp_path / "lay.json")]) == 0
    rows = json.loads(capsys.readouterr().out)
    row = rows[str(tmp_path / "lay.json")]
    assert len(rows) == 1 and row["layout"] == "shared-k16v8" and row["rel_increase"] == 0.0
    (tmp_path / "bad.json").write_text("{}")
    assert main(["serve-loss", "compare", str(tmp_path / "ref.json"), str(tmp_path / "bad.json")]) == 2
    assert capsys.readouterr().err.startswith(f"serve-loss compare: {tmp_path / 'bad.json'}: KeyError")


def test_score_refuses_in_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 576,
                                                   "num_attention_heads": 9, "num_key_value_heads": 3,
                                                   "num_hidden_layers": 30, "vocab_size": 49152}))  # fmt: skip
    out = tmp_path / "k8v8.json"
    args = ["serve-loss", "score", "--out", str(out), "--model-dir", str(model), "--cartridge",
            str(FIFA / "run1.pt"), "--eval-set", str(FIFA / "eval_set.json")]  # fmt: skip
    assert main([*args, "--layout", "shared-k16v8", "--fake-quant", "K8/V8"]) == 2
    assert capsys.readouterr().err.strip() == (
        "--fake-quant: a fake-quantized cartridge is served by injection, not by shared-k16v8"
    )
    assert main([*args[:5], str(tmp_path), *args[6:], "--layout", "bf16-inject"]) == 2
    assert "no config.json" in capsys.readouterr().err and not out.exists()
