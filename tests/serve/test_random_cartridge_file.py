"""Random benchmark cartridges live at one path per content, so that vLLM's compile cache (keyed on the engine's
whole configuration, the cartridge path included) is hit by every engine after the first of a layout."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from qualify.cache_dir import CACHE_DIR_ENV
from qualify.cartridge.io import load_cartridge
from qualify.serve.engine import random_cartridge_file
from qualify.serve.settings import EngineSettings


def test_the_same_cartridge_is_written_once_at_one_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         test_seed: int) -> None:  # fmt: skip
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    rng = random.Random(test_seed)
    settings = EngineSettings(model_dir="fixtures/qwen3_small")
    tokens, seed = rng.randint(2, 40), rng.randrange(2**31)
    first = random_cartridge_file(settings, tokens, seed)
    assert first.is_relative_to(tmp_path) and first.suffix == ".safetensors"
    stamp = first.stat().st_mtime_ns
    os.utime(first, ns=(stamp - 10**9, stamp - 10**9))  # a rewrite would move it forward again
    again = random_cartridge_file(settings, tokens, seed)
    assert again == first and again.stat().st_mtime_ns == stamp - 10**9
    cart = load_cartridge(first)
    assert cart.num_tokens == tokens and len(cart.keys) == settings.hf_config()["num_hidden_layers"]
    # Whatever changes the content changes the path; nothing half-written is left beside it.
    other_seed = random_cartridge_file(settings, tokens, seed + 1)
    other_len = random_cartridge_file(settings, tokens + 1, seed)
    other_std = random_cartridge_file(settings.model_copy(update={"cartridge_v_std": 0.5}), tokens, seed)
    assert len({first, other_seed, other_len, other_std}) == 4
    assert not torch.equal(load_cartridge(other_seed).keys[0], cart.keys[0])
    assert sorted(p.name for p in first.parent.iterdir() if "partial" in p.name) == []


def test_cartridges_of_one_label_are_served_from_one_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          test_seed: int) -> None:  # fmt: skip
    from qualify.serve.engine import served_from_stable_path

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    rng = random.Random(test_seed)
    sources = []
    for i in range(2):
        src = tmp_path / f"checkpoint{i}.pt"
        src.write_bytes(rng.randbytes(rng.randint(1, 4096)))
        sources.append(src)
    first = served_from_stable_path(sources[0], "loss-bf16-inject")
    second = served_from_stable_path(sources[1], "loss-bf16-inject")
    assert first == second and first.suffix == ".pt" and "gpus-3" in str(first)  # one path for the label on GPU 3
    assert first.read_bytes() == sources[1].read_bytes()  # the latest served cartridge, whole
    assert served_from_stable_path(sources[0], "loss-shared-k16v8") != first  # another configuration, another path
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert served_from_stable_path(sources[0], "loss-bf16-inject") != first  # engines on other GPUs never share it
    assert not [p for p in (tmp_path / "cache").rglob("*partial*")]
