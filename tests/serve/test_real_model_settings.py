"""The real-model engine settings: a fixed KV budget from the model's own attention shape (no vLLM needed)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from qualify.errors import DataError
from qualify.serve.e2e import real_model_settings


def _model(tmp_path: Path, **cfg: object) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def test_the_kv_budget_holds_two_full_batches_of_bf16_keys_and_values(tmp_path: Path) -> None:
    layers, kv_heads, group, head_dim = random.randint(2, 40), random.randint(1, 8), random.randint(1, 8), 64
    s = real_model_settings(_model(tmp_path, num_hidden_layers=layers, num_attention_heads=kv_heads * group,
                                   num_key_value_heads=kv_heads, hidden_size=kv_heads * group * head_dim))  # fmt: skip
    assert s.load_format == "auto" and s.model_dir == str(tmp_path)
    assert s.kv_cache_memory_bytes == 2 * s.max_num_seqs * s.max_model_len * layers * kv_heads * head_dim * 2 * 2


def test_an_explicit_head_dim_wins_over_hidden_size(tmp_path: Path) -> None:
    s = real_model_settings(_model(tmp_path, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   hidden_size=256, head_dim=128))  # fmt: skip
    assert s.kv_cache_memory_bytes == 2 * s.max_num_seqs * s.max_model_len * 2 * 2 * 128 * 4


def test_a_config_without_an_attention_shape_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"config\.json"):
        real_model_settings(_model(tmp_path, num_hidden_layers=2))
