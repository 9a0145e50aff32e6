"""A tiny random Llama saved as a Hugging Face directory, with a word-level tokenizer (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = ["<unk>", "<s>", "</s>", "the", "cup", "world", "won", "by", "france", "in", "2018"]


@pytest.fixture
def seed(test_seed: int) -> int:
    return test_seed


@pytest.fixture
def tiny_hf_dir(tmp_path: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    layers, kv_heads = int(torch.randint(1, 4, (), generator=gen)), int(torch.randint(1, 3, (), generator=gen))
    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=8 * kv_heads * 2,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=kv_heads * 2,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
    )
    directory = tmp_path / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(directory)
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    ).save_pretrained(directory)
    return directory
