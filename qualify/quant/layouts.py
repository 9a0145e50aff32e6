"""The four KV storage layouts a cartridge can be served in, and applying one to a cartridge."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from qualify.cartridge.types import Cartridge
from qualify.errors import QualifyError
from qualify.quant.fp4 import e2m1_amax_scale, fake_quant_e2m1
from qualify.quant.fp8 import Scaling, amax_scale, fake_quant_e4m3

# Axis of the KV heads in a cartridge tensor of shape (T, H_kv, D).
_HEAD_AXIS = 1


class UnknownLayoutError(QualifyError, ValueError):
    """A layout name that is none of K16/V16, K16/V8, K8/V16, K8/V8."""


class Layout(Enum):
    """Bits of storage for keys and values; 8 means FP8 E4M3, 16 means the cartridge's 16-bit dtype."""

    K16_V16 = "K16/V16"
    K16_V8 = "K16/V8"
    K8_V16 = "K8/V16"
    K8_V8 = "K8/V8"
    # Not a served layout: FP4 E2M1 keys (with the gate's scaling mode), the loss gate's positive control.
    K4_V16 = "K4/V16"

    @property
    def key_bits(self) -> int:
        return int(self.value.split("/")[0][1:])

    @property
    def value_bits(self) -> int:
        return int(self.value.split("/")[1][1:])

    @property
    def keys_fp8(self) -> bool:
        return self.key_bits == 8

    @property
    def values_fp8(self) -> bool:
        return self.value_bits == 8

    @property
    def is_control(self) -> bool:
        """Only for proving a measurement can see key damage; never a storage format the server uses."""
        return self.key_bits == 4

    @property
    def id(self) -> str:
        """Lowercase id for file names and config keys, e.g. `k16v8`."""
        return self.value.replace("/", "").lower()

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str | Layout) -> Layout:
        """Accept `K16/V8`, `k16v8`, `k16/v8`, `K16_V8` (any case)."""
        if isinstance(text, Layout):
            return text
        key = text.strip().lower().replace("/", "").replace("_", "").replace("-", "")
        for layout in cls:
            if layout.id == key:
                return layout
        known = ", ".join(layout.value for layout in cls)
        raise UnknownLayoutError(f"unknown KV layout {text!r}; known: {known}")


# The layouts a server stores; the control layout is left out of payload tables and accuracy runs.
ALL_LAYOUTS: tuple[Layout, ...] = tuple(layout for layout in Layout if not layout.is_control)


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
