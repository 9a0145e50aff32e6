"""One forward pass of a batch of eval items behind a cartridge, down to answer-position log-probs.

The cartridge goes in as a fresh `DynamicCache` per call: `DynamicCache` appends the batch's own K/V to its
layers, so a cache reused across batches would make each batch see the previous one as extra prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from qualify.cartridge.types import Cartridge, ModelKVShape
from qualify.errors import CartridgeError
from qualify.hf_cache_arg import cache_kwargs
from qualify.loss.data import EvalItem


@dataclass(frozen=True)
class Prefix:
    """A cartridge on the model's device and dtype, per layer (1, H_kv, T, D) as the cache expects."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    num_tokens: int


@dataclass(frozen=True)
class Batch:
    """Items padded on the right, plus where their answer tokens are."""

    item_indices: tuple[int, ...]  # positions of the rows in the caller's item list
    input_ids: torch.Tensor  # (B, L) long, cut before each item's last answer token, right-padded with 0
    attention: torch.Tensor  # (B, L) long, 1 for real tokens
    answer_rows: torch.Tensor  # (N,) row of each answer token
    answer_cols: torch.Tensor  # (N,) column of the position that predicts it (token index - 1)
    answer_targets: torch.Tensor  # (N,) the answer token ids


def model_device_dtype(model: PreTrainedModel) -> tuple[torch.device, torch.dtype]:
    p = next(model.parameters())
    return p.device, p.dtype


def prepare_prefix(model: PreTrainedModel, cartridge: Cartridge) -> Prefix:
    """Check the cartridge fits the model and move it to the model's device and dtype, once per variant."""
    want = ModelKVShape.from_hf_config(model.config)
    if cartridge.shape != want:
        raise CartridgeError(cartridge.source, f"KV shape {cartridge.shape} does not fit the model's {want}")
    device, dtype = model_device_dtype(model)
    # Cartridge keys are stored post-RoPE like any KV cache entry, so they go in unchanged.
    keys = tuple(k.to(device=device, dtype=dtype).permute(1, 0, 2).unsqueeze(0) for k in cartridge.keys)
    values = tuple(v.to(device=device, dtype=dtype).permute(1, 0, 2).unsqueeze(0) for v in cartridge.values)
    return Prefix(keys=keys, values=values, num_tokens=cartridge.num_tokens)


def _input_length(item: EvalItem) -> int:
    # The last answer token is only a target, and later tokens influence no scored prediction (causal
    # attention), so the forward pass can stop right before the last answer token.
    return max(i for i, bit in enumerate(item.answer_mask) if bit)


def make_batches(items: Sequence[EvalItem], batch_size: int, device: torch.device) -> list[Batch]:
    """Group items of similar length (sorted by length) so right padding wastes little compute."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    lengths = [_input_length(item) for item in items]
    order = sorted(range(len(items)), key=lambda i: (lengths[i], i))
    batches = []
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        width = max(lengths[i] for i in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        attn = torch.zeros(len(chunk), width, dtype=torch.long)
        rows, cols, targets = [], [], []
        for row, i in enumerate(chunk):
            n = lengths[i]
            ids[row, :n] = torch.tensor(items[i].input_ids[:n], dtype=torch.long)
            attn[row, :n] = 1
            for pos, bit in enumerate(items[i].answer_mask):
                if bit:
                    rows.append(row)
                    cols.append(pos - 1)  # the output at pos - 1 predicts token pos
                    targets.append(items[i].input_ids[pos])
        batches.append(
            Batch(
                item_indices=tuple(chunk),
                input_ids=ids.to(device),
                attention=attn.to(device),
                answer_rows=torch.tensor(rows, dtype=torch.long, device=device),
                answer_cols=torch.tensor(cols, dtype=torch.long, device=device),
                answer_targets=torch.tensor(targets, dtype=torch.long, device=device),
            )
        )
    return batches


def _fresh_cache(model: PreTrainedModel, prefix: Prefix, batch_size: int) -> DynamicCache:
    data = [
        (k.expand(batch_size, -1, -1, -1), v.expand(batch_size, -1, -1, -1))
        for k, v in zip(prefix.keys, prefix.values, strict=True)
    ]
    # DynamicLayer.update concatenates into new tensors, so the expanded views are read, never written.
    return DynamicCache(data, config=model.config)


def answer_log_probs(model: PreTrainedModel, prefix: Prefix, batch: Batch) -> torch.Tensor:
    """Float32 log-probs (N, vocab) of the next token at each answer token's predicting position."""
    b, width = batch.input_ids.shape
    device = batch.input_ids.device
    attention = torch.cat(
        [torch.ones(b, prefix.num_tokens, dtype=batch.attention.dtype, device=device), batch.attention], dim=1
    )
    positions = torch.arange(prefix.num_tokens, prefix.num_tokens + width, device=device).expand(b, -1)
    decoder = model.get_decoder()
    out = decoder(
        input_ids=batch.input_ids,
        attention_mask=attention,
        position_ids=positions,
        **cache_kwargs(decoder, _fresh_cache(model, prefix, b)),
        use_cache=True,
    )
    # Only answer positions go through the LM head: the full-vocab projection is about a fifth of the
    # per-token compute of a small model (SmolLM2-135M), and log_softmax over the vocab is memory-heavy.
    hidden = out.last_hidden_state[batch.answer_rows, batch.answer_cols]
    logits = model.get_output_embeddings()(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return torch.log_softmax(logits, dim=-1)
