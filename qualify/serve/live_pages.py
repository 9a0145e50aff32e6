"""K16/V8 live pages: a shared engine with FP8 live V allocates pages sized for it.

vLLM sizes a layer's pages from the layer's cache spec (K and V head sizes in the cache dtype) and shapes them
through the layer's backend. With FP8 live V the V half needs D bytes, the room of D / 2 BF16 elements, so each
attention layer of a Cartridge* model gets a spec with ``head_size_v = D / 2`` and the backend whose cache shape
is ``(blocks, H_kv, block, D + D / 2)``; the layer's own ``head_size_v`` (its output width) stays D. vLLM offers no
hook for either, so both are set on the layer instances, checked, at model construction, before the engine sizes
its cache. The metadata builder refuses a spec that does not match the configured live V dtype.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn
from vllm.model_executor.layers.attention.attention import Attention
from vllm.v1.kv_cache_interface import FullAttentionSpec

from qualify.serve.backend import CartridgeAttentionBackend, CartridgeAttentionBackendLiveV8
from qualify.serve.config import CartridgeServingError, live_v_width


def _k16v8_spec(layer: Attention, base: Any) -> Any:
    def spec(vllm_config: Any) -> Any:
        s = base(vllm_config)
        if type(s) is not FullAttentionSpec or s.sliding_window is not None:
            raise CartridgeServingError(
                f"K16/V8 live pages: layer {layer.layer_name} has a {type(s).__name__} cache spec; only full "
                "attention without a sliding window is served"
            )
        return dataclasses.replace(s, head_size_v=live_v_width(s.head_size, "fp8_e4m3"))

    return spec


def use_k16v8_pages(model: nn.Module) -> int:
    """Give every attention layer of `model` K16/V8 pages; returns how many layers were set up."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    if not layers:
        raise CartridgeServingError("K16/V8 live pages: the model has no vLLM attention layers")
    for layer in layers:
        if layer.attn_backend is not CartridgeAttentionBackend:
            raise CartridgeServingError(
                f"K16/V8 live pages: layer {layer.layer_name} uses {layer.attn_backend.__name__}, not the CUSTOM "
                "cartridge backend (attention_config.backend must be CUSTOM in shared mode)"
            )
        layer.attn_backend = CartridgeAttentionBackendLiveV8
        layer.get_kv_cache_spec = _k16v8_spec(layer, layer.get_kv_cache_spec)
    return len(layers)
