"""Token positions after the cartridge, without touching the positions tensor.

In shared mode a request's own tokens are numbered from 0 by vLLM, while the model must see them at
``cartridge_len + i``. Adding the offset to the positions in ``forward`` would create a new tensor every step
outside the compiled region, and a piecewise CUDA graph replays the address it captured, not the new one.
Instead every attention layer gets a copy of its rotary embedding whose cos/sin table starts at the offset:
row ``p`` of the copy is row ``p + offset`` of the original, so position ``p`` rotates as ``p + offset`` in eager
mode, under torch.compile and in any graph, at no cost per step. No vLLM import: the CPU tests use it too.
"""

from __future__ import annotations

import copy
import types

import torch
from torch import nn

from qualify.serve.config import CartridgeServingError

TABLE = "cos_sin_cache"  # the rotary embeddings' position-indexed table (vLLM 0.26 RotaryEmbeddingBase)


def _shifted(rope: nn.Module, offset: int, positions_needed: int) -> nn.Module:
    table = getattr(rope, TABLE, None)
    if not isinstance(table, torch.Tensor) or table.dim() != 2:
        raise CartridgeServingError(
            f"shared mode: rotary embedding {type(rope).__name__} has no 2-D {TABLE} indexed by position; only "
            "position-indexed rotary embeddings can be offset by the cartridge length"
        )
    if table.shape[0] < offset + positions_needed:
        raise CartridgeServingError(
            f"shared mode: max_model_len {positions_needed} + cartridge length {offset} exceeds the "
            f"{table.shape[0]} positions of the model's rotary table (max_position_embeddings)"
        )
    # A deep copy: layers share get_rope's cached instance, which other models in the process may use unshifted,
    # and the copy's bound forward methods must point at the copy (deepcopy rebinds them).
    new = copy.deepcopy(rope)
    for name, value in vars(new).items():
        if isinstance(value, types.MethodType) and value.__self__ is not new:
            # A dispatch target bound to another object would keep computing with that object's table.
            raise CartridgeServingError(f"shared mode: {type(rope).__name__}.{name} is bound to another object")
    setattr(new, TABLE, table[offset:].clone())
    for name in ("cos_sin_cache_bf16",):  # a second copy of the table some builds keep
        extra = getattr(rope, name, None)
        if isinstance(extra, torch.Tensor):
            setattr(new, name, extra[offset:].clone())
    if hasattr(new, "max_position_embeddings"):
        new.max_position_embeddings = int(table.shape[0]) - offset
    return new


def shift_rotary_positions(model: nn.Module, offset: int, positions_needed: int) -> int:
    """Give every module's ``rotary_emb`` a copy starting at position `offset`; returns how many tables were made.

    `positions_needed` (the engine's ``max_model_len``) must still fit in the shifted table. Raises
    `CartridgeServingError` when no module has a rotary embedding, or one that is not indexed by position.
    """
    if offset < 0:
        raise CartridgeServingError(f"shared mode: a cartridge offset must be >= 0, got {offset}")
    copies: dict[int, nn.Module] = {}
    holders = [m for m in model.modules() if isinstance(getattr(m, "rotary_emb", None), nn.Module)]
    for holder in holders:
        rope = holder.rotary_emb
        if id(rope) not in copies:
            copies[id(rope)] = _shifted(rope, offset, positions_needed)
        holder.rotary_emb = copies[id(rope)]
    if not holders:
        raise CartridgeServingError(
            "shared mode: the model has no rotary_emb modules to offset by the cartridge length"
        )
    return len(copies)
