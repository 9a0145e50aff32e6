"""Layout registry and applying a layout to a cartridge."""

from __future__ import annotations

import random

import pytest
import torch

from qualify.cartridge.types import Cartridge
from qualify.quant.apply import apply_layout
from qualify.quant.fp8 import Scaling, fake_quant_e4m3
from qualify.quant.layouts import ALL_LAYOUTS, Layout, UnknownLayoutError


def _cartridge(layers: int = 3, tokens: int = 9, heads: int = 2, dim: int = 8, scale: float = 4.0) -> Cartridge:
    gen = torch.Generator().manual_seed(random.getrandbits(31))
    keys = tuple((torch.randn(tokens, heads, dim, generator=gen) * scale).bfloat16() for _ in range(layers))
    values = tuple((torch.randn(tokens, heads, dim, generator=gen) * scale).bfloat16() for _ in range(layers))
    return Cartridge(keys=keys, values=values, frozen_tokens=1, source="mem://test")


def test_registry_names_and_flags() -> None:
    assert [layout.value for layout in ALL_LAYOUTS] == ["K16/V16", "K16/V8", "K8/V16", "K8/V8"]
    flags = {layout.value: (layout.keys_fp8, layout.values_fp8) for layout in ALL_LAYOUTS}
    assert flags == {
        "K16/V16": (False, False),
        "K16/V8": (False, True),
        "K8/V16": (True, False),
        "K8/V8": (True, True),
    }
    assert [layout.id for layout in ALL_LAYOUTS] == ["k16v16", "k16v8", "k8v16", "k8v8"]


@pytest.mark.parametrize("text", ["K16/V8", "k16v8", "k16/v8", " K16_V8 ", "K16V8"])
def test_parse_accepts_spellings(text: str) -> None:
    assert Layout.parse(text) is Layout.K16_V8


@pytest.mark.parametrize("text", ["K4/V8", "k16", "", "fp8"])
def test_parse_rejects_unknown(text: str) -> None:
    with pytest.raises(UnknownLayoutError, match="K16/V16"):
        Layout.parse(text)


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
def test_apply_layout_quantizes_exactly_the_fp8_side(layout: Layout) -> None:
    cart = _cartridge()
    before = [t.clone() for t in cart.keys + cart.values]
    out, stats = apply_layout(cart, layout)
    assert out.dtype == torch.bfloat16 and out.frozen_tokens == 1 and out.source == cart.source
    sides = ((layout.keys_fp8, cart.keys, out.keys), (layout.values_fp8, cart.values, out.values))
    for fp8, src, dst in sides:
        for s, d in zip(src, dst, strict=True):
            if fp8:
                assert not torch.equal(s, d)  # N(0, 16) bf16 values are almost never all E4M3-exact
                assert torch.equal(fake_quant_e4m3(d).values, d)  # result lies on the E4M3 grid
                assert torch.equal(d, fake_quant_e4m3(s).values)
            else:
                assert d is s
    # The input cartridge is untouched.
    for b, a in zip(before, cart.keys + cart.values, strict=True):
        assert torch.equal(a, b)
    assert stats.layout is layout and stats.scaling is Scaling.NONE
    assert stats.total_elements == 2 * 3 * 9 * 2 * 8


def test_saturation_counted_per_layer_and_side() -> None:
    cart = _cartridge(scale=1.0)
    cart.keys[1][0, 0, :3] = 1000.0
    cart.values[2][4, 1, 0] = -600.0
    _, stats = apply_layout(cart, Layout.K8_V8)
    assert stats.saturated_k == (0, 3, 0)
    assert stats.saturated_v == (0, 0, 1)
    assert stats.k_scales == ((1.0,),) * 3
    _, stats16 = apply_layout(cart, "k16v8")
    assert stats16.saturated_k == (0, 0, 0) and stats16.k_scales == ((), (), ())
    assert stats16.total_saturated_v == 1


@pytest.mark.parametrize(("scaling", "n_scales"), [(Scaling.PER_TENSOR, 1), (Scaling.PER_HEAD, 2)])
def test_amax_scaling_removes_saturation(scaling: Scaling, n_scales: int) -> None:
    cart = _cartridge(scale=2000.0)
    _, plain = apply_layout(cart, Layout.K8_V8, Scaling.NONE)
    assert plain.total_saturated_k > 0
    _, scaled = apply_layout(cart, Layout.K8_V8, scaling)
    assert scaled.total_saturated_k == 0 and scaled.total_saturated_v == 0
    assert all(len(s) == n_scales for s in scaled.k_scales + scaled.v_scales)
    for layer, s in enumerate(scaled.k_scales):
        amax = float(cart.keys[layer].float().abs().amax())
        assert max(s) == pytest.approx(amax / 448.0, rel=1e-6)
