"""Tiny random Llama models, prefix cartridges and eval items, built in-process (no downloads)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from qualify.cartridge.types import Cartridge
from qualify.hf_cache_arg import output_cache
from qualify.loss.data import EvalItem

# Test modules are not a package here, so helpers reach them as fixtures, not imports.

VOCAB = 61


def tiny_llama(seed: int, vocab: int = VOCAB) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def prefix_cartridge(model: LlamaForCausalLM, prefix_ids: torch.Tensor) -> Cartridge:
    """The KV cache of a real token prefix, in cartridge layout (T, H_kv, D) per layer."""
    with torch.inference_mode():
        cache = output_cache(model(prefix_ids.unsqueeze(0), use_cache=True))
    keys = tuple(layer.keys[0].permute(1, 0, 2).contiguous() for layer in cache.layers)
    values = tuple(layer.values[0].permute(1, 0, 2).contiguous() for layer in cache.layers)
    return Cartridge(keys=keys, values=values, frozen_tokens=1, source="mem://prefix")


def random_items(gen: torch.Generator, n: int, min_len: int = 4, max_len: int = 16) -> list[EvalItem]:
    items = []
    for i in range(n):
        length = int(torch.randint(min_len, max_len + 1, (), generator=gen))
        ids = torch.randint(0, VOCAB, (length,), generator=gen).tolist()
        mask = [0, *torch.randint(0, 2, (length - 1,), generator=gen).tolist()]
        # At least one answer token, not always the last: trailing context tokens must not change the loss.
        mask[1 + int(torch.randint(0, length - 1, (), generator=gen))] = 1
        items.append(EvalItem(id=f"item-{i}", text="", input_ids=tuple(ids), answer_mask=tuple(mask)))
    return items


@pytest.fixture
def seed(test_seed: int) -> int:
    # The test's own seed (tests/conftest.py: fresh per session, printed with a failure, replayable), not
    # torch's global RNG, which tiny_llama reseeds.
    return test_seed


@pytest.fixture
def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    # Tiny models are all overhead: a second thread only adds spin-waiting, badly so on a busy shared CPU.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def vocab() -> int:
    return VOCAB


@pytest.fixture
def make_model() -> Callable[[int], LlamaForCausalLM]:
    return tiny_llama


@pytest.fixture
def make_prefix_cartridge() -> Callable[[LlamaForCausalLM, torch.Tensor], Cartridge]:
    return prefix_cartridge


@pytest.fixture
def make_items() -> Callable[..., list[EvalItem]]:
    return random_items
