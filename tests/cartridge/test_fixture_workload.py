"""The committed fifa_world_cup workload: cartridges match their manifests, the eval set is loadable,
and (slow) a trained cartridge really carries the document."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from qualify.cartridge.manifest import load_verified_cartridge
from qualify.cartridge.types import ModelKVShape
from qualify.hashing import sha256_file
from qualify.loss.data import load_eval_set

WORKLOAD = Path(__file__).resolve().parents[2] / "fixtures" / "fifa_world_cup"
RUNS = ("run1", "run1_half_lr", "run2")
SMOLLM2 = ModelKVShape(num_layers=30, num_kv_heads=3, head_dim=64)


@pytest.mark.parametrize("run", RUNS)
def test_cartridge_matches_manifest_and_model(run):
    cartridge, manifest = load_verified_cartridge(WORKLOAD / f"{run}.pt", SMOLLM2)
    assert cartridge.dtype == torch.bfloat16
    assert (cartridge.num_tokens, cartridge.frozen_tokens) == (128, 1)
    assert manifest.id == f"fifa_world_cup/{run}" and manifest.model_id == "SmolLM2-135M-Instruct.Q4_1"
    assert manifest.provenance["source_document_sha256"] == sha256_file(WORKLOAD / "document.txt")


def test_runs_differ_as_recorded():
    manifests = {r: json.loads((WORKLOAD / f"{r}.pt.manifest.json").read_text()) for r in RUNS}
    p = {r: m["provenance"] for r, m in manifests.items()}
    assert p["run1_half_lr"]["lr"] == p["run1"]["lr"] / 2 and p["run1_half_lr"]["seed"] == p["run1"]["seed"]
    assert p["run2"]["seed"] != p["run1"]["seed"] and p["run2"]["steps"] > p["run1"]["steps"]
    assert len({m["sha256"] for m in manifests.values()}) == 3


def test_fixture_files_stay_small():
    total = sum(f.stat().st_size for f in WORKLOAD.iterdir() if f.is_file())
    assert total < 15 * 1024 * 1024


def test_eval_set_loads_and_asks_about_the_document():
    evals = load_eval_set(WORKLOAD / "eval_set.json")
    assert evals.tokenizer == "SmolLM2-135M-Instruct.Q4_1"
    assert 48 <= len(evals.items) <= 96
    kinds = {item.id.split("-")[0] for item in evals.items}
    assert kinds == {"boolq", "cloze"}
    # Every cloze answer is the document's own words.
    document = " ".join((WORKLOAD / "document.txt").read_text().split())
    for item in evals.items:
        if item.id.startswith("cloze"):
            assert item.text.split("\nA: ", 1)[1] in document


@pytest.mark.slow
def test_answer_masks_cover_exactly_the_answer_text():
    from qualify.models import default_model_spec, load_causal_lm

    tokenizer = load_causal_lm(default_model_spec()).tokenizer
    evals = load_eval_set(WORKLOAD / "eval_set.json")
    for item in random.sample(evals.items, 12):
        answer_ids = [t for t, m in zip(item.input_ids, item.answer_mask, strict=True) if m]
        assert tokenizer.decode(answer_ids) == item.text.split("\nA: ", 1)[1] + "<|im_end|>"


@pytest.mark.slow
def test_trained_cartridge_beats_its_untrained_init():
    from qualify.cartridge.attach import document_kv
    from qualify.cartridge.eval_loss import answer_token_nll
    from qualify.cartridge.selfstudy import document_prefix_text, encode_ids
    from qualify.models import default_model_spec, load_causal_lm

    torch.set_num_threads(min(2, torch.get_num_threads()))
    loaded = load_causal_lm(default_model_spec())
    prefix = encode_ids(loaded.tokenizer, document_prefix_text((WORKLOAD / "document.txt").read_text()))
    init_k, init_v = document_kv(loaded.model, torch.tensor(prefix[:128]))
    trained, _ = load_verified_cartridge(WORKLOAD / "run1.pt", loaded.kv_shape)
    trained = trained.to(dtype=torch.float32)
    items = [i for i in load_eval_set(WORKLOAD / "eval_set.json").items if i.id.startswith("cloze")]
    sample = random.sample(items, 20)
    ids, masks = [i.input_ids for i in sample], [i.answer_mask for i in sample]
    before = answer_token_nll(loaded.model, ids, masks, init_k, init_v)
    after = answer_token_nll(loaded.model, ids, masks, trained.keys, trained.values)
    assert after < before - 0.1, (before, after)
