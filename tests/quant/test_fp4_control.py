from __future__ import annotations

import pytest
import torch

from qualify.cartridge.types import Cartridge, ModelKVShape
from qualify.quant.apply import apply_layout
from qualify.quant.fp4 import e2m1_amax_scale, fake_quant_e2m1
from qualify.quant.layouts import ALL_LAYOUTS, Layout, UnknownLayoutError
from qualify.quant.payload import payload_table


def test_grid_values_ties_to_even_and_saturation() -> None:
    x = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.3, 2.9, 0.0, 9.0, -100.0])
    fq = fake_quant_e2m1(x)
    assert fq.values.tolist() == [6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.5, 3.0, 0.0, 6.0, -6.0]
    assert fq.saturated == 2


def test_scaled_quantization_and_nan() -> None:
    x = torch.randn(16, 3, 8)
    x[:, 1] *= 100.0
    x[0, 2, 0] = float("nan")
    scale = e2m1_amax_scale(x, per_head=True, head_axis=1)
    fq = fake_quant_e2m1(x, scale)
    assert torch.isnan(fq.values[0, 2, 0]) and fq.saturated == 0
    finite = ~torch.isnan(x)
    for h in range(3):
        assert torch.isclose(scale.flatten()[h], x[:, h][finite[:, h]].abs().max() / 6.0)
    # One mantissa bit: above half a scale step the relative error is at most a third (at 0.75).
    rel = ((fq.values - x).abs() / x.abs())[finite & (x.abs() >= 0.5 * scale)]
    assert 0.1 < rel.max() <= 1 / 3 + 1e-4


def test_control_layout_damages_keys_only_and_is_not_served() -> None:
    keys = tuple(4 * torch.randn(8, 2, 4, dtype=torch.bfloat16) for _ in range(2))
    values = tuple(torch.randn(8, 2, 4, dtype=torch.bfloat16) for _ in range(2))
    cart = Cartridge(keys=keys, values=values, frozen_tokens=1, source="mem")
    q, stats = apply_layout(cart, "K4/V16")
    assert Layout.K4_V16.is_control and stats.layout is Layout.K4_V16
    assert all(a is b for a, b in zip(q.values, cart.values, strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(q.keys, cart.keys, strict=True))
    assert stats.total_saturated_k > 0  # scale 1: keys beyond |6| clip
    _, per_head = apply_layout(cart, "K4/V16", "per_head")
    assert per_head.total_saturated_k == 0 and len(per_head.k_scales[0]) == 2
    assert Layout.K4_V16 not in ALL_LAYOUTS and len(ALL_LAYOUTS) == 4
    assert [r.layout for r in payload_table(ModelKVShape(2, 2, 4), 8, 16)] == list(ALL_LAYOUTS)


def test_accuracy_runs_refuse_the_control_layout() -> None:
    from qualify.accuracy.kv_cache import layout_write

    with pytest.raises(UnknownLayoutError, match="positive-control"):
        layout_write("K4/V16")
