from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

WORDS = [f"w{i}" for i in range(40)] + ["A", "B", "C", "D", "Answer:", "Q:"]


@dataclass
class TinyLM:
    model: Any
    tokenizer: Any


@pytest.fixture
def tiny_lm() -> TinyLM:
    """A random 2-layer Llama (GQA, RoPE) and a word-level tokenizer: offline, loads in milliseconds."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, ()).item()))
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config).eval()
    # Random init gives keys and values of size ~0.1, where E4M3's relative step is coarse enough to matter
    # but nothing saturates; scale the projections up so FP8 rounding has a visible effect on outputs.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.k_proj.weight.mul_(20.0)
            layer.self_attn.v_proj.weight.mul_(20.0)
    return TinyLM(model, tokenizer)
