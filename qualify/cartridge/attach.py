"""Run a Hugging Face causal LM with a KV prefix (a cartridge, or a document's own KV) in front of its input.

Prefix keys are post-RoPE, as the KV cache stores them; the input is placed at positions T, T+1, ...
after a T-token prefix, which transformers does by itself once the cache reports T seen tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from qualify.hf_cache_arg import cache_kwargs, output_cache


def prefix_cache(
    keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], config: object, batch_size: int = 1
) -> DynamicCache:
    """A fresh cache holding per-layer (T, H, D) prefix tensors; gradients flow back into them.

    Fresh per forward call: the model appends the input's own KV to the cache it is given.
    """
    layers = []
    for k, v in zip(keys, values, strict=True):
        # (T, H, D) -> (B, H, T, D); expand is a view, so a batch costs no copy of the prefix.
        layers.append(
            (
                k.permute(1, 0, 2).unsqueeze(0).expand(batch_size, -1, -1, -1),
                v.permute(1, 0, 2).unsqueeze(0).expand(batch_size, -1, -1, -1),
            )
        )
    return DynamicCache(ddp_cache_data=layers, config=config)


def hidden_states_with_prefix(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    keys: Sequence[torch.Tensor] | None,
    values: Sequence[torch.Tensor] | None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Final hidden states (B, L, hidden) of `input_ids` after the prefix (or with no prefix if None).

    Returns hidden states rather than logits so callers project only the positions they score:
    the vocabulary projection dominates the cost of short sequences.
    """
    batch = input_ids.shape[0]
    prefix_len = 0 if keys is None else int(keys[0].shape[0])
    cache = None if keys is None or values is None else prefix_cache(keys, values, model.config, batch)
    mask = None
    if attention_mask is not None:
        ones = torch.ones(batch, prefix_len, dtype=attention_mask.dtype, device=attention_mask.device)
        mask = torch.cat([ones, attention_mask], dim=1)
    positions = torch.arange(prefix_len, prefix_len + input_ids.shape[1], device=input_ids.device)
    out = model.model(
        input_ids=input_ids,
        attention_mask=mask,
        **cache_kwargs(model.model, cache),
        position_ids=positions.unsqueeze(0).expand(batch, -1),
        use_cache=cache is not None,
    )
    return out.last_hidden_state


def document_kv(model: torch.nn.Module, input_ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-layer (T, H, D) K and V the model caches for a 1-D token sequence (no gradient)."""
    with torch.no_grad():
        out = model.model(input_ids=input_ids.unsqueeze(0), use_cache=True)
    cache = output_cache(out)
    keys = [layer.keys[0].permute(1, 0, 2).contiguous() for layer in cache.layers]
    values = [layer.values[0].permute(1, 0, 2).contiguous() for layer in cache.layers]
    return keys, values
