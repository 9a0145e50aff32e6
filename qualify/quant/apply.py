"""Applying a KV layout to a cartridge: fake-quantize the FP8 (or FP4 control) side as a server stores it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from qualify.cartridge.types import Cartridge
from qualify.quant.fp4 import e2m1_amax_scale, fake_quant_e2m1
from qualify.quant.fp8 import Scaling, amax_scale, fake_quant_e4m3
from qualify.quant.layouts import Layout

# Axis of the KV heads in a cartridge tensor of shape (T, H_kv, D).
_HEAD_AXIS = 1


@dataclass(frozen=True)
class QuantStats:
    """What the fake quantization did to one cartridge, per layer.

    Scales are per layer: one entry for `none`/`per_tensor`, one per KV head for `per_head`; empty for the
    side that stays 16-bit. Saturated counts are elements with |x / scale| > 448.
    """

    layout: Layout
    scaling: Scaling
    saturated_k: tuple[int, ...]
    saturated_v: tuple[int, ...]
    k_scales: tuple[tuple[float, ...], ...]
    v_scales: tuple[tuple[float, ...], ...]
    elements_per_layer: int  # of K alone (and of V alone): T * H_kv * D

    @property
    def total_saturated_k(self) -> int:
        return sum(self.saturated_k)

    @property
    def total_saturated_v(self) -> int:
        return sum(self.saturated_v)

    @property
    def total_elements(self) -> int:
        """Elements of K and V together, over all layers."""
        return 2 * self.elements_per_layer * len(self.saturated_k)


def _quantize_side(
    tensors: tuple[torch.Tensor, ...], fp8: bool, scaling: Scaling
) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...], tuple[tuple[float, ...], ...]]:
    if not fp8:
        # Same tensor objects: lets the evaluator see that nothing changed and reuse the reference pass.
        return tensors, (0,) * len(tensors), ((),) * len(tensors)
    out, saturated, scales = [], [], []
    for t in tensors:
        scale = amax_scale(t, scaling, head_dim=_HEAD_AXIS)
        fq = fake_quant_e4m3(t, scale)
        out.append(fq.values)
        saturated.append(fq.saturated)
        scales.append(tuple(float(s) for s in scale.reshape(-1).tolist()))
    return tuple(out), tuple(saturated), tuple(scales)


def _quantize_keys_fp4(
    tensors: tuple[torch.Tensor, ...], scaling: Scaling
) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...], tuple[tuple[float, ...], ...]]:
    out, saturated, scales = [], [], []
    for t in tensors:
        if scaling is Scaling.NONE:
            scale = torch.ones(1)
        else:
            scale = e2m1_amax_scale(t, per_head=scaling is Scaling.PER_HEAD, head_axis=_HEAD_AXIS)
        fq = fake_quant_e2m1(t, scale.to(t.device))
        out.append(fq.values)
        saturated.append(fq.saturated)
        scales.append(tuple(float(v) for v in scale.reshape(-1).tolist()))
    return tuple(out), tuple(saturated), tuple(scales)


def apply_layout(
    cartridge: Cartridge, layout: Layout | str, scaling: Scaling | str = Scaling.NONE
) -> tuple[Cartridge, QuantStats]:
    """Fake-quantize the FP8 side(s) of `cartridge` as `layout` stores them; the result keeps its dtype.

    Quantization starts from the stored dtype (every E4M3 value is exact in bf16/fp16/fp32), so the round
    trip adds no second rounding. Frozen positions (the sink) are quantized too: the server stores them so.
    """
    layout = Layout.parse(layout)
    scaling = Scaling.parse(scaling)
    if layout.is_control:
        keys, sat_k, k_scales = _quantize_keys_fp4(cartridge.keys, scaling)
    else:
        keys, sat_k, k_scales = _quantize_side(cartridge.keys, layout.keys_fp8, scaling)
    values, sat_v, v_scales = _quantize_side(cartridge.values, layout.values_fp8, scaling)
    quantized = Cartridge(keys=keys, values=values, frozen_tokens=cartridge.frozen_tokens, source=cartridge.source)
    t, h, d = cartridge.keys[0].shape
    stats = QuantStats(
        layout=layout,
        scaling=scaling,
        saturated_k=sat_k,
        saturated_v=sat_v,
        k_scales=k_scales,
        v_scales=v_scales,
        elements_per_layer=int(t * h * d),
    )
    return quantized, stats
