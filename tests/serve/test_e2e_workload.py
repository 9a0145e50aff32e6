"""qualify.serve.e2e workloads: what the agreement run sends every layout, built on CPU from the real fixtures
(the trained SmolLM2 cartridge and its eval set) and refused with one line naming the file or option."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from qualify.errors import QualifyError
from qualify.serve.e2e import SMALL, eval_set_workload, random_workload, workload_for

FIFA = Path(__file__).resolve().parents[2] / "fixtures" / "fifa_world_cup"
# SmolLM2-135M's KV shape (30 layers, 9 query heads over 3 KV heads of 64), what the GGUF conversion writes.
SMOLLM2_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 576,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "num_hidden_layers": 30,
    "vocab_size": 49152,
}


@pytest.fixture
def smollm2_dir(tmp_path: Path) -> str:
    d = tmp_path / "smollm2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(SMOLLM2_CONFIG))
    return str(d)


def test_eval_set_workload_sends_each_question_before_its_answer(smollm2_dir: str) -> None:
    prompts = random.randint(2, 8)
    w = workload_for(model_dir=smollm2_dir, cartridge=FIFA / "run1.pt", eval_set=FIFA / "eval_set.json",
                     prompts=prompts, question_len=48, cartridge_len=632, seed=1)  # fmt: skip
    items = json.loads((FIFA / "eval_set.json").read_text())["items"]
    assert w.cartridge_len == 128 and w.cartridge_file == FIFA / "run1.pt"
    assert len(w.questions) == prompts
    for q, item in zip([*w.questions, w.priming], items, strict=False):
        first_answer = item["answer_mask"].index(1)
        assert q == item["input_ids"][:first_answer] and q
    assert w.settings.load_format == "auto" and w.settings.model_dir == smollm2_dir


def test_random_workload_is_seeded_and_avoids_the_placeholder() -> None:
    seed = random.randint(0, 10_000)
    a = random_workload(SMALL, prompts=4, question_len=16, cartridge_len=64, seed=seed)
    b = random_workload(SMALL, prompts=4, question_len=16, cartridge_len=64, seed=seed)
    assert a == b and a.cartridge_file is None and len(a.questions) == 4
    assert all(len(q) == 16 and SMALL.placeholder_token_id not in q for q in [*a.questions, a.priming])


def test_a_cartridge_of_another_model_is_refused(tmp_path: Path) -> None:
    # The small Qwen3's KV shape is not SmolLM2's: the trained cartridge must not be served to it.
    with pytest.raises(QualifyError, match=r"run1\.pt"):
        eval_set_workload(SMALL, FIFA / "run1.pt", FIFA / "eval_set.json", prompts=2)


def _item(n: int, ids: list[int], mask: list[int]) -> dict:
    return {"id": f"q{n}", "text": "t", "input_ids": ids, "answer_mask": mask}


GOOD = [_item(n, [1, 5, 6, 7], [0, 0, 1, 1]) for n in range(3)]


@pytest.mark.parametrize(
    ("items", "field"),
    [
        (None, "format"),
        (GOOD[:2], "3 items, not 2"),
        ([_item(0, [1, 0, 6, 7], [0, 0, 1, 1]), *GOOD[1:]], r"items\[0\] \(q0\).*placeholder token 0"),
        ([GOOD[0], _item(1, [5, 6], [1, 1]), GOOD[2]], r"item 'q1' \(items\[1\]\): field 'answer_mask'"),
    ],
)
def test_a_malformed_eval_set_is_refused_naming_the_file_and_item(
    smollm2_dir: str, tmp_path: Path, items: list | None, field: str
) -> None:
    header = json.loads((FIFA / "eval_set.json").read_text())
    doc = {"format": "x"} if items is None else {"format": header["format"], "tokenizer": header["tokenizer"],
                                                 "items": items}  # fmt: skip
    bad = tmp_path / "eval.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(QualifyError, match=rf"eval\.json: .*{field}"):
        workload_for(model_dir=smollm2_dir, cartridge=FIFA / "run1.pt", eval_set=bad, prompts=2, question_len=8,
                     cartridge_len=8, seed=0)  # fmt: skip


def test_options_that_do_not_add_up_are_refused(smollm2_dir: str, tmp_path: Path) -> None:
    with pytest.raises(QualifyError, match="--model-dir"):
        workload_for(model_dir=smollm2_dir, cartridge=None, eval_set=FIFA / "eval_set.json", prompts=2,
                     question_len=8, cartridge_len=8, seed=0)  # fmt: skip
    with pytest.raises(QualifyError, match="need --model-dir"):
        workload_for(model_dir=None, cartridge=FIFA / "run1.pt", eval_set=None, prompts=2, question_len=8,
                     cartridge_len=8, seed=0)  # fmt: skip
    with pytest.raises(QualifyError, match=r"config\.json"):
        workload_for(model_dir=str(tmp_path), cartridge=FIFA / "run1.pt", eval_set=FIFA / "eval_set.json",
                     prompts=2, question_len=8, cartridge_len=8, seed=0)  # fmt: skip


def test_the_command_refuses_in_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from qualify.cli import main

    out = tmp_path / "cand.json"
    args = ["serve-agreement", "generate", "--layout", "shared-k16v8", "--out", str(out)]
    assert main([*args, "--cartridge", str(FIFA / "run1.pt")]) == 2
    assert not out.exists()
    assert (
        capsys.readouterr().err.strip() == "--cartridge/--eval-set: a trained cartridge and eval set need --model-dir"
    )
    out.write_text("kept")
    assert main(args) == 2
    assert out.read_text() == "kept" and "exists already" in capsys.readouterr().err
