"""A Hugging Face KV cache that stores keys and values the way a layout does: fake-quantized where they are written.

Attention layers call `Cache.update` with keys after RoPE and values, and attend over what it returns, so
quantizing inside `update` reproduces a serving cache that stores FP8: every later token (and the writing
token's own attention, as paged-attention kernels read back from the cache) sees the stored values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from qualify.quant.fp8 import Scaling, amax_scale, fake_quant_e4m3
from qualify.quant.layouts import Layout, UnknownLayoutError

# (keys, values) -> (stored keys, stored values); tensors are (batch, kv_heads, tokens, head_dim).
KVWriteTransform = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

# Axis of the KV heads in the (batch, kv_heads, tokens, head_dim) tensors attention writes.
_HEAD_AXIS = 1


def _fake_quant_write(x: torch.Tensor, scaling: Scaling) -> torch.Tensor:
    if scaling is Scaling.NONE:
        return fake_quant_e4m3(x).values
    # Scales are taken per sequence so a sequence's result never depends on what it was batched with; they are
    # computed on each write (a dynamic scale), which is the closest a growing cache gets to `amax_scale`'s intent.
    rows = [fake_quant_e4m3(row, amax_scale(row, scaling, head_dim=_HEAD_AXIS - 1)).values for row in x]
    return torch.stack(rows)


@dataclass(frozen=True)
class LayoutWrite:
    """The write transform of one storage layout: FP8 E4M3 on the 8-bit side(s), untouched on the 16-bit side."""

    layout: Layout
    scaling: Scaling = Scaling.NONE

    def __call__(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.layout.keys_fp8:
            keys = _fake_quant_write(keys, self.scaling)
        if self.layout.values_fp8:
            values = _fake_quant_write(values, self.scaling)
        return keys, values

    @property
    def is_identity(self) -> bool:
        return not (self.layout.keys_fp8 or self.layout.values_fp8)


def layout_write(layout: Layout | str, scaling: Scaling | str = Scaling.NONE) -> LayoutWrite:
    parsed = Layout.parse(layout)
    if parsed.is_control:
        raise UnknownLayoutError(f"{parsed} is the loss gate's positive-control layout, not a served KV layout")
    return LayoutWrite(parsed, Scaling.parse(scaling))


class TransformingCache(DynamicCache):
    """`DynamicCache` whose stored keys and values pass through `transform` on every write."""

    def __init__(self, transform: KVWriteTransform, config: Any | None = None):
        super().__init__(config=config)
        self.transform = transform

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        key_states, value_states = self.transform(key_states, value_states)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


def new_cache(transform: KVWriteTransform, config: Any | None = None) -> TransformingCache:
    """A fresh cache for one forward pass or one `generate` call."""
    return TransformingCache(transform, config=config)
