from __future__ import annotations

import pytest
import torch

from qualify.cartridge.types import Cartridge, ModelKVShape
from qualify.cartridge.validate import validate_cartridge
from qualify.errors import CartridgeError


def problem(c: Cartridge, expected: ModelKVShape) -> str:
    with pytest.raises(CartridgeError) as info:
        validate_cartridge(c, expected)
    assert info.value.path == c.source
    return info.value.problem


def test_matching_cartridge_passes(random_cartridge):
    c = random_cartridge()
    validate_cartridge(c, c.shape)


@pytest.mark.parametrize(
    ("field", "label"),
    [("num_layers", "layer count"), ("num_kv_heads", "KV head count"), ("head_dim", "head_dim")],
)
def test_shape_mismatch_says_expected_and_actual(random_cartridge, gen, field, label):
    c = random_cartridge()
    actual = getattr(c.shape, field)
    wanted = actual + int(torch.randint(1, 5, (), generator=gen))
    expected = ModelKVShape(**{**c.shape.__dict__, field: wanted})
    assert problem(c, expected) == f"{label} mismatch: model expects {wanted}, cartridge has {actual}"


def test_zero_tokens(random_cartridge):
    c = random_cartridge(tokens=4, frozen=0)
    empty = Cartridge(tuple(k[:0] for k in c.keys), tuple(v[:0] for v in c.values), 0, "x.pt")
    assert problem(empty, c.shape) == "cartridge has zero tokens"


def test_no_trainable_tokens(random_cartridge):
    c = random_cartridge(tokens=4, frozen=0)
    all_frozen = Cartridge(c.keys, c.values, 4, "x.pt")
    assert problem(all_frozen, c.shape) == "cartridge has no trainable tokens (4 frozen of 4)"


def test_nan_and_inf_are_located_and_counted(random_cartridge, gen):
    c = random_cartridge(layers=4)
    layer = int(torch.randint(0, 4, (), generator=gen))
    n_nan = int(torch.randint(1, 3, (), generator=gen))
    keys = [k.clone() for k in c.keys]
    values = [v.clone() for v in c.values]
    flat = keys[layer].view(-1)
    flat[:n_nan] = float("nan")
    values[3].view(-1)[-1] = float("-inf")
    bad = Cartridge(tuple(keys), tuple(values), c.frozen_tokens, "bad.pt")
    text = problem(bad, c.shape)
    assert f"layer {layer} K: {n_nan} NaN, 0 Inf" in text
    assert "layer 3 V: 0 NaN, 1 Inf" in text
    assert text.startswith("non-finite values in 2 tensors")


def test_finite_check_lists_at_most_six_tensors(random_cartridge):
    c = random_cartridge(layers=4)
    nan = tuple(torch.full_like(k, float("nan")) for k in c.keys)
    text = problem(Cartridge(nan, nan, c.frozen_tokens, "x.pt"), c.shape)
    assert text.startswith("non-finite values in 8 tensors")
    assert text.endswith("; and 2 more")
