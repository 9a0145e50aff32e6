"""`shift_rotary_positions`: position p of the shifted model rotates exactly as p + offset of the original.

A stand-in for vLLM's rotary embedding (a position-indexed cos/sin table, and a dispatch target bound at
construction as vLLM's CustomOp binds ``_forward_method``); the glue check runs vLLM's own class the same way.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from qualify.serve.config import CartridgeServingError
from qualify.serve.rope_shift import shift_rotary_positions


class FakeRope(nn.Module):
    def __init__(self, positions: int, dim: int, gen: torch.Generator) -> None:
        super().__init__()
        self.register_buffer("cos_sin_cache", torch.randn(positions, dim, generator=gen), persistent=False)
        self.max_position_embeddings = positions
        self._forward_method = self.forward_native

    def forward_native(self, positions: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
        a, b = q.chunk(2, dim=-1)
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def forward(self, positions: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return self._forward_method(positions, q)


class Layer(nn.Module):
    def __init__(self, rope: nn.Module) -> None:
        super().__init__()
        self.rotary_emb = rope


def model_sharing(rope: nn.Module, layers: int) -> nn.Module:
    return nn.ModuleList([Layer(rope) for _ in range(layers)])


def test_shifted_positions_equal_offset_positions(test_seed: int) -> None:
    gen = torch.Generator().manual_seed(test_seed)
    positions, dim, offset, needed = 512, 16, int(torch.randint(1, 200, (), generator=gen)), 256
    rope = FakeRope(positions, dim, gen)
    before = rope.cos_sin_cache.clone()
    model = model_sharing(rope, 3)
    assert shift_rotary_positions(model, offset, needed) == 1  # one copy, shared like the original
    shifted = {id(layer.rotary_emb) for layer in model}
    assert len(shifted) == 1 and id(rope) not in shifted
    p = torch.randint(0, needed, (37,), generator=gen)
    q = torch.randn(37, dim, generator=gen)
    for layer in model:
        assert torch.equal(layer.rotary_emb(p, q), rope(p + offset, q))
    assert torch.equal(rope.cos_sin_cache, before), "the shared original (other models' rope) was changed"
    assert model[0].rotary_emb.max_position_embeddings == positions - offset


def test_distinct_ropes_get_distinct_copies(test_seed: int) -> None:
    gen = torch.Generator().manual_seed(test_seed)
    a, b = FakeRope(300, 8, gen), FakeRope(300, 8, gen)
    model = nn.ModuleList([Layer(a), Layer(b), Layer(a)])
    assert shift_rotary_positions(model, 10, 100) == 2
    assert model[0].rotary_emb is model[2].rotary_emb and model[0].rotary_emb is not model[1].rotary_emb


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda g: model_sharing(FakeRope(100, 8, g), 2), "exceeds the 100 positions"),
        (lambda g: nn.ModuleList([nn.Linear(2, 2)]), "no rotary_emb"),
        (lambda g: model_sharing(nn.Identity(), 1), "no 2-D cos_sin_cache"),
    ],
    ids=["table-too-short", "no-rotary-embedding", "not-position-indexed"],
)
def test_unservable_models_are_refused(build, match: str, test_seed: int) -> None:
    model = build(torch.Generator().manual_seed(test_seed))
    with pytest.raises(CartridgeServingError, match=match):
        shift_rotary_positions(model, 60, 64)
