"""The whole scoring path (lm-eval task -> KVLayoutLM -> per-item outcomes -> floor) on a tiny model and task."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from _seeding import seeded_rng

pytest.importorskip("lm_eval")

from qualify.accuracy.evaluate import OFFLINE_TASKS_DIR, TaskRequest, evaluate_task
from qualify.accuracy.floor import FloorRule, evaluate_floor
from qualify.accuracy.lm import KVLayoutLM
from qualify.hf_cache_arg import cache_kwargs

LETTERS = ["A", "B", "C", "D"]


def _docs(n: int) -> list[dict[str, Any]]:
    rng = seeded_rng()
    return [
        {"context": " ".join(f"w{i}" for i in rng.integers(0, 40, size=8)) + " Answer:", "label": 0} for _ in range(n)
    ]


def _self_labelled(lm: KVLayoutLM, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gold = the reference model's own choice, so the reference scores 100 % and any damage shows as a drop."""
    from lm_eval.api.instance import Instance

    requests = [
        Instance("loglikelihood", doc, (doc["context"], f" {letter}"), i)
        for doc in docs
        for i, letter in enumerate(LETTERS)
    ]
    scores = np.array([s for s, _ in lm.loglikelihood(requests, disable_tqdm=True)]).reshape(len(docs), 4)
    return [{**doc, "label": int(row.argmax())} for doc, row in zip(docs, scores, strict=True)]


def _tasks(docs: list[dict[str, Any]]) -> dict[str, Any]:
    import datasets
    from lm_eval.tasks import TaskManager

    config = {
        "task": "tiny_mc",
        "custom_dataset": lambda **_: datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)}),
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{context}}",
        "doc_to_choice": LETTERS,
        "doc_to_target": "label",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    }
    manager = TaskManager(include_path=str(OFFLINE_TASKS_DIR), include_defaults=False)
    return dict(manager.load([config])["tasks"])


def _zero_values(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return k, torch.zeros_like(v)


def test_zeroed_values_fail_the_floor_and_k16v16_passes(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    reference_lm = KVLayoutLM(tiny_lm.model, tiny_lm.tokenizer, layout="K16/V16", batch_size=16)
    docs = _self_labelled(reference_lm, _docs(48))
    tasks = _tasks(docs)
    request = TaskRequest("tiny_mc", metric="acc", filter="none")

    reference = evaluate_task(reference_lm, request, tasks)
    same = evaluate_task(KVLayoutLM(tiny_lm.model, tiny_lm.tokenizer, layout="K16/V16", batch_size=16), request, tasks)
    broken_lm = KVLayoutLM(tiny_lm.model, tiny_lm.tokenizer, kv_write=_zero_values, batch_size=16)
    broken = evaluate_task(broken_lm, request, tasks)

    assert reference.n == 48 and reference.items == broken.items
    assert reference.score == 1.0
    assert broken.score < 0.9
    for decision in ("point", "ci_lower"):
        rule = FloorRule(floors=(0.99, 0.999), decision=decision, n_resamples=500, allow_underpowered=True)
        bad = evaluate_floor(reference.correct, broken.correct, rule, seeded_rng(), label="tiny V=0")
        assert not any(c.passed for c in bad.checks)
        assert bad.measurements["discordant"]["ref_only"] == int((~broken.correct).sum())
        assert bad.measurements["mcnemar_p"] < 0.05
        good = evaluate_floor(reference.correct, same.correct, rule, seeded_rng(), label="tiny K16/V16")
        assert all(c.passed for c in good.checks)
        assert good.measurements["discordant"] == {"ref_only": 0, "cand_only": 0}


def test_shared_context_requests_score_like_separate_passes(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    """Letter choices share one forward pass per context; the scores must equal one pass per request."""
    from lm_eval.api.instance import Instance

    lm = KVLayoutLM(tiny_lm.model, tiny_lm.tokenizer, layout="K8/V8", batch_size=4)
    docs = _docs(5)
    requests = [Instance("loglikelihood", d, (d["context"], f" {x}"), 0) for d in docs for x in LETTERS]
    shared = [s for s, _ in lm.loglikelihood(requests, disable_tqdm=True)]
    single = [lm.loglikelihood([r], disable_tqdm=True)[0][0] for r in requests]
    np.testing.assert_allclose(shared, single, rtol=1e-4, atol=1e-4)
    # And the scores are real log-probabilities of the letter under the quantized model.
    ids = torch.tensor([lm.tok_encode(docs[0]["context"])])
    from qualify.accuracy.kv_cache import layout_write, new_cache

    with torch.no_grad():
        logits = tiny_lm.model(
            input_ids=ids,
            **cache_kwargs(tiny_lm.model, new_cache(layout_write("K8/V8"), tiny_lm.model.config)),
            use_cache=True,
        ).logits
    letter_id = lm.tok_encode(" A")[0]
    expected = torch.log_softmax(logits[0, -1].float(), -1)[letter_id].item()
    assert shared[0] == pytest.approx(expected, abs=1e-4)
